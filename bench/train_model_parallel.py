#!/usr/bin/env python3
"""Training with model parallelism vs data parallelism on the same cores.

usage: bench/train_model_parallel.py [--preset gpt2-tiny] [--batch 8] [--seq 256]
                                     [--steps 5] [--rounds 3] [--ranks 2]
                                     [--micro-batches 4] [--layouts ddp,pp-1f1b,...]
                                     [--model-flags "--vocab-size 256"]

Runs `distllm bench train --json` for each layout in one run, interleaved over
--rounds rounds, each with the same global batch (--batch sequences) on --ranks
ranks x 1 thread:
  single   one process, --ranks threads
  ddp      --ranks ranks, data parallel
  tp       --mesh tp=<ranks>       (tensor parallel)
  tp+sp    --mesh tp=<ranks> --sequence-parallel
  pp-gpipe --mesh pp=<ranks> --pp-schedule gpipe, --micro-batches of batch/m
  pp-1f1b  --mesh pp=<ranks> --pp-schedule 1f1b, the same micro-batches
  pp-int2  --mesh pp=<ranks> --pp-schedule interleaved --virtual-stages 2, the same
  pp-int3  ... --virtual-stages 3 (the model needs ranks x 3 layers)
and prints the median tokens/s, the ratio to ddp, communication per step, the
pipeline bubble per stage (median idle share of the schedule, and the ideal
(p-1)/(v*m+p-1)) and the peak memory of each rank (MiB of the tracked buffers). Holds /tmp/bench.lock
so no other benchmark runs at the same time.
"""
import argparse
import fcntl
import json
import os
import statistics
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def run(args, ranks, threads, extra, batch):
    cmd = [args.distllm, "bench", "train", "--json", "--preset", args.preset, "--batch", str(batch),
           "--seq", str(args.seq), "--steps", str(args.steps), "--warmup-steps", "2", "--threads", str(threads),
           "--peak-size", "512"] + args.model_flags.split() + extra
    if ranks > 1:
        cmd = ["mpirun", "--oversubscribe", "--allow-run-as-root", "--bind-to", "none", "-n", str(ranks)] + cmd
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads([line for line in out.splitlines() if line.startswith("{")][-1])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--distllm", default=os.path.join(ROOT, "build", "release", "bin", "distllm"))
    p.add_argument("--preset", default="gpt2-tiny")
    p.add_argument("--batch", type=int, default=8, help="global batch (sequences per step)")
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--micro-batches", type=int, default=4, help="pipeline micro-batches (divides --batch)")
    p.add_argument("--layouts", default="single,ddp,tp,tp+sp,pp-gpipe,pp-1f1b", help="comma-separated subset")
    p.add_argument("--model-flags", default="", help="extra model flags for every run, e.g. '--vocab-size 256'")
    args = p.parse_args()
    n, m = args.ranks, args.micro_batches
    layouts = {  # name: (ranks, threads per rank, flags, batch per data-parallel rank)
        "single": (1, n, [], args.batch),
        "ddp": (n, 1, ["--strategy", "ddp"], args.batch // n),
        "tp": (n, 1, ["--mesh", f"tp={n}"], args.batch),
        "tp+sp": (n, 1, ["--mesh", f"tp={n}", "--sequence-parallel"], args.batch),
        "pp-gpipe": (n, 1, ["--mesh", f"pp={n}", "--micro-batches", str(m), "--pp-schedule", "gpipe"], args.batch // m),
        "pp-1f1b": (n, 1, ["--mesh", f"pp={n}", "--micro-batches", str(m), "--pp-schedule", "1f1b"], args.batch // m),
    }
    for v in (2, 3):  # the interleaved schedule with v model chunks per stage
        layouts[f"pp-int{v}"] = (n, 1, ["--mesh", f"pp={n}", "--micro-batches", str(m), "--pp-schedule", "interleaved",
                                        "--virtual-stages", str(v)], args.batch // m)
    layouts = {k: v for k, v in layouts.items() if k in args.layouts.split(",")}
    results = {k: [] for k in layouts}
    with open("/tmp/bench.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for _ in range(args.rounds):
            for name, (ranks, threads, extra, batch) in layouts.items():
                results[name].append(run(args, ranks, threads, extra, batch))
    base = "ddp" if "ddp" in results else next(iter(results))
    ddp = statistics.median(r["tokens_per_s"] for r in results[base])
    print(f"{args.preset} {args.model_flags}, global batch {args.batch} x {args.seq}, {n} cores; "
          f"medians of {args.rounds} rounds")
    print(f"{'layout':8} {'tokens/s':>10} {'vs ' + base:>7} {'comm ms/step':>13} {'bubble per stage (ideal)':>25} "
          f"{'peak MiB per rank':>18}")
    for name, rs in results.items():
        tok = statistics.median(r["tokens_per_s"] for r in rs)
        comm = statistics.median(r["comm_ms"] for r in rs)
        peaks = [statistics.median(r["per_rank"][k]["peak_mem_mib"] for r in rs) for k in range(len(rs[0]["per_rank"]))]
        bubble = "-"
        if "bubble" in rs[0]:
            stages = [statistics.median(r["bubble"][k] for r in rs) for k in range(len(rs[0]["bubble"]))]
            bubble = " ".join(f"{100 * b:.0f}%" for b in stages) + f" ({100 * rs[0]['bubble_ideal']:.0f}%)"
        peak = " ".join(f"{x:.0f}" for x in peaks)
        print(f"{name:8} {tok:10.0f} {tok / ddp:6.2f}x {comm:13.1f} {bubble:>25} {peak:>18}")


if __name__ == "__main__":
    main()
