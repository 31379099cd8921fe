#!/usr/bin/python3
"""bench/peer_llamacpp.py against stand-in binaries (shell scripts printing the outputs of
`distllm bench decode`, llama-bench and llama-batched-bench): it asks for what it reports
(--batches, -n 0 where llama-bench has no -d), reads the tokens/s and roofline columns, and
fails loud when a batch row is missing. No real model or llama.cpp needed; runs in a second."""
import json
import os
import stat
import subprocess
import sys
import tempfile

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "peer_llamacpp.py")

DISTLLM = r"""#!/bin/sh
echo "$*" >> "$(dirname "$0")/distllm.args"
cat <<'X'
prefill:    512 tokens in 349.0 ms, median of 3 (1467.0 tokens/s, 336.5 GFLOP/s)

 batch    ms/step   tokens/s  weight GB/s    read GB/s   triad GB/s   roofline
     1      18.16       55.1         54.4         63.9         66.6      85.1%
X
[ -n "$NO_BATCH4" ] || echo "     4      22.46      178.1         44.0         62.9         67.2      70.0%"
"""
LLAMA_BENCH = r"""#!/bin/sh
case "$*" in *--help*) echo "usage: llama-bench [options]"; exit 0;; esac
echo "$*" >> "$(dirname "$0")/llama-bench.args"
echo '[{"n_prompt": 512, "n_gen": 0, "samples_ts": [1000.0, 1100.0, 900.0], "cpu_info": "stand-in"}]'
"""
BATCHED = r"""#!/bin/sh
case "$*" in *--help*) echo "-fa, --flash-attn [on|off|auto]"; exit 0;; esac
echo "$*" >> "$(dirname "$0")/batched.args"
echo "|    PP |     TG |    B |   N_KV |   T_PP s | S_PP t/s |   T_TG s | S_TG t/s |      T s |    S t/s |"
echo "|   128 |    128 |    1 |    256 |    0.100 |  1000.00 |    2.000 |    50.00 |    2.100 |   121.90 |"
echo "|   128 |    128 |    4 |   1024 |    0.400 |  1000.00 |    4.000 |   200.00 |    4.400 |   232.73 |"
"""


def write(path, text):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)


def run(d, env=None):
    cmd = [sys.executable, SCRIPT, "--distllm", os.path.join(d, "distllm"), "--llama-bin", d, "--model", "M",
           "--gguf-f32", "a.gguf", "--gguf-bf16", "b.gguf", "--gguf-q8", "c.gguf", "--dtypes", "f32", "--rounds", "2",
           "--batches", "1,4", "--label", "shape-x", "--llama-fa", "--quiet-wait", "0",
           "--lock", os.path.join(d, "lock"), "--json", os.path.join(d, "out.json")]
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env=dict(os.environ, **(env or {})), timeout=60)


def main():
    with tempfile.TemporaryDirectory() as d:
        write(os.path.join(d, "distllm"), DISTLLM)
        write(os.path.join(d, "llama-bench"), LLAMA_BENCH)
        write(os.path.join(d, "llama-batched-bench"), BATCHED)
        p = run(d)
        assert p.returncode == 0, p.stdout
        out = p.stdout
        # Asked for: the chosen batches on both sides; no tg128 from llama-bench without -d.
        dargs = open(os.path.join(d, "distllm.args")).read().split("\n")[0].split()
        assert dargs[dargs.index("--batch") + 1] == "1,4", dargs
        for line in open(os.path.join(d, "llama-bench.args")).read().splitlines():
            a = line.split()
            assert a[a.index("-n") + 1] == "0" and "-d" not in a, line
        for line in open(os.path.join(d, "batched.args")).read().splitlines():
            a = line.split()
            assert a[a.index("-npl") + 1] == "1,4", line
        # Reported: medians, ratios and distllm's roofline share per decode row.
        assert "shape-x: medians of 2 rounds" in out, out
        rows = [l for l in out.splitlines() if l.startswith("| f32 / F32")]
        want = {"prefill 512 (pp512)": ("1467.0", "1000.0", "1.47", ""),
                "batched decode b1 (batched-bench npl 1)": ("55.1", "50.0", "1.10", "85.1%"),
                "batched decode b4 (batched-bench npl 4)": ("178.1", "200.0", "0.89", "70.0%"),
                "batched decode b4, llama.cpp -fa": ("178.1", "200.0", "0.89", "70.0%")}
        for metric, cells in want.items():
            row = [r for r in rows if f"| {metric} " in r]
            assert len(row) == 1, (metric, rows)
            got = tuple(c.strip() for c in row[0].split("|")[3:7])
            assert got == cells, (metric, got, cells)
        recs = [json.loads(l) for l in open(os.path.join(d, "out.json"))]
        assert len(recs) == 2 * 5 and all(r["label"] == "shape-x" for r in recs), recs
        assert [r["distllm_roofline_pct"] for r in recs if r["metric"].startswith("batched decode b4 (")] == [70.0, 70.0]
        # A decode row missing from distllm's output is an error naming the batch, not a zero.
        p = run(d, {"NO_BATCH4": "1"})
        assert p.returncode != 0 and "no decode rows for batches [4]" in p.stdout, p.stdout
    print("ok")


if __name__ == "__main__":
    main()
