#!/usr/bin/env python3
"""Hot reload against hostile files (issue: hardening, round 2).

1. A file rewritten in place under a reload: while `distllm serve --watch` is asked
   to reload again and again, another process rewrites the served safetensors in
   place (truncate, then write: what a plain `cp` over it does), for a few seconds.
   A mapping whose file shrinks under it raised SIGBUS and killed the server with
   nothing logged; now every such reload is refused, the server stays up and keeps
   answering, and once the file is whole again a reload installs it.
2. NaN weights: a model directory with a NaN in one tensor is refused at start
   (naming the tensor) and refused by a hot reload, while the old model keeps serving.

  reload_hostile_files_test.py DISTLLM_BINARY MAKE_TINY_MODEL_BINARY
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reload_cli_test import greedy, metric, request, start  # noqa: E402

KEY = "hostile-files-key"


def put_nan(path, tensor):
    """Writes a NaN into the first element of `tensor` (an F32 or BF16 safetensors tensor)."""
    with open(path, "r+b") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        info = header[tensor]
        f.seek(8 + n + info["data_offsets"][0])
        f.write(struct.pack("<I", 0x7FC00000) if info["dtype"] == "F32" else struct.pack("<H", 0x7FC0))


def main():
    distllm, make_model = sys.argv[1], sys.argv[2]
    tmp = tempfile.mkdtemp(prefix="distllm_hostile_")
    procs = []
    try:
        model, other = os.path.join(tmp, "model"), os.path.join(tmp, "other")
        # Big enough (tens of MB) that loading one takes a while: truncations land mid-read.
        for d, seed in ((model, 1), (other, 2)):
            subprocess.run([make_model, d, "--family", "llama", "--preset", "llama-tiny", "--tokenizer", "byte",
                            "--seed", str(seed)], check=True, stdout=subprocess.DEVNULL, timeout=120)
        weights = os.path.join(model, "model.safetensors")
        new_bytes = open(os.path.join(other, "model.safetensors"), "rb").read()
        log_path = os.path.join(tmp, "serve.log")
        proc, url = start(distllm, model, log_path, ["--api-key", KEY])
        procs.append(proc)
        before = greedy(url, KEY)

        # 1. Rewrites in place while reloads map the file.
        stop = threading.Event()
        rewrites = [0]

        def rewrite():
            t0 = time.time()
            while not stop.is_set() and time.time() - t0 < 20:
                with open(weights, "r+b") as f:  # same inode: the mapping sees it
                    f.truncate(0)
                    for at in range(0, len(new_bytes), 1 << 20):
                        f.write(new_bytes[at:at + (1 << 20)])
                        f.flush()
                rewrites[0] += 1

        writer = threading.Thread(target=rewrite)
        writer.start()
        statuses, reasons = {}, {}
        t0 = time.time()
        for _ in range(2000):  # bounded in count and time: about 5 s of reloads
            if time.time() - t0 > 5:
                break
            status, body = request(url, "/admin/reload", None, KEY, timeout=60)
            statuses[status] = statuses.get(status, 0) + 1
            if status != 200:
                why = json.loads(body)["error"]["message"]
                bucket = ("changed while being read" if "changed while" in why else
                          "shorter than its header says" if "header describes" in why or "past the end" in why else
                          "incomplete or truncated" if "complete" in why or "truncated" in why or "shorter" in why
                          else why)
                reasons[bucket] = reasons.get(bucket, 0) + 1
            assert proc.poll() is None, f"the server died (exit {proc.returncode}); log:\n{open(log_path).read()}"
        stop.set()
        writer.join(timeout=60)
        assert proc.poll() is None, f"the server died (exit {proc.returncode}); log:\n{open(log_path).read()}"
        assert rewrites[0] >= 5, rewrites
        status, _ = request(url, "/health")
        assert status == 200, status
        # Whole again: a reload installs it, and it answers as a server started on it.
        status, body = request(url, "/admin/reload", None, KEY, timeout=60)
        assert status == 200, (status, body)
        after = greedy(url, KEY)
        ref_proc, ref_url = start(distllm, other, os.path.join(tmp, "ref.log"), [])
        procs.append(ref_proc)
        assert after == greedy(ref_url, None), (after, before)
        ref_proc.terminate()
        ref_proc.wait(timeout=30)

        # 2. NaN weights: refused at start, naming the tensor ...
        bad = os.path.join(tmp, "bad")
        shutil.copytree(other, bad)
        put_nan(os.path.join(bad, "model.safetensors"), "model.layers.2.mlp.down_proj.weight")
        r = subprocess.run([distllm, "serve", "--model", bad, "--port", "0"], capture_output=True, text=True,
                           timeout=120)
        assert r.returncode != 0, r.stdout + r.stderr
        assert "tensor 'model.layers.2.mlp.down_proj.weight' holds NaN at element 0" in r.stderr, r.stderr
        # ... and by a hot reload, the old model serving on.
        version = metric(url, "model_version")
        shutil.copyfile(os.path.join(bad, "model.safetensors"), weights + ".new")
        os.replace(weights + ".new", weights)
        status, body = request(url, "/admin/reload", None, KEY, timeout=60)
        assert status != 200 and "holds NaN" in body, (status, body)
        assert metric(url, "model_version") == version
        assert greedy(url, KEY) == after
        print(f"ok: {sum(statuses.values())} reloads during {rewrites[0]} in-place rewrites "
              f"(statuses {statuses}; refusals: {reasons}), server alive; NaN weights refused at start and at reload")
        proc.terminate()
        proc.wait(timeout=60)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
