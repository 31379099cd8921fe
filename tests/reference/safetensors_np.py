"""Minimal safetensors reader/writer on numpy (no safetensors package on Debian).

Independent of distllm's C++ implementation, so round trips between the two check
each other against the format in shared/REFERENCE.md.
"""
import json
import struct

import numpy as np

_DTYPES = {
    "F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32,
    "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_, "U16": np.uint16,
    "U32": np.uint32, "U64": np.uint64,
}
_NAMES = {np.dtype(v): k for k, v in _DTYPES.items()}


def load(path):
    """Returns ({name: np.ndarray}, metadata). BF16 tensors come back as float32."""
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    data = raw[8 + n:]
    meta = header.pop("__metadata__", {})
    out = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        buf = data[begin:end]
        if info["dtype"] == "BF16":
            u16 = np.frombuffer(buf, dtype=np.uint16).astype(np.uint32) << 16
            arr = u16.view(np.float32)
        else:
            arr = np.frombuffer(buf, dtype=_DTYPES[info["dtype"]])
        out[name] = arr.reshape(info["shape"]).copy()
    return out, meta


def _bf16_bytes(arr):
    """float32 -> bf16 bytes, round to nearest even."""
    u32 = np.ascontiguousarray(arr, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (u32 + 0x7FFF + ((u32 >> 16) & 1)) >> 16
    return rounded.astype(np.uint16).tobytes()


def save(path, tensors, metadata=None, bf16=()):
    """tensors: {name: np.ndarray}; names listed in bf16 are stored as BF16."""
    entries = []
    for name, arr in tensors.items():
        arr = np.ascontiguousarray(arr)
        if name in bf16:
            entries.append((name, "BF16", list(arr.shape), _bf16_bytes(arr), 2))
        else:
            entries.append((name, _NAMES[arr.dtype], list(arr.shape), arr.tobytes(), arr.dtype.itemsize))
    entries.sort(key=lambda e: -e[4])
    header = {}
    if metadata:
        header["__metadata__"] = dict(metadata)
    offset = 0
    for name, dt, shape, data, _ in entries:
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    text = json.dumps(header).encode("utf-8")
    text += b" " * ((8 - (8 + len(text)) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for e in entries:
            f.write(e[3])
