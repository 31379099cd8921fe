#!/usr/bin/env python3
"""Data-parallel training side by side: distllm DDP / ZeRO-3 and PyTorch DDP (gloo).

usage: bench/ddp_vs_pytorch.py [--preset gpt2-tiny] [--batch 4] [--seq 256]
                               [--ranks 2] [--steps 3] [--warmup 1] [--repeats 3]

In one run, alternating, each repeat measures (1 thread per rank, the same per-rank
batch everywhere):
  distllm 1 rank (strategy none)  ->  the single-rank baseline
  distllm N ranks DDP             ->  scaling efficiency = tok/s / (N x baseline),
                                      and the share of all-reduce time hidden
  distllm N ranks ZeRO-3          ->  ZeRO-3 / DDP tokens/s
  PyTorch 1.13 DDP, gloo, N ranks ->  distllm DDP / PyTorch DDP tokens/s
and prints medians. distllm runs under mpirun (shared-memory backend); PyTorch
uses Debian's /usr/bin/python3 with the OpenMP build of OpenBLAS
(shared/REFERENCE.md). Hold a lock so no other benchmark runs at the same time:
  flock /tmp/bench.lock python3 bench/ddp_vs_pytorch.py
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OPENMP_BLAS = "/usr/lib/x86_64-linux-gnu/openblas-openmp"
sys.path.insert(0, HERE)
from train_vs_pytorch import PRESETS  # noqa: E402  (the same model definitions)


def torch_worker(rank, args, port, out):
    import torch
    import torch.distributed as dist
    sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
    import reference_model as ref

    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=args.ranks)
    torch.manual_seed(0)
    j = dict(PRESETS[args.preset])
    j["vocab_size"] = 50257
    j.setdefault("n_positions", 1024)
    j.setdefault("max_position_embeddings", 1024)
    cfg = ref.Config(j)
    C, V = cfg.C, cfg.vocab
    shapes = {}
    if cfg.family == "gpt2":
        shapes["transformer.wte.weight"] = (V, C)
        shapes["transformer.wpe.weight"] = (1024, C)
        for i in range(cfg.L):
            p = f"transformer.h.{i}."
            shapes.update({p + "ln_1.weight": (C,), p + "ln_1.bias": (C,), p + "attn.c_attn.weight": (C, 3 * C),
                           p + "attn.c_attn.bias": (3 * C,), p + "attn.c_proj.weight": (C, C),
                           p + "attn.c_proj.bias": (C,), p + "ln_2.weight": (C,), p + "ln_2.bias": (C,),
                           p + "mlp.c_fc.weight": (C, 4 * C), p + "mlp.c_fc.bias": (4 * C,),
                           p + "mlp.c_proj.weight": (4 * C, C), p + "mlp.c_proj.bias": (C,)})
        shapes["transformer.ln_f.weight"] = (C,)
        shapes["transformer.ln_f.bias"] = (C,)
    else:
        KVD, I = cfg.KV * cfg.D, cfg.I
        shapes["model.embed_tokens.weight"] = (V, C)
        for i in range(cfg.L):
            p = f"model.layers.{i}."
            shapes.update({p + "input_layernorm.weight": (C,), p + "self_attn.q_proj.weight": (cfg.H * cfg.D, C),
                           p + "self_attn.k_proj.weight": (KVD, C), p + "self_attn.v_proj.weight": (KVD, C),
                           p + "self_attn.o_proj.weight": (C, cfg.H * cfg.D),
                           p + "post_attention_layernorm.weight": (C,), p + "mlp.gate_proj.weight": (I, C),
                           p + "mlp.up_proj.weight": (I, C), p + "mlp.down_proj.weight": (C, I)})
        shapes["model.norm.weight"] = (C,)
        shapes["lm_head.weight"] = (V, C)

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.names = list(shapes)
            self.p = torch.nn.ParameterList(
                [torch.nn.Parameter(torch.randn(*s) * 0.02 if len(s) > 1 else torch.ones(*s)) for s in shapes.values()])

        def forward(self, x):
            return ref.forward(cfg, dict(zip(self.names, self.p)), x)

    model = torch.nn.parallel.DistributedDataParallel(Model())  # 25 MiB buckets, overlapped all-reduce
    params = list(model.parameters())
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-4, betas=(0.9, 0.95), foreach=True)
    g = torch.Generator().manual_seed(rank)
    x = torch.randint(0, V, (args.batch, args.seq), generator=g)
    y = torch.randint(0, V, (args.batch, args.seq), generator=g)
    times = []
    for s in range(args.warmup + args.steps):
        dist.barrier()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = ref.loss_fn(model(x), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        if s >= args.warmup:
            times.append(time.perf_counter() - t0)
    slowest = torch.tensor([statistics.median(times)])
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    if rank == 0:
        ms = slowest.item() * 1e3
        with open(out, "w") as f:
            json.dump({"impl": "pytorch-ddp", "torch": torch.__version__, "ms_per_step": ms,
                       "tokens_per_s": args.ranks * args.batch * args.seq / (ms / 1e3)}, f)
    dist.destroy_process_group()


def run_torch(args, repeat):
    import tempfile
    out = tempfile.mktemp(suffix=".json")
    cmd = ["/usr/bin/python3", os.path.abspath(__file__), "--torch-only", "--preset", args.preset,
           "--batch", str(args.batch), "--seq", str(args.seq), "--ranks", str(args.ranks),
           "--steps", str(args.steps), "--warmup", str(args.warmup), "--out", out, "--port", str(29500 + repeat)]
    env = dict(os.environ, LD_LIBRARY_PATH=OPENMP_BLAS, OMP_NUM_THREADS="1")
    subprocess.check_call(cmd, env=env)
    with open(out) as f:
        r = json.load(f)
    os.unlink(out)
    return r


def run_distllm(args, ranks, strategy):
    cmd = ["mpirun", "--oversubscribe", "--allow-run-as-root", "--bind-to", "none", "-n", str(ranks),
           args.distllm, "bench", "train", "--preset", args.preset, "--batch", str(args.batch), "--seq",
           str(args.seq), "--threads", "1", "--steps", str(args.steps), "--warmup-steps", str(args.warmup),
           "--strategy", strategy, "--peak-size", "1024", "--json"]
    return json.loads(subprocess.check_output(cmd).decode().strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="gpt2-tiny", choices=sorted(PRESETS))
    ap.add_argument("--batch", type=int, default=4, help="sequences per rank")
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--distllm", default=os.path.join(ROOT, "build", "release", "bin", "distllm"))
    ap.add_argument("--torch-only", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=29500, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.torch_only:
        import torch.multiprocessing as mp
        mp.spawn(torch_worker, args=(args, args.port, args.out), nprocs=args.ranks)
        return

    rows = {"one": [], "ddp": [], "zero3": [], "torch": []}
    for r in range(args.repeats):
        one = run_distllm(args, 1, "none")
        ddp = run_distllm(args, args.ranks, "ddp")
        z3 = run_distllm(args, args.ranks, "zero3")
        pt = run_torch(args, r)
        rows["one"].append(one), rows["ddp"].append(ddp), rows["zero3"].append(z3), rows["torch"].append(pt)
        print(f"repeat {r + 1}: 1 rank {one['tokens_per_s']:.0f} tok/s | DDP x{args.ranks} {ddp['tokens_per_s']:.0f} "
              f"(efficiency {ddp['tokens_per_s'] / (args.ranks * one['tokens_per_s']):.1%}, "
              f"{ddp['comm_hidden']:.0%} of {ddp['comm_ms']:.0f} ms comm hidden) | ZeRO-3 {z3['tokens_per_s']:.0f} "
              f"({z3['comm_hidden']:.0%} hidden) | PyTorch DDP {pt['tokens_per_s']:.0f}", flush=True)
    med = {k: statistics.median(x["tokens_per_s"] for x in v) for k, v in rows.items()}
    hidden = statistics.median(x["comm_hidden"] for x in rows["ddp"])
    print(f"\n{args.preset}, batch {args.batch} x seq {args.seq} per rank, {args.ranks} ranks x 1 thread, fp32 "
          f"(medians of {args.repeats})")
    print(f"  distllm 1 rank      {med['one']:9.0f} tok/s")
    print(f"  distllm DDP         {med['ddp']:9.0f} tok/s   scaling efficiency {med['ddp'] / (args.ranks * med['one']):.1%}"
          f" (target >= 90%), all-reduce hidden {hidden:.0%} (target >= 80%)")
    print(f"  distllm ZeRO-3      {med['zero3']:9.0f} tok/s   {med['zero3'] / med['ddp']:.2f}x DDP (target >= 0.85)")
    print(f"  PyTorch DDP (gloo)  {med['torch']:9.0f} tok/s   distllm DDP / PyTorch DDP = "
          f"{med['ddp'] / med['torch']:.2f}x (target >= 2)  [{rows['torch'][0]['torch']}]")


if __name__ == "__main__":
    main()
