#!/usr/bin/python3
"""Side-by-side inference benchmark: distllm vs llama.cpp, both ALREADY BUILT.

The two sides do the same work: the same weights (converted), the same thread count,
K/V caches of the same size (distllm bf16 against llama.cpp's default F16), and
decode at the same positions: every decode figure is tokens generated at positions
C .. C+127 after a C-token context (C = --context), on both sides:
  distllm bench decode --model M --context C --rounds 4 --steps 32 --batch 1,4,8,16
      --prefill P --threads T --dtype D --kv-cache-dtype bf16
      (4 rounds of 32 steps cover positions C..C+127; the median round is reported)
  llama-bench -m G -t T -p P -n 128 -d C -r 3 -o json      (pp P, and tg128 at depth C where -d exists;
      without -d, -n 0: its tg128 from position 0 is not the same work, so it is not run)
  llama-batched-bench -m G -t T -c 4096 -b 2048 -ub 512 -npp C -ntg 128 -npl 1,4,8,16 [-fa]
per weight pair: distllm f32 / bf16 / int8 against llama.cpp F32 / BF16 (and F16) /
Q8_0. It compares
  * decode, batch 1 (against llama-bench tg128 at depth C, and batched-bench npl 1)
  * prefill of P tokens from an empty cache (bench decode's `prefill:` line vs ppP)
  * batched decode at 4, 8 and 16 sequences (batched-bench S_TG; with --llama-fa also
    with llama.cpp's flash attention); --batches picks the batch sizes (e.g. 1,4 for big models)
distllm's share of its memory roofline (bench decode's `roofline` column) is shown per decode row.
Runs are quiet or dropped: every command runs alone under the shared benchmark lock
(/tmp/bench.lock, which every benchmark of the project takes), first waits up to
--quiet-wait seconds for the machine to go idle, and a run during which other
processes used more than --max-foreign cores is run again (at most --retries times;
dropped runs are counted in the output). Rounds alternate which side goes first.
Prints per-round figures, then medians over rounds and the ratio distllm / llama.cpp.

It does not download or build anything; the GGUF files must describe the same
weights as --model (see docs/benchmarks.md, "Side by side with llama.cpp").

usage: peer_llamacpp.py --distllm BIN --llama-bin DIR --model HF_DIR
         --gguf-f32 F --gguf-bf16 F [--gguf-f16 F] --gguf-q8 F [--llama-fa] [--rounds 3]
         [--threads 2] [--context 128] [--batches 1,4,8,16] [--label NAME] [--quiet-wait 60]
         [--max-foreign 0.1] [--json OUT]
"""
import argparse
import fcntl
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import time

CLK = os.sysconf("SC_CLK_TCK")


def busy_seconds():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal
    return (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / CLK


QUIET_WAIT = 60.0    # seconds to wait, at most, for the machine to go idle before each run
MAX_FOREIGN = 0.1    # cores other processes may use during a run before it is run again
RETRIES = 3          # runs of one command at most
DROPPED = []         # commands run again because others disturbed them


def wait_quiet():
    """Under the lock, wait (up to QUIET_WAIT s) until other processes use < 0.2 cores."""
    deadline = time.monotonic() + QUIET_WAIT
    while time.monotonic() < deadline:
        b0 = busy_seconds()
        time.sleep(1.0)
        if busy_seconds() - b0 < 0.2:
            return


def run_once(cmd, lock, env=None):
    """Run cmd holding the lock; returns (stdout+stderr, wall s, foreign cores)."""
    with open(lock, "a") as lf:
        fcntl.flock(lf, fcntl.LOCK_EX)
        try:
            wait_quiet()
            r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            b0, t0 = busy_seconds(), time.monotonic()
            p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
            t1, b1 = time.monotonic(), busy_seconds()
            r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        finally:
            fcntl.flock(lf, fcntl.LOCK_UN)
    mine = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    wall = t1 - t0
    foreign = max(0.0, (b1 - b0) - mine) / wall if wall > 0 else 0.0
    if p.returncode != 0:
        sys.stderr.write(p.stdout[-3000:])
        raise SystemExit(f"command failed ({p.returncode}): {' '.join(cmd)}")
    return p.stdout, wall, foreign


def run(cmd, lock, env=None):
    """run_once, again while other processes disturbed it (up to RETRIES runs)."""
    for attempt in range(RETRIES):
        out, wall, foreign = run_once(cmd, lock, env)
        if foreign <= MAX_FOREIGN:
            return out, wall, foreign
        DROPPED.append((os.path.basename(cmd[0]), foreign))
        print(f"  dropped a run of {os.path.basename(cmd[0])}: other processes used {foreign:.2f} cores", flush=True)
    return out, wall, foreign  # the last one, with its foreign load shown


BATCHES = (1, 4, 8, 16)  # --batches
DECODE_ROUNDS, DECODE_STEPS = 4, 32  # 128 decode positions, as llama.cpp's -n 128 / -ntg 128


def distllm_decode(a, dtype):
    """One `bench decode` run: decode tokens/s at positions C..C+127 per batch, and the prefill of a.prefill tokens."""
    out, wall, foreign = run([a.distllm, "bench", "decode", "--model", a.model, "--prefill", str(a.prefill),
                              "--batch", ",".join(map(str, BATCHES)), "--context", str(a.context),
                              "--rounds", str(DECODE_ROUNDS), "--steps", str(DECODE_STEPS), "--threads", str(a.threads),
                              "--dtype", dtype, "--kv-cache-dtype", a.kv_cache_dtype], a.lock)
    res, roofline = {}, {}
    prefill = None
    for line in out.splitlines():
        m = re.match(r"^\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+([\d.]+)%", line)
        if m:
            res[int(m.group(1))] = float(m.group(3))  # tokens/s
            roofline[int(m.group(1))] = float(m.group(4))  # % of the weights' + K/V bytes at the read bandwidth
        m = re.match(r"^prefill:\s+(\d+) tokens in ([\d.]+) ms, median of \d+ \(([\d.]+) tokens/s", line)
        if m:
            prefill = {"tokens": int(m.group(1)), "ms": float(m.group(2)), "tok_s": float(m.group(3))}
    if prefill is None or prefill["tokens"] != a.prefill:
        raise SystemExit("no `prefill:` line for %d tokens in bench decode's output:\n%s" % (a.prefill, out[-2000:]))
    missing = [b for b in BATCHES if b not in res]
    if missing:
        raise SystemExit(f"no decode rows for batches {missing} in bench decode's output:\n{out[-2000:]}")
    return {"tok_s": res, "roofline": roofline, "prefill": prefill, "foreign": foreign}


def distllm_generate_prefill(a, dtype):
    """The older, cold prefill figure: generate's own prompt timing in a fresh process."""
    out, wall, foreign = run([a.distllm, "generate", "--model", a.model, "--prompt-file", a.prompt_file,
                              "--max-tokens", "1", "--temperature", "0", "--threads", str(a.threads),
                              "--dtype", dtype], a.lock)
    m = re.search(r"prompt (\d+) tokens \((\d+) ms\)", out)
    if not m:
        raise SystemExit("no prefill line in generate's output:\n" + out[-2000:])
    n, ms = int(m.group(1)), float(m.group(2))
    return {"tokens": n, "ms": ms, "tok_s": n / (ms / 1e3), "foreign": foreign}


def llama_help(a, tool):
    p = subprocess.run([os.path.join(a.llama_bin, tool), "--help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    return p.stdout


def llama_bench(a, gguf):
    """pp P, and tg128 at depth C where this llama-bench has -d (the same positions as distllm's decode)."""
    gen = ["-n", "128", "-d", str(a.context)] if a.llama_has_depth else ["-n", "0"]
    out, wall, foreign = run([os.path.join(a.llama_bin, "llama-bench"), "-m", gguf, "-t", str(a.threads),
                              "-p", str(a.prefill), "-r", "3", "-o", "json"] + gen, a.lock)
    js = json.loads(out[out.index("["):out.rindex("]") + 1])
    res = {}
    for t in js:
        key = f"pp{t['n_prompt']}" if t["n_prompt"] else f"tg{t['n_gen']}"
        res[key] = statistics.median(t["samples_ts"])
    return {"tok_s": res, "foreign": foreign, "cpu_info": js[0].get("cpu_info", "")}


def llama_batched(a, gguf, fa=False):
    out, wall, foreign = run([os.path.join(a.llama_bin, "llama-batched-bench"), "-m", gguf, "-t", str(a.threads),
                              "-c", "4096", "-b", "2048", "-ub", "512", "-npp", str(a.context), "-ntg", "128",
                              "-npl", ",".join(map(str, BATCHES))] + (a.llama_fa_args if fa else []), a.lock)
    res, sysinfo = {}, ""
    for line in out.splitlines():
        if line.startswith("system_info"):
            sysinfo = line.strip()
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 10 and cells[2].isdigit():
            res[int(cells[2])] = float(cells[7])  # S_TG t/s
    return {"tok_s": res, "foreign": foreign, "system_info": sysinfo}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--distllm", required=True)
    ap.add_argument("--llama-bin", required=True, help="folder with llama-bench and llama-batched-bench")
    ap.add_argument("--model", required=True, help="HF model directory distllm reads")
    ap.add_argument("--gguf-f32", required=True)
    ap.add_argument("--gguf-bf16", required=True, help="the BF16 GGUF: distllm bf16's like-for-like peer")
    ap.add_argument("--gguf-f16", help="also compare distllm bf16 with llama.cpp's F16 (the same bytes per weight)")
    ap.add_argument("--gguf-q8", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--context", type=int, default=128, help="decode positions are C .. C+127 on both sides")
    ap.add_argument("--prefill", type=int, default=512)
    ap.add_argument("--batches", default="1,4,8,16", help="decode batch sizes (sequences), both sides")
    ap.add_argument("--label", default="", help="a name for the model, printed and written to --json")
    ap.add_argument("--generate-prefill", action="store_true",
                    help="also time `distllm generate` on a --prefill-token prompt (cold, fresh process) as an extra row")
    ap.add_argument("--prompt-file", help="with --generate-prefill: prompt of --prefill tokens (default: made up)")
    ap.add_argument("--lock", default="/tmp/bench.lock", help="the benchmark lock every benchmark takes")
    ap.add_argument("--llama-fa", action="store_true", help="also run llama-batched-bench with -fa on (flash attention)")
    ap.add_argument("--dtypes", default="f32,bf16,int8", help="distllm dtypes to run (paired with F32, BF16/F16, Q8_0)")
    ap.add_argument("--kv-cache-dtype", default="bf16",
                    help="distllm's K/V cache dtype: bf16 is the size of llama.cpp's default F16 cache")
    ap.add_argument("--quiet-wait", type=float, default=60.0,
                    help="before each run, wait up to this many seconds for other processes to go idle")
    ap.add_argument("--max-foreign", type=float, default=0.1,
                    help="a run during which other processes used more cores than this is run again")
    ap.add_argument("--retries", type=int, default=3, help="runs of one command at most (see --max-foreign)")
    ap.add_argument("--json", help="append every measurement here (JSON lines)")
    a = ap.parse_args()
    global BATCHES
    BATCHES = tuple(int(b) for b in a.batches.split(","))
    if a.generate_prefill and not a.prompt_file:
        # Byte-level tokenizers give one token per ASCII byte; other tokenizers: pass --prompt-file.
        a.prompt_file = "/tmp/peer_llamacpp_prompt.txt"
        with open(a.prompt_file, "w") as f:
            f.write(("lorem ipsum dolor sit amet " * 100)[:a.prefill])

    # Flags that changed between llama.cpp versions: llama-bench's -d (decode depth)
    # and flash attention's -fa (a switch, later -fa on|off|auto).
    a.llama_has_depth = "--n-depth" in llama_help(a, "llama-bench")
    a.llama_fa_args = ["-fa", "on"] if "[on|off|auto]" in llama_help(a, "llama-batched-bench") else ["-fa"]
    global QUIET_WAIT, MAX_FOREIGN, RETRIES
    QUIET_WAIT, MAX_FOREIGN, RETRIES = a.quiet_wait, a.max_foreign, max(1, a.retries)
    pairs = [("f32", a.gguf_f32, "F32"), ("bf16", a.gguf_bf16, "BF16")]
    if a.gguf_f16:
        pairs.append(("bf16", a.gguf_f16, "F16"))
    pairs.append(("int8", a.gguf_q8, "Q8_0"))
    pairs = [p for p in pairs if p[0] in a.dtypes.split(",")]
    rows = []  # (round, dtype, metric, distllm, llama, foreign_d, foreign_l)
    info = {}
    jf = open(a.json, "a") if a.json else None
    # Batch-1 decode at positions C..C+127 on both sides: llama-bench's tg128 at depth C
    # where it has -d; otherwise only batched-bench's npl 1 row (its tg128 decodes
    # positions 0..127, which is not the same work).
    tg = f"tg128 at depth {a.context}"
    for rnd in range(a.rounds):
        for d, gguf, lname in pairs:
            def dl():
                return distllm_decode(a, d), (distllm_generate_prefill(a, d) if a.generate_prefill else None)

            def ll():
                return llama_bench(a, gguf), llama_batched(a, gguf), (llama_batched(a, gguf, True) if a.llama_fa else None)

            if rnd % 2 == 0:
                (dd, dp), (lb, lbb, lfa) = dl(), ll()
            else:
                (lb, lbb, lfa), (dd, dp) = ll(), dl()
            info["cpu_info"], info["system_info"] = lb["cpu_info"], lbb["system_info"]
            roof = dd["roofline"]
            rec = ([(f"decode b1 ({tg})", dd["tok_s"].get(1), lb["tok_s"].get("tg128"), dd["foreign"], lb["foreign"],
                     roof.get(1))]
                   if a.llama_has_depth else []) + [
                (f"prefill {a.prefill} (pp{a.prefill})", dd["prefill"]["tok_s"], lb["tok_s"].get(f"pp{a.prefill}"),
                 dd["foreign"], lb["foreign"], None),
            ] + [(f"batched decode b{b} (batched-bench npl {b})", dd["tok_s"].get(b), lbb["tok_s"].get(b),
                  dd["foreign"], lbb["foreign"], roof.get(b)) for b in BATCHES]
            if dp:
                rec.append((f"prefill {a.prefill} (generate, cold) (pp{a.prefill})", dp["tok_s"],
                            lb["tok_s"].get(f"pp{a.prefill}"), dp["foreign"], lb["foreign"], None))
            if lfa:
                rec += [(f"batched decode b{b}, llama.cpp -fa", dd["tok_s"].get(b), lfa["tok_s"].get(b),
                         dd["foreign"], lfa["foreign"], roof.get(b)) for b in BATCHES]
            for metric, x, y, fx, fy, rf in rec:
                rows.append((rnd, f"{d} / {lname}", metric, x, y, fx, fy, rf))
                print(f"round {rnd + 1} {d:>4} vs {lname:<4} {metric:<42} distllm {x:9.1f} tok/s  "
                      f"llama.cpp {y:9.1f} tok/s  ratio {x / y:5.2f}  (foreign cores {fx:.2f} / {fy:.2f})"
                      + (f"  distllm roofline {rf:.1f}%" if rf is not None else ""), flush=True)
                if jf:
                    jf.write(json.dumps({"label": a.label, "round": rnd + 1, "dtype": f"{d}/{lname}",
                                         "metric": metric, "distllm_tok_s": x, "llama_tok_s": y,
                                         "distllm_roofline_pct": rf, "foreign_distllm": fx,
                                         "foreign_llama": fy}) + "\n")
                    jf.flush()
    print(f"\nllama.cpp cpu_info: {info.get('cpu_info')}\n{info.get('system_info')}\n")
    print(f"{a.label + ': ' if a.label else ''}medians of {a.rounds} rounds, tokens/s, {a.threads} threads, decode at positions {a.context}.."
          f"{a.context + 127}, distllm K/V {a.kv_cache_dtype} (llama.cpp F16); "
          f"{len(DROPPED)} disturbed run(s) dropped and run again")
    print(f"| {'dtypes':<12} | {'measure':<42} | {'distllm':>9} | {'llama.cpp':>9} | {'ratio':>5} | {'roofline':>8} |")
    print(f"|{'-' * 14}|{'-' * 44}|{'-' * 11}|{'-' * 11}|{'-' * 7}|{'-' * 10}|")
    keys = []
    for r in rows:
        if (r[1], r[2]) not in keys:
            keys.append((r[1], r[2]))
    for dt, metric in keys:
        xs = [r[3] for r in rows if (r[1], r[2]) == (dt, metric)]
        ys = [r[4] for r in rows if (r[1], r[2]) == (dt, metric)]
        rfs = [r[7] for r in rows if (r[1], r[2]) == (dt, metric) and r[7] is not None]
        ratios = [x / y for x, y in zip(xs, ys)]
        mx, my = statistics.median(xs), statistics.median(ys)
        rf = f"{statistics.median(rfs):7.1f}%" if rfs else f"{'':>8}"
        print(f"| {dt:<12} | {metric:<42} | {mx:9.1f} | {my:9.1f} | {mx / my:5.2f} | {rf} |  per-round ratios "
              + ", ".join(f"{q:.2f}" for q in ratios))


if __name__ == "__main__":
    main()
