#!/usr/bin/env python3
"""Training throughput: distllm vs PyTorch 1.13 (fp32), same model, shape and threads.

usage: bench/train_vs_pytorch.py [--preset gpt2-124M] [--batch 4] [--seq 256]
                                 [--threads 2] [--steps 5] [--repeats 3]

Runs `distllm bench train --json` and an equivalent PyTorch training step (forward,
cross-entropy, backward, global-norm clipping, AdamW) in one run and prints tokens/s
for both and the ratio. The PyTorch side uses the OpenMP build of OpenBLAS
(libopenblas0-openmp), as shared/REFERENCE.md recommends for a fair comparison on
few cores, and Debian's /usr/bin/python3.
"""
import argparse
import fcntl
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OPENMP_BLAS = "/usr/lib/x86_64-linux-gnu/openblas-openmp"

PRESETS = {  # must match distllm's ModelConfig::preset
    "gpt2-tiny": {"model_type": "gpt2", "n_layer": 6, "n_head": 6, "n_embd": 384},
    "gpt2-124M": {"model_type": "gpt2", "n_layer": 12, "n_head": 12, "n_embd": 768},
    "llama-tiny": {"model_type": "llama", "num_hidden_layers": 6, "num_attention_heads": 6,
                   "num_key_value_heads": 2, "hidden_size": 384, "intermediate_size": 1024},
    "llama-124M": {"model_type": "llama", "num_hidden_layers": 12, "num_attention_heads": 12,
                   "num_key_value_heads": 4, "hidden_size": 768, "intermediate_size": 2048},
}


def torch_side(args):
    import torch
    sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
    import reference_model as ref

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    j = dict(PRESETS[args.preset])
    j["vocab_size"] = 50257
    j.setdefault("n_positions", 1024)
    j.setdefault("max_position_embeddings", 1024)
    cfg = ref.Config(j)
    C, V = cfg.C, cfg.vocab
    params = {}

    def new(name, *shape, std=0.02, fill=None):
        t = torch.empty(*shape)
        if fill is None:
            t.normal_(0, std)
        else:
            t.fill_(fill)
        params[name] = t.requires_grad_()

    if cfg.family == "gpt2":
        new("transformer.wte.weight", V, C)
        new("transformer.wpe.weight", 1024, C)
        for i in range(cfg.L):
            p = f"transformer.h.{i}."
            new(p + "ln_1.weight", C, fill=1.0); new(p + "ln_1.bias", C, fill=0.0)
            new(p + "attn.c_attn.weight", C, 3 * C); new(p + "attn.c_attn.bias", 3 * C, fill=0.0)
            new(p + "attn.c_proj.weight", C, C); new(p + "attn.c_proj.bias", C, fill=0.0)
            new(p + "ln_2.weight", C, fill=1.0); new(p + "ln_2.bias", C, fill=0.0)
            new(p + "mlp.c_fc.weight", C, 4 * C); new(p + "mlp.c_fc.bias", 4 * C, fill=0.0)
            new(p + "mlp.c_proj.weight", 4 * C, C); new(p + "mlp.c_proj.bias", C, fill=0.0)
        new("transformer.ln_f.weight", C, fill=1.0); new("transformer.ln_f.bias", C, fill=0.0)
    else:
        KVD, I = cfg.KV * cfg.D, cfg.I
        new("model.embed_tokens.weight", V, C)
        for i in range(cfg.L):
            p = f"model.layers.{i}."
            new(p + "input_layernorm.weight", C, fill=1.0)
            new(p + "self_attn.q_proj.weight", cfg.H * cfg.D, C)
            new(p + "self_attn.k_proj.weight", KVD, C); new(p + "self_attn.v_proj.weight", KVD, C)
            new(p + "self_attn.o_proj.weight", C, cfg.H * cfg.D)
            new(p + "post_attention_layernorm.weight", C, fill=1.0)
            new(p + "mlp.gate_proj.weight", I, C); new(p + "mlp.up_proj.weight", I, C)
            new(p + "mlp.down_proj.weight", C, I)
        new("model.norm.weight", C, fill=1.0)
        new("lm_head.weight", V, C)
    decay = [p for p in params.values() if p.dim() >= 2]
    no_decay = [p for p in params.values() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-4, betas=(0.9, 0.95), foreach=True)
    x = torch.randint(0, V, (args.batch, args.seq))
    y = torch.randint(0, V, (args.batch, args.seq))
    times = []
    for s in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = ref.loss_fn(ref.forward(cfg, params, x), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(params.values()), 1.0)
        opt.step()
        if s >= args.warmup:
            times.append(time.perf_counter() - t0)
    ms = statistics.median(times) * 1e3
    print(json.dumps({"impl": "pytorch", "torch": torch.__version__, "ms_per_step": ms,
                      "tokens_per_s": args.batch * args.seq / (ms / 1e3)}))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="gpt2-124M", choices=sorted(PRESETS))
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3, help="alternate the two sides this many times")
    ap.add_argument("--distllm", default=os.path.join(ROOT, "build", "release", "bin", "distllm"))
    ap.add_argument("--torch-only", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.torch_only:
        torch_side(args)
        return

    common = ["--batch", str(args.batch), "--seq", str(args.seq), "--steps", str(args.steps)]
    ours_cmd = [args.distllm, "bench", "train", "--preset", args.preset, "--threads", str(args.threads),
                "--warmup-steps", str(args.warmup), "--json"] + common
    env = dict(os.environ, LD_LIBRARY_PATH=OPENMP_BLAS, OMP_NUM_THREADS=str(args.threads))
    torch_cmd = ["/usr/bin/python3", os.path.abspath(__file__), "--torch-only", "--preset", args.preset,
                 "--threads", str(args.threads), "--warmup", str(args.warmup)] + common
    ours, theirs = [], []
    # The benchmark lock every benchmark of the project takes: no two run at once.
    lock = open("/tmp/bench.lock", "a")
    fcntl.flock(lock, fcntl.LOCK_EX)
    for r in range(args.repeats):
        o = json.loads(subprocess.check_output(ours_cmd).decode().strip().splitlines()[-1])
        t = json.loads(subprocess.check_output(torch_cmd, env=env).decode().strip().splitlines()[-1])
        ours.append(o)
        theirs.append(t)
        print(f"run {r + 1}: distllm {o['tokens_per_s']:.0f} tok/s ({o['ms_per_step']:.0f} ms/step, "
              f"MFU {100 * o['mfu']:.1f}%)   pytorch {t['tokens_per_s']:.0f} tok/s ({t['ms_per_step']:.0f} ms/step)"
              f"   ratio {o['tokens_per_s'] / t['tokens_per_s']:.2f}x", flush=True)
    o_tok = statistics.median(x["tokens_per_s"] for x in ours)
    t_tok = statistics.median(x["tokens_per_s"] for x in theirs)
    mfu = statistics.median(x["mfu"] for x in ours)
    peak = statistics.median(x["peak_gflops"] for x in ours)
    print(f"\n{args.preset} batch {args.batch} seq {args.seq} threads {args.threads} fp32 "
          f"(median of {args.repeats}):")
    print(f"  distllm  {o_tok:9.0f} tok/s   MFU {100 * mfu:.1f}% of measured sgemm peak {peak:.0f} GFLOP/s")
    print(f"  pytorch  {t_tok:9.0f} tok/s   ({theirs[0]['torch']})")
    print(f"  ratio    {o_tok / t_tok:9.2f}x")


if __name__ == "__main__":
    main()
