"""Writes PyTorch pytorch_model.bin files for distllm's torch pickle reader tests.

Each file is written two ways: with real torch.save (--torch; Debian's python3-torch),
and by an emulation on the standard library alone (pickle protocol 2 with torch's
persistent ids, zipfile with stored entries), so the reader is tested on machines
without torch too. The emulation stores 2-D weights transposed (a non-contiguous
view) and its entries unaligned, which torch.save never does.

  torch_bin.py state OUT.bin [--torch|--zip64]   the state dict of torch_bin_test.cpp (--zip64:
                                                 its central directory rewritten in zip64 form,
                                                 as torch.save writes archives over 4 GiB)
  torch_bin.py param OUT.bin                      {'p': an nn.Parameter} by torch.save (_rebuild_parameter)
  torch_bin.py model SRC DST [--shards N] [--torch]
                                                 SRC/model.safetensors (f32) -> DST/pytorch_model.bin
  torch_bin.py malicious OUT.bin KIND MARKER     a pickle whose global would create MARKER
  torch_bin.py unpickle OUT.bin                  what Python's own pickle.load does with it
"""
import collections
import io
import json
import pickle
import struct
import sys
import types
import zipfile


def value(base, j):
    """Element j of a test tensor: exact in f32, f16 and bf16."""
    return (j % 17) * 0.25 - 2 + base


# --- emulation of torch.save's format without torch -------------------------------

def _fake_torch():
    torch = types.ModuleType("torch")
    utils = types.ModuleType("torch._utils")

    def _rebuild_tensor_v2(*args):
        raise RuntimeError("emulation only")

    _rebuild_tensor_v2.__module__ = "torch._utils"
    _rebuild_tensor_v2.__qualname__ = "_rebuild_tensor_v2"
    utils._rebuild_tensor_v2 = _rebuild_tensor_v2
    torch._utils = utils
    for name in ("FloatStorage", "HalfStorage", "BFloat16Storage"):
        cls = type(name, (), {"__module__": "torch"})
        setattr(torch, name, cls)
    sys.modules["torch"] = torch
    sys.modules["torch._utils"] = utils
    return torch


class Storage:
    def __init__(self, kind, key, data, esize):
        self.kind, self.key, self.data, self.numel = kind, key, data, len(data) // esize


class Tensor:
    def __init__(self, storage, offset, size, stride):
        self.storage, self.offset, self.size, self.stride = storage, offset, size, stride

    def __reduce__(self):
        rebuild = sys.modules["torch._utils"]._rebuild_tensor_v2
        return (rebuild, (self.storage, self.offset, tuple(self.size), tuple(self.stride), False,
                          collections.OrderedDict()))


class _Pickler(pickle.Pickler):
    def persistent_id(self, obj):
        if isinstance(obj, Storage):
            return ("storage", obj.kind, obj.key, "cpu", obj.numel)
        return None


def emulate_save(state, path):
    torch = sys.modules["torch"]
    storages = {}
    for t in state.values():
        storages[t.storage.key] = t.storage
    buf = io.BytesIO()
    _Pickler(buf, protocol=2).dump(state)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", buf.getvalue())
        z.writestr("archive/byteorder", "little")
        for key, s in storages.items():
            z.writestr("archive/data/" + key, s.data)
        z.writestr("archive/version", "3\n")
    del torch


def pack(dtype, values):
    if dtype == "f32":
        return struct.pack("<%df" % len(values), *values)
    if dtype == "f16":
        return struct.pack("<%de" % len(values), *values)
    raw = struct.pack("<%df" % len(values), *values)  # bf16: the upper halves (values are exact)
    return b"".join(raw[i + 2:i + 4] for i in range(0, len(raw), 4))


KINDS = {"f32": ("FloatStorage", 4), "f16": ("HalfStorage", 2), "bf16": ("BFloat16Storage", 2)}


def state_emulated(path):
    torch = _fake_torch()

    def storage(key, dtype, values):
        name, esize = KINDS[dtype]
        return Storage(getattr(torch, name), key, pack(dtype, values), esize)

    a = storage("0", "f32", [value(0, j) for j in range(12)])
    e = storage("3", "f32", [value(2, j) for j in range(10)])
    state = collections.OrderedDict()
    state["a.f32"] = Tensor(a, 0, [3, 4], [4, 1])
    state["b.f16"] = Tensor(storage("1", "f16", [value(1, j) for j in range(5)]), 0, [5], [1])
    state["c.bf16"] = Tensor(storage("2", "bf16", [value(0.5, j) for j in range(6)]), 0, [2, 3], [3, 1])
    state["d.t"] = Tensor(a, 0, [4, 3], [1, 4])
    state["e.full"] = Tensor(e, 0, [10], [1])
    state["e.view"] = Tensor(e, 4, [2, 3], [3, 1])
    state._metadata = collections.OrderedDict([("", {"version": 1})])
    emulate_save(state, path)


def state_torch(path):
    import torch
    a = torch.tensor([value(0, j) for j in range(12)], dtype=torch.float32).view(3, 4)
    e = torch.tensor([value(2, j) for j in range(10)], dtype=torch.float32)
    state = collections.OrderedDict()
    state["a.f32"] = a
    state["b.f16"] = torch.tensor([value(1, j) for j in range(5)], dtype=torch.float16)
    state["c.bf16"] = torch.tensor([value(0.5, j) for j in range(6)], dtype=torch.bfloat16).view(2, 3)
    state["d.t"] = a.t()
    state["e.full"] = e
    state["e.view"] = e[4:].view(2, 3)
    torch.save(state, path)


# --- a model directory's safetensors as pytorch_model.bin ---------------------------

def to_zip64(path):
    """Rewrites the archive's central directory with every size and offset in zip64
    extra fields and a zip64 end record, the local headers and data unchanged."""
    with open(path, "rb") as f:
        raw = f.read()
    with zipfile.ZipFile(path) as z:
        infos = z.infolist()
    eocd = raw.rindex(struct.pack("<I", 0x06054B50))
    cd_offset = struct.unpack("<I", raw[eocd + 16:eocd + 20])[0]
    cd = b""
    for i in infos:
        name = i.filename.encode()
        extra = struct.pack("<HHQQQ", 1, 24, i.file_size, i.compress_size, i.header_offset)
        cd += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 45, 45, i.flag_bits, 0, 0, 0, i.CRC, 0xFFFFFFFF,
                          0xFFFFFFFF, len(name), len(extra), 0, 0, 0, 0, 0xFFFFFFFF) + name + extra
    z64 = cd_offset + len(cd)
    tail = struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, len(infos), len(infos), len(cd), cd_offset)
    tail += struct.pack("<IIQI", 0x07064B50, 0, z64, 1)
    tail += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
    with open(path, "wb") as f:
        f.write(raw[:cd_offset] + cd + tail)
    with zipfile.ZipFile(path) as z:  # Python's reader agrees
        assert [i.filename for i in z.infolist()] == [i.filename for i in infos]
        assert z.testzip() is None


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    data = raw[8 + n:]
    out = collections.OrderedDict()
    for name, info in header.items():
        assert info["dtype"] == "F32", name
        b, e = info["data_offsets"]
        out[name] = (info["shape"], data[b:e])
    return out


def model(src, dst, shards, use_torch):
    import os
    import shutil
    os.makedirs(dst, exist_ok=True)
    shutil.copy(os.path.join(src, "config.json"), os.path.join(dst, "config.json"))
    tensors = read_safetensors(os.path.join(src, "model.safetensors"))
    names = list(tensors)
    groups = [names[k * len(names) // shards:(k + 1) * len(names) // shards] for k in range(shards)]
    if not use_torch:
        torch = _fake_torch()
    weight_map = {}
    for k, group in enumerate(groups):
        file = "pytorch_model.bin" if shards == 1 else "pytorch_model-%05d-of-%05d.bin" % (k + 1, shards)
        if use_torch:
            import torch
            state = collections.OrderedDict(
                (n, torch.frombuffer(bytearray(tensors[n][1]), dtype=torch.float32).view(tensors[n][0]).clone())
                for n in group)
            torch.save(state, os.path.join(dst, file))
        else:
            state = collections.OrderedDict()
            for i, n in enumerate(group):
                shape, data = tensors[n]
                if len(shape) == 2:  # stored transposed: the tensor is a strided view
                    r, c = shape
                    vals = struct.unpack("<%df" % (r * c), data)
                    t = [vals[i * c + j] for j in range(c) for i in range(r)]
                    s = Storage(torch.FloatStorage, str(i), struct.pack("<%df" % len(t), *t), 4)
                    state[n] = Tensor(s, 0, shape, [1, r])
                else:
                    strides = [1] * len(shape)
                    for d in range(len(shape) - 2, -1, -1):
                        strides[d] = strides[d + 1] * shape[d + 1]
                    state[n] = Tensor(Storage(torch.FloatStorage, str(i), data, 4), 0, shape, strides)
            emulate_save(state, os.path.join(dst, file))
        for n in group:
            weight_map[n] = file
    if shards > 1:
        with open(os.path.join(dst, "pytorch_model.bin.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, f)


# --- pickles that must never run ----------------------------------------------------

def malicious(path, kind, marker):
    def s(text):
        b = text.encode()
        return b"X" + struct.pack("<I", len(b)) + b

    if kind == "os":
        body = b"cos\nsystem\n" + s("touch " + marker) + b"\x85R"
    elif kind == "posix":
        body = b"cposix\nsystem\n" + s("touch " + marker) + b"\x85R"
    elif kind == "eval":
        body = b"cbuiltins\neval\n" + s("open(%r, 'w').close()" % marker) + b"\x85R"
    elif kind == "subprocess":
        body = b"csubprocess\ncall\n(" + s("touch") + s(marker) + b"l\x85R"
    elif kind == "nested":  # inside an otherwise ordinary state dict
        body = (b"ccollections\nOrderedDict\n)R" + s("x") + b"cos\nsystem\n" + s("touch " + marker) +
                b"\x85Rs")
    else:
        raise SystemExit("unknown kind " + kind)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", b"\x80\x02" + body + b".")
        z.writestr("archive/byteorder", "little")
        z.writestr("archive/version", "3\n")


def unpickle(path):
    with zipfile.ZipFile(path) as z:
        try:
            pickle.loads(z.read("archive/data.pkl"))
        except Exception as e:  # what the global returned may not be a state dict
            print("python pickle:", type(e).__name__, e)


def main(argv):
    use_torch = "--torch" in argv
    argv = [a for a in argv if a != "--torch"]
    shards = 1
    if "--shards" in argv:
        i = argv.index("--shards")
        shards = int(argv[i + 1])
        del argv[i:i + 2]
    cmd = argv[1]
    if cmd == "state":
        (state_torch if use_torch else state_emulated)(argv[2])
        if "--zip64" in argv:
            to_zip64(argv[2])
    elif cmd == "param":
        import torch
        torch.save({"p": torch.nn.Parameter(torch.arange(6, dtype=torch.float32).view(2, 3))}, argv[2])
    elif cmd == "model":
        model(argv[2], argv[3], shards, use_torch)
    elif cmd == "malicious":
        malicious(argv[2], argv[3], argv[4])
    elif cmd == "unpickle":
        unpickle(argv[2])
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
