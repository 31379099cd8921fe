"""Hugging Face model directories between distllm and the PyTorch reference.

usage:
  hf_roundtrip.py logits MODEL_DIR TOKENS.safetensors OUT.safetensors
      Loads a model directory the way transformers lays it out (config.json plus
      model.safetensors or index + shards, any float dtype) with this script's own
      reader and writes the reference logits for `tokens` [B, T].
  hf_roundtrip.py make MODEL_DIR FAMILY [--bf16] [--shards N] [--no-prefix]
      (FAMILY: gpt2, llama, llama31, qwen2, qwen3, phi3, gemma2, gemma3)
      Creates a random model with Hugging Face names, saves it as a model directory
      (optionally bf16 and/or sharded; GPT-2 optionally without the "transformer."
      prefix, as GPT2Model saves), and writes expected.safetensors with tokens and the
      logits computed from exactly the saved (rounded) weights.
"""
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference_model as ref  # noqa: E402
import safetensors_np as st  # noqa: E402


def load_dir(d):
    with open(os.path.join(d, "config.json")) as f:
        cfgj = json.load(f)
    index = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    weights = {}
    for name in files:
        w, _ = st.load(os.path.join(d, name))
        weights.update(w)
    if cfgj["model_type"] == "gpt2":
        weights = {(k if k.startswith("transformer.") or k == "lm_head.weight" else "transformer." + k): v
                   for k, v in weights.items()}
    params = {k: torch.tensor(v.astype(np.float32)) for k, v in weights.items()}
    return ref.Config(cfgj), params


def cmd_logits(model_dir, tokens_path, out_path):
    cfg, params = load_dir(model_dir)
    toks, _ = st.load(tokens_path)
    idx = torch.from_numpy(toks["tokens"].astype(np.int64))
    with torch.no_grad():
        logits = ref.forward(cfg, params, idx)
    st.save(out_path, {"logits": logits.reshape(-1, cfg.vocab).numpy()})


def gemma_dir(family, bf16):
    """config.json and tensor shapes of a Gemma2ForCausalLM or Gemma3ForCausalLM as transformers
    writes them (tied head, sandwich norms; Gemma 3 with q/k norms)."""
    C, V, I, D, L = 48, 300, 80, 16, 2
    cfgj = {"vocab_size": V, "hidden_size": C, "num_hidden_layers": L, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": D, "intermediate_size": I, "max_position_embeddings": 64,
            "rms_norm_eps": 1e-6, "hidden_act": "gelu_pytorch_tanh", "hidden_activation": "gelu_pytorch_tanh",
            "attention_bias": False, "attention_dropout": 0.0, "query_pre_attn_scalar": D, "sliding_window": 64,
            "cache_implementation": "hybrid", "tie_word_embeddings": True, "bos_token_id": 2, "eos_token_id": 1,
            "pad_token_id": 0, "initializer_range": 0.02, "use_cache": True,
            "torch_dtype": "bfloat16" if bf16 else "float32"}
    if family == "gemma2":
        cfgj.update({"model_type": "gemma2", "architectures": ["Gemma2ForCausalLM"], "rope_theta": 10000.0,
                     "attn_logit_softcapping": None, "final_logit_softcapping": 30.0})
    else:
        cfgj.update({"model_type": "gemma3_text", "architectures": ["Gemma3ForCausalLM"], "rope_theta": 10000.0,
                     "rope_local_base_freq": 10000.0, "sliding_window_pattern": 6, "rope_scaling": None,
                     "attn_logit_softcapping": None, "final_logit_softcapping": None})
    shapes = {"model.embed_tokens.weight": (V, C), "model.norm.weight": (C,)}
    for i in range(L):
        p = f"model.layers.{i}."
        shapes.update({p + "input_layernorm.weight": (C,), p + "self_attn.q_proj.weight": (4 * D, C),
                       p + "self_attn.k_proj.weight": (2 * D, C), p + "self_attn.v_proj.weight": (2 * D, C),
                       p + "self_attn.o_proj.weight": (C, 4 * D), p + "post_attention_layernorm.weight": (C,),
                       p + "pre_feedforward_layernorm.weight": (C,), p + "post_feedforward_layernorm.weight": (C,),
                       p + "mlp.gate_proj.weight": (I, C), p + "mlp.up_proj.weight": (I, C),
                       p + "mlp.down_proj.weight": (C, I)})
        if family == "gemma3":
            shapes.update({p + "self_attn.q_norm.weight": (D,), p + "self_attn.k_norm.weight": (D,)})
    return cfgj, shapes


def cmd_make(model_dir, family, bf16, shards, no_prefix):
    torch.manual_seed(3)
    if family == "gpt2":
        cfgj = {"model_type": "gpt2", "vocab_size": 300, "n_embd": 48, "n_layer": 2, "n_head": 4,
                "n_positions": 64, "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new",
                "some_unknown_key": [1, 2, 3]}
        C, V = 48, 300
        shapes = {"transformer.wte.weight": (V, C), "transformer.wpe.weight": (64, C),
                  "transformer.ln_f.weight": (C,), "transformer.ln_f.bias": (C,)}
        for i in range(2):
            p = f"transformer.h.{i}."
            shapes.update({p + "ln_1.weight": (C,), p + "ln_1.bias": (C,), p + "attn.c_attn.weight": (C, 3 * C),
                           p + "attn.c_attn.bias": (3 * C,), p + "attn.c_proj.weight": (C, C),
                           p + "attn.c_proj.bias": (C,), p + "ln_2.weight": (C,), p + "ln_2.bias": (C,),
                           p + "mlp.c_fc.weight": (C, 4 * C), p + "mlp.c_fc.bias": (4 * C,),
                           p + "mlp.c_proj.weight": (4 * C, C), p + "mlp.c_proj.bias": (C,)})
    elif family in ("gemma2", "gemma3"):
        cfgj, shapes = gemma_dir(family, bf16)
        C, V = 48, 300
    else:
        # The Llama lineage as transformers writes it (unknown keys are ignored by readers):
        # llama, llama31 (Llama 3.1's rope_scaling, tied embeddings), qwen2 (q/k/v biases),
        # qwen3 (per-head q/k norms, a head_dim of its own).
        # phi3 (fused qkv_proj and gate_up_proj, LongRoPE as Phi-3-mini-128k configures it).
        # mistral (a sliding window shorter than the sequences).
        model_type = {"llama": "llama", "llama31": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "phi3": "phi3",
                      "mistral": "mistral"}[family]
        D = 16 if family == "qwen3" else 12
        tied = family in ("llama31", "qwen2")
        cfgj = {"model_type": model_type, "vocab_size": 300, "hidden_size": 48, "num_hidden_layers": 2,
                "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 80,
                "max_position_embeddings": 64, "rms_norm_eps": 1e-6, "rope_theta": 500000.0,
                "tie_word_embeddings": tied, "torch_dtype": "bfloat16" if bf16 else "float32"}
        if family == "llama31":
            cfgj["rope_scaling"] = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                    "high_freq_factor": 4.0, "original_max_position_embeddings": 16}
        if family in ("qwen2", "qwen3"):
            cfgj.update({"use_sliding_window": False, "sliding_window": None, "max_window_layers": 2,
                         "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 2})
        if family == "qwen3":
            cfgj.update({"head_dim": D, "attention_bias": False})
        if family == "mistral":
            cfgj.update({"sliding_window": 5, "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 2})
        if family == "phi3":
            cfgj.update({"original_max_position_embeddings": 16, "sliding_window": 262144, "attention_bias": False,
                         "embd_pdrop": 0.0, "resid_pdrop": 0.0, "attention_dropout": 0.0, "pad_token_id": 0,
                         "rope_scaling": {"type": "longrope", "short_factor": [1.0, 1.1, 1.3, 1.6, 2.0, 2.5],
                                          "long_factor": [1.0, 2.0, 4.0, 7.0, 11.0, 16.0]}})
        C, V, I = 48, 300, 80
        shapes = {"model.embed_tokens.weight": (V, C), "model.norm.weight": (C,)}
        if not tied:
            shapes["lm_head.weight"] = (V, C)
        for i in range(2):
            p = f"model.layers.{i}."
            shapes.update({p + "input_layernorm.weight": (C,), p + "self_attn.o_proj.weight": (C, 4 * D),
                           p + "post_attention_layernorm.weight": (C,), p + "mlp.down_proj.weight": (C, I)})
            if family == "phi3":
                shapes.update({p + "self_attn.qkv_proj.weight": (8 * D, C), p + "mlp.gate_up_proj.weight": (2 * I, C)})
            else:
                shapes.update({p + "self_attn.q_proj.weight": (4 * D, C), p + "self_attn.k_proj.weight": (2 * D, C),
                               p + "self_attn.v_proj.weight": (2 * D, C), p + "mlp.gate_proj.weight": (I, C),
                               p + "mlp.up_proj.weight": (I, C)})
            if family == "qwen2":
                shapes.update({p + "self_attn.q_proj.bias": (4 * D,), p + "self_attn.k_proj.bias": (2 * D,),
                               p + "self_attn.v_proj.bias": (2 * D,)})
            if family == "qwen3":
                shapes.update({p + "self_attn.q_norm.weight": (D,), p + "self_attn.k_norm.weight": (D,)})
    weights = {}
    for name, shape in shapes.items():
        t = torch.randn(*shape) * (0.5 if len(shape) == 1 else 0.05)
        if len(shape) == 1 and name.endswith("weight") and not family.startswith("gemma"):
            t += 1.0  # Gemma stores its norm weights as offsets from 1
        weights[name] = t.numpy()
    if bf16:  # round through bf16 so the expected logits use exactly the stored values
        for k, v in weights.items():
            u = v.view(np.uint32).astype(np.uint64)
            weights[k] = (((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(np.float32)
    os.makedirs(model_dir, exist_ok=True)
    with open(os.path.join(model_dir, "config.json"), "w") as f:
        json.dump(cfgj, f)
    saved = dict(weights)
    if family == "gpt2" and no_prefix:
        saved = {k[len("transformer."):]: v for k, v in saved.items()}
        saved["h.0.attn.bias"] = np.tril(np.ones((64, 64), dtype=np.float32)).reshape(1, 1, 64, 64)
    names = list(saved)
    bf16_names = set(k for k in names if bf16 and not k.endswith("attn.bias"))
    if shards <= 1:
        st.save(os.path.join(model_dir, "model.safetensors"), saved, {"format": "pt"}, bf16=bf16_names)
    else:
        weight_map, total = {}, 0
        for s in range(shards):
            part = names[s::shards]
            fname = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
            st.save(os.path.join(model_dir, fname), {k: saved[k] for k in part}, {"format": "pt"},
                    bf16=bf16_names & set(part))
            for k in part:
                weight_map[k] = fname
                total += saved[k].size * (2 if k in bf16_names else 4)
        with open(os.path.join(model_dir, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f)
    cfg = ref.Config(cfgj)
    params = {k: torch.tensor(v) for k, v in weights.items()}
    idx = torch.randint(0, V, (2, 24 if family == "phi3" else 11))  # phi3: past the original 16
    with torch.no_grad():
        logits = ref.forward(cfg, params, idx)
    st.save(os.path.join(model_dir, "expected.safetensors"),
            {"tokens": idx.numpy().astype(np.int32), "logits": logits.reshape(-1, V).numpy()})


def main():
    torch.set_num_threads(1)
    if sys.argv[1] == "logits":
        cmd_logits(sys.argv[2], sys.argv[3], sys.argv[4])
    elif sys.argv[1] == "make":
        args = sys.argv[4:]
        shards = int(args[args.index("--shards") + 1]) if "--shards" in args else 1
        cmd_make(sys.argv[2], sys.argv[3], "--bf16" in args, shards, "--no-prefix" in args)
    else:
        sys.exit("unknown command " + sys.argv[1])


if __name__ == "__main__":
    main()
