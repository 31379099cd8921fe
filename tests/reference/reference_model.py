"""Plain-PyTorch GPT-2 and Llama (no transformers package), written from the
architecture descriptions, used as the numerical reference for distllm.

Parameters are a dict keyed by Hugging Face names with Hugging Face shapes.
"""
import math

import torch
import torch.nn.functional as F


class Config:
    def __init__(self, j):
        self.family = j["model_type"]
        if self.family == "gpt2":
            self.vocab = j["vocab_size"]
            self.C = j["n_embd"]
            self.L = j["n_layer"]
            self.H = j["n_head"]
            self.KV = self.H
            self.D = self.C // self.H
            self.eps = j.get("layer_norm_epsilon", 1e-5)
            self.tied = True
        else:
            self.vocab = j["vocab_size"]
            self.C = j["hidden_size"]
            self.L = j["num_hidden_layers"]
            self.H = j["num_attention_heads"]
            self.KV = j.get("num_key_value_heads", self.H)
            self.D = j.get("head_dim") or self.C // self.H
            self.I = j["intermediate_size"]
            self.eps = j.get("rms_norm_eps", 1e-6)
            self.theta = j.get("rope_theta", 10000.0)
            self.tied = j.get("tie_word_embeddings", False)


def _attention(q, k, v, n_rep):
    # q: (B, H, T, D); k, v: (B, KV, T, D)
    if n_rep > 1:
        k = k.repeat_interleave(n_rep, dim=1)
        v = v.repeat_interleave(n_rep, dim=1)
    T = q.shape[2]
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    att = att.masked_fill(~mask, float("-inf"))
    return F.softmax(att, dim=-1) @ v


def _rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def _rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _rope(cfg, T):
    inv_freq = 1.0 / (cfg.theta ** (torch.arange(0, cfg.D, 2).float() / cfg.D))
    t = torch.arange(T).float()
    freqs = torch.outer(t, inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def forward(cfg, p, idx):
    """idx: (B, T) int64 -> logits (B, T, V)."""
    B, T = idx.shape
    if cfg.family == "gpt2":
        x = p["transformer.wte.weight"][idx] + p["transformer.wpe.weight"][torch.arange(T)]
        for i in range(cfg.L):
            pre = f"transformer.h.{i}."
            h = F.layer_norm(x, (cfg.C,), p[pre + "ln_1.weight"], p[pre + "ln_1.bias"], cfg.eps)
            qkv = h @ p[pre + "attn.c_attn.weight"] + p[pre + "attn.c_attn.bias"]
            q, k, v = qkv.split(cfg.C, dim=-1)
            q = q.view(B, T, cfg.H, cfg.D).transpose(1, 2)
            k = k.view(B, T, cfg.H, cfg.D).transpose(1, 2)
            v = v.view(B, T, cfg.H, cfg.D).transpose(1, 2)
            y = _attention(q, k, v, 1).transpose(1, 2).reshape(B, T, cfg.C)
            x = x + y @ p[pre + "attn.c_proj.weight"] + p[pre + "attn.c_proj.bias"]
            h = F.layer_norm(x, (cfg.C,), p[pre + "ln_2.weight"], p[pre + "ln_2.bias"], cfg.eps)
            h = F.gelu(h @ p[pre + "mlp.c_fc.weight"] + p[pre + "mlp.c_fc.bias"], approximate="tanh")
            x = x + h @ p[pre + "mlp.c_proj.weight"] + p[pre + "mlp.c_proj.bias"]
        x = F.layer_norm(x, (cfg.C,), p["transformer.ln_f.weight"], p["transformer.ln_f.bias"], cfg.eps)
        return x @ p["transformer.wte.weight"].t()
    x = p["model.embed_tokens.weight"][idx]
    cos, sin = _rope(cfg, T)
    for i in range(cfg.L):
        pre = f"model.layers.{i}."
        h = _rms_norm(x, p[pre + "input_layernorm.weight"], cfg.eps)
        q = (h @ p[pre + "self_attn.q_proj.weight"].t()).view(B, T, cfg.H, cfg.D).transpose(1, 2)
        k = (h @ p[pre + "self_attn.k_proj.weight"].t()).view(B, T, cfg.KV, cfg.D).transpose(1, 2)
        v = (h @ p[pre + "self_attn.v_proj.weight"].t()).view(B, T, cfg.KV, cfg.D).transpose(1, 2)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        y = _attention(q, k, v, cfg.H // cfg.KV).transpose(1, 2).reshape(B, T, cfg.H * cfg.D)
        x = x + y @ p[pre + "self_attn.o_proj.weight"].t()
        h = _rms_norm(x, p[pre + "post_attention_layernorm.weight"], cfg.eps)
        g = h @ p[pre + "mlp.gate_proj.weight"].t()
        u = h @ p[pre + "mlp.up_proj.weight"].t()
        x = x + (F.silu(g) * u) @ p[pre + "mlp.down_proj.weight"].t()
    x = _rms_norm(x, p["model.norm.weight"], cfg.eps)
    head = p["model.embed_tokens.weight"] if cfg.tied else p["lm_head.weight"]
    return x @ head.t()


def loss_fn(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-100)


def lr_at(step, s):
    """Same schedule as distllm's LrSchedule (0-based step)."""
    if step < s["warmup_steps"]:
        return s["lr"] * (step + 1) / s["warmup_steps"]
    if step >= s["total_steps"]:
        return s["min_lr"]
    prog = (step - s["warmup_steps"]) / (s["total_steps"] - s["warmup_steps"])
    return s["min_lr"] + (s["lr"] - s["min_lr"]) * 0.5 * (1.0 + math.cos(math.pi * prog))
