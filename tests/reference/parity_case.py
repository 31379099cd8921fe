"""Runs the PyTorch reference on distllm parity cases.

usage: parity_case.py CASE_DIR [CASE_DIR ...]

Each CASE_DIR holds config.json, weights.safetensors, inputs.safetensors (tokens and
targets [S, B, T] int32) and train.json (AdamW and schedule). Writes
reference.safetensors with: logits [B*T, V] and loss for batch 0 at the initial
weights, grad/<name> for that batch, and final/<name> after S AdamW steps (one per
batch) with global-norm clipping and the warmup + cosine schedule.
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference_model as ref  # noqa: E402
import safetensors_np as st  # noqa: E402


def run_case(case):
    with open(os.path.join(case, "config.json")) as f:
        cfg = ref.Config(json.load(f))
    with open(os.path.join(case, "train.json")) as f:
        train = json.load(f)
    weights, _ = st.load(os.path.join(case, "weights.safetensors"))
    inputs, _ = st.load(os.path.join(case, "inputs.safetensors"))
    tokens = torch.from_numpy(inputs["tokens"].astype("int64"))
    targets = torch.from_numpy(inputs["targets"].astype("int64"))
    params = {k: torch.tensor(v, dtype=torch.float32, requires_grad=True) for k, v in weights.items()}

    out = {}
    logits = ref.forward(cfg, params, tokens[0])
    loss = ref.loss_fn(logits, targets[0])
    loss.backward()
    out["logits"] = logits.detach().reshape(-1, cfg.vocab).numpy()
    out["loss"] = loss.detach().reshape(()).numpy()
    for k, p in params.items():
        out["grad/" + k] = p.grad.detach().numpy().copy()

    decay = [p for k, p in params.items() if p.dim() >= 2]
    no_decay = [p for k, p in params.items() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": train["weight_decay"]}, {"params": no_decay, "weight_decay": 0.0}],
        lr=train["lr"], betas=(train["beta1"], train["beta2"]), eps=train["eps"])
    for step in range(tokens.shape[0]):
        opt.zero_grad(set_to_none=False)
        loss = ref.loss_fn(ref.forward(cfg, params, tokens[step]), targets[step])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(params.values()), train["grad_clip"])
        for group in opt.param_groups:
            group["lr"] = ref.lr_at(step, train)
        opt.step()
    for k, p in params.items():
        out["final/" + k] = p.detach().numpy().copy()
    st.save(os.path.join(case, "reference.safetensors"), out)


def main():
    torch.manual_seed(0)
    torch.set_num_threads(int(os.environ.get("REFERENCE_THREADS", "1")))
    for case in sys.argv[1:]:
        run_case(case)


if __name__ == "__main__":
    main()
