"""Plain-PyTorch GPT-2, the Llama lineage (Llama with rope_scaling and biases, Mistral,
Qwen2, Qwen3, Phi-3) and Gemma 2 / Gemma 3 text (no transformers package), written from the
architecture descriptions and transformers' modeling code, used as the numerical reference
for distllm.

Parameters are a dict keyed by Hugging Face names with Hugging Face shapes.
"""
import math
import types

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
        elif self.family in GEMMA:
            _gemma_config(self, j)
        else:  # the Llama lineage: llama, qwen2, qwen3, phi3
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
            self.max_pos = j.get("max_position_embeddings", 2048)
            self.rope_scaling = j.get("rope_scaling") or None
            self.original_max_pos = j.get("original_max_position_embeddings")
            attention_bias = j.get("attention_bias", False)
            self.qkv_bias = attention_bias or self.family == "qwen2"
            self.o_bias = attention_bias and self.family != "qwen2"
            self.mlp_bias = j.get("mlp_bias", False)
            self.qk_norm = self.family == "qwen3"
            # Mistral (and Phi-3-mini-4k): every layer sees the last sliding_window keys.
            window = j.get("sliding_window") if self.family in ("mistral", "phi3") else None
            self.window = window if window and window < self.max_pos else 0


GEMMA = ("gemma2", "gemma3_text")


def _gemma_config(cfg, j):
    """Gemma2Config / Gemma3TextConfig fields, with transformers' defaults."""
    gemma3 = cfg.family == "gemma3_text"
    cfg.vocab = j["vocab_size"]
    cfg.C = j["hidden_size"]
    cfg.L = j["num_hidden_layers"]
    cfg.H = j["num_attention_heads"]
    cfg.KV = j.get("num_key_value_heads", cfg.H)
    cfg.D = j.get("head_dim") or 256
    cfg.I = j["intermediate_size"]
    cfg.eps = j.get("rms_norm_eps", 1e-6)
    cfg.theta = j.get("rope_theta", 1000000.0 if gemma3 else 10000.0)
    cfg.tied = j.get("tie_word_embeddings", True)
    cfg.max_pos = j.get("max_position_embeddings", 131072 if gemma3 else 8192)
    cfg.rope_scaling = j.get("rope_scaling") or None
    cfg.original_max_pos = None
    cfg.scalar = j.get("query_pre_attn_scalar", 256)
    cfg.window = j.get("sliding_window") or 4096
    cfg.attn_cap = j.get("attn_logit_softcapping") or 0.0
    cfg.final_cap = j.get("final_logit_softcapping") or 0.0
    cfg.qk_norm = gemma3
    # Local (sliding-window) layers: layer_types, else Gemma 2's even layers or Gemma 3's
    # every layer but each sliding_window_pattern-th.
    if j.get("layer_types"):
        cfg.sliding = [t == "sliding_attention" for t in j["layer_types"]]
    elif gemma3:
        pattern = j.get("sliding_window_pattern", 6)
        cfg.sliding = [(i + 1) % pattern != 0 for i in range(cfg.L)]
    else:
        cfg.sliding = [i % 2 == 0 for i in range(cfg.L)]
    # Gemma 3's local layers rotate with their own base and no scaling.
    cfg.local_theta = j.get("rope_local_base_freq", 10000.0) if gemma3 else None


def _attention(q, k, v, n_rep, scale=None, window=0, softcap=0.0):
    """q: (B, H, T, D); k, v: (B, KV, T, D). Causal; with `window` a query at i sees
    keys j with i - j < window (transformers' sliding-window mask); `softcap` maps the
    scaled scores s to softcap * tanh(s / softcap) before the mask (Gemma 2)."""
    if n_rep > 1:
        k = k.repeat_interleave(n_rep, dim=1)
        v = v.repeat_interleave(n_rep, dim=1)
    T = q.shape[2]
    att = (q @ k.transpose(-2, -1)) * (scale if scale is not None else 1.0 / math.sqrt(q.shape[-1]))
    if softcap:
        att = torch.tanh(att / softcap) * softcap
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    if window:
        mask = mask & ~torch.ones(T, T, dtype=torch.bool).tril(-window)
    att = att.masked_fill(~mask, float("-inf"))
    return F.softmax(att, dim=-1) @ v


def _rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def _gemma_norm(x, w, eps):
    """Gemma's RMSNorm: the stored weight is an offset from 1."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * (1.0 + w)


def _rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _inv_freq(theta, D):
    return 1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.int64).float() / D))


def _rope(cfg, T):
    """cos, sin [T, D] as transformers' rotary embeddings compute them (modeling_rope_utils),
    with dynamic NTK and LongRoPE made static as distllm (and vLLM) serve them."""
    D, theta, s = cfg.D, cfg.theta, cfg.rope_scaling
    inv_freq, attention_factor = _inv_freq(theta, D), 1.0
    kind = (s or {}).get("rope_type", (s or {}).get("type", "default"))
    t = torch.arange(T).float()
    if kind == "linear":
        inv_freq = inv_freq / s["factor"]
    elif kind == "dynamic":
        # One NTK base for the context stretched by the factor (vLLM's rule).
        f = s["factor"]
        base = theta * ((f * (cfg.max_pos * f) / cfg.max_pos) - (f - 1)) ** (D / (D - 2))
        inv_freq = _inv_freq(base, D)
    elif kind == "llama3":
        f, low, high = s["factor"], s["low_freq_factor"], s["high_freq_factor"]
        old = s["original_max_position_embeddings"]
        low_wavelen, high_wavelen = old / low, old / high
        wavelen = 2 * math.pi / inv_freq
        llama = torch.where(wavelen > low_wavelen, inv_freq / f, inv_freq)
        smooth = (old / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * llama / f + smooth * llama
        medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
        inv_freq = torch.where(medium, smoothed, llama)
    elif kind == "yarn":
        f = s["factor"]
        beta_fast, beta_slow = s.get("beta_fast", 32), s.get("beta_slow", 1)
        orig = s.get("original_max_position_embeddings", cfg.max_pos)

        def corr(rot):
            return (D * math.log(orig / (rot * 2 * math.pi))) / (2 * math.log(theta))

        low, high = max(math.floor(corr(beta_fast)), 0), min(math.ceil(corr(beta_slow)), D - 1)
        if low == high:
            high += 0.001
        ramp = torch.clamp((torch.arange(D // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
        extra = 1 - ramp
        inv_freq = (inv_freq / f) * (1 - extra) + inv_freq * extra
        attention_factor = s.get("attention_factor") or (0.1 * math.log(f) + 1.0 if f > 1 else 1.0)
    elif kind in ("longrope", "su"):
        orig = cfg.original_max_pos or cfg.max_pos
        f = cfg.max_pos / cfg.original_max_pos if cfg.original_max_pos else s.get("factor", 1.0)
        attention_factor = s.get("attention_factor") or (math.sqrt(1 + math.log(f) / math.log(orig)) if f > 1 else 1.0)
        shape = torch.arange(0, D, 2, dtype=torch.int64).float() / D
        short = 1.0 / (torch.tensor(s["short_factor"], dtype=torch.float32) * theta ** shape)
        long = 1.0 / (torch.tensor(s["long_factor"], dtype=torch.float32) * theta ** shape)
        # Positions below the original context rotate with the short factors, the rest with the long.
        freqs = torch.where((t < orig)[:, None], torch.outer(t, short), torch.outer(t, long))
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos() * attention_factor, emb.sin() * attention_factor
    freqs = torch.outer(t, inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos() * attention_factor, emb.sin() * attention_factor


def _linear(x, p, name, bias):
    y = x @ p[name + ".weight"].t()
    return y + p[name + ".bias"] if bias else y


def _gemma_forward(cfg, p, idx):
    """Gemma2ForCausalLM / Gemma3ForCausalLM: sandwich norms (1 + w), GeGLU with the tanh GELU,
    embeddings times sqrt(hidden), local and global layers, soft-capping."""
    B, T = idx.shape
    x = p["model.embed_tokens.weight"][idx] * torch.tensor(cfg.C ** 0.5, dtype=torch.float32)
    cos, sin = _rope(cfg, T)
    if cfg.local_theta:
        local = types.SimpleNamespace(D=cfg.D, theta=cfg.local_theta, rope_scaling=None, max_pos=cfg.max_pos,
                                      original_max_pos=None)
        cos_local, sin_local = _rope(local, T)
    else:
        cos_local, sin_local = cos, sin
    for i in range(cfg.L):
        pre = f"model.layers.{i}."
        h = _gemma_norm(x, p[pre + "input_layernorm.weight"], cfg.eps)
        q = _linear(h, p, pre + "self_attn.q_proj", False).view(B, T, cfg.H, cfg.D)
        k = _linear(h, p, pre + "self_attn.k_proj", False).view(B, T, cfg.KV, cfg.D)
        v = _linear(h, p, pre + "self_attn.v_proj", False).view(B, T, cfg.KV, cfg.D)
        if cfg.qk_norm:
            q = _gemma_norm(q, p[pre + "self_attn.q_norm.weight"], cfg.eps)
            k = _gemma_norm(k, p[pre + "self_attn.k_norm.weight"], cfg.eps)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        c, s = (cos_local, sin_local) if cfg.sliding[i] else (cos, sin)
        q = q * c + _rotate_half(q) * s
        k = k * c + _rotate_half(k) * s
        y = _attention(q, k, v, cfg.H // cfg.KV, scale=cfg.scalar ** -0.5,
                       window=cfg.window if cfg.sliding[i] else 0, softcap=cfg.attn_cap)
        y = _linear(y.transpose(1, 2).reshape(B, T, cfg.H * cfg.D), p, pre + "self_attn.o_proj", False)
        x = x + _gemma_norm(y, p[pre + "post_attention_layernorm.weight"], cfg.eps)
        h = _gemma_norm(x, p[pre + "pre_feedforward_layernorm.weight"], cfg.eps)
        g = _linear(h, p, pre + "mlp.gate_proj", False)
        u = _linear(h, p, pre + "mlp.up_proj", False)
        y = _linear(F.gelu(g, approximate="tanh") * u, p, pre + "mlp.down_proj", False)
        x = x + _gemma_norm(y, p[pre + "post_feedforward_layernorm.weight"], cfg.eps)
    x = _gemma_norm(x, p["model.norm.weight"], cfg.eps)
    head = p["model.embed_tokens.weight"] if cfg.tied else p["lm_head.weight"]
    logits = x @ head.t()
    if cfg.final_cap:
        logits = torch.tanh(logits / cfg.final_cap) * cfg.final_cap
    return logits


def forward(cfg, p, idx):
    """idx: (B, T) int64 -> logits (B, T, V)."""
    if cfg.family in GEMMA:
        return _gemma_forward(cfg, p, idx)
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
        if cfg.family == "phi3":  # one qkv_proj: q, then k, then v (Phi3Attention)
            qkv = _linear(h, p, pre + "self_attn.qkv_proj", False)
            q, k, v = qkv.split([cfg.H * cfg.D, cfg.KV * cfg.D, cfg.KV * cfg.D], dim=-1)
            q, k, v = q.reshape(B, T, cfg.H, cfg.D), k.reshape(B, T, cfg.KV, cfg.D), v.reshape(B, T, cfg.KV, cfg.D)
        else:
            q = _linear(h, p, pre + "self_attn.q_proj", cfg.qkv_bias).view(B, T, cfg.H, cfg.D)
            k = _linear(h, p, pre + "self_attn.k_proj", cfg.qkv_bias).view(B, T, cfg.KV, cfg.D)
            v = _linear(h, p, pre + "self_attn.v_proj", cfg.qkv_bias).view(B, T, cfg.KV, cfg.D)
        if cfg.qk_norm:  # Qwen3: RMSNorm over each head's D before the rotation
            q = _rms_norm(q, p[pre + "self_attn.q_norm.weight"], cfg.eps)
            k = _rms_norm(k, p[pre + "self_attn.k_norm.weight"], cfg.eps)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        y = _attention(q, k, v, cfg.H // cfg.KV, window=cfg.window).transpose(1, 2).reshape(B, T, cfg.H * cfg.D)
        x = x + _linear(y, p, pre + "self_attn.o_proj", cfg.o_bias)
        h = _rms_norm(x, p[pre + "post_attention_layernorm.weight"], cfg.eps)
        if cfg.family == "phi3":  # one gate_up_proj, chunked in two: gate first (Phi3MLP)
            g, u = _linear(h, p, pre + "mlp.gate_up_proj", False).chunk(2, dim=-1)
        else:
            g = _linear(h, p, pre + "mlp.gate_proj", cfg.mlp_bias)
            u = _linear(h, p, pre + "mlp.up_proj", cfg.mlp_bias)
        x = x + _linear(F.silu(g) * u, p, pre + "mlp.down_proj", cfg.mlp_bias)
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
