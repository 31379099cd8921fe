// `distllm generate`: offline sampling from a model directory, streamed to stdout.
//
// It runs the same batch-invariant inference model, sampler and detokenizer as the
// server, one sequence at a time, so for the same prompt and seed its output equals
// what `distllm serve` returns, whatever else the server is batching.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "distllm/base/error.h"
#include "distllm/base/timer.h"
#include "distllm/cli/command.h"
#include "distllm/cli/model_flags.h"
#include "distllm/io/file_util.h"
#include "distllm/model/hf_cache.h"
#include "distllm/model/inference.h"
#include "distllm/serve/detokenizer.h"
#include "distllm/serve/model_bundle.h"
#include "distllm/serve/sampler.h"
#include "distllm/serve/tokenizer_codec.h"

namespace distllm {
namespace {

int run_generate(Args& args) {
  apply_thread_flag(args);
  const std::string model_dir = resolve_model_dir(args.get_required("model", "Hugging Face model directory, hub cache folder (models--ORG--NAME) or cached id ORG/NAME"));
  auto prompt_flag = args.get_optional("prompt", "prompt text");
  auto prompt_file = args.get_optional("prompt-file", "read the prompt from this file");
  int64_t max_tokens = args.get_int("max-tokens", 64, "tokens to generate at most");
  serve::SamplingParams params;
  params.temperature = static_cast<float>(args.get_double("temperature", 1.0, "sampling temperature (0: greedy)"));
  params.top_k = static_cast<int>(args.get_int("top-k", 0, "keep the k most likely tokens (0: all)"));
  params.top_p = static_cast<float>(args.get_double("top-p", 1.0, "nucleus sampling mass (1: off)"));
  params.min_p = static_cast<float>(args.get_double("min-p", 0.0, "drop tokens below this fraction of the top one's probability"));
  params.presence_penalty = static_cast<float>(args.get_double("presence-penalty", 0.0, "OpenAI presence penalty [-2, 2]"));
  params.frequency_penalty = static_cast<float>(args.get_double("frequency-penalty", 0.0, "OpenAI frequency penalty [-2, 2]"));
  params.repetition_penalty = static_cast<float>(args.get_double("repetition-penalty", 1.0, "HF repetition penalty (1: off)"));
  params.seed = static_cast<uint64_t>(args.get_int("seed", 0, "random seed: same seed, same output"));
  std::vector<std::string> stops = args.get_list("stop", "stop when this text appears (not printed; repeatable)");
  bool echo = args.get_flag("echo", "print the prompt before the generated text");
  bool ignore_eos = args.get_flag("ignore-eos", "keep going past the end-of-text token");
  int block_size = static_cast<int>(args.get_int("block-size", 16, "KV cache block size"));
  const DType dtype = inference_dtype_flag(args);
  const DType kv_dtype = kv_cache_dtype_flag(args);
  if (args.help_or_finish()) return 0;

  DL_CHECK(prompt_flag.has_value() != prompt_file.has_value(), "give exactly one of --prompt and --prompt-file");
  std::string prompt = prompt_flag ? *prompt_flag : read_file(*prompt_file);
  DL_CHECK(max_tokens >= 1, "--max-tokens must be at least 1, got %lld", (long long)max_tokens);
  DL_CHECK(params.temperature >= 0, "--temperature must be >= 0, got %g", params.temperature);
  DL_CHECK(params.top_p > 0 && params.top_p <= 1, "--top-p must be in (0, 1], got %g", params.top_p);
  DL_CHECK(params.top_k >= 0, "--top-k must be >= 0, got %d", params.top_k);
  DL_CHECK(params.min_p >= 0 && params.min_p <= 1, "--min-p must be in [0, 1], got %g", params.min_p);
  DL_CHECK(std::fabs(params.presence_penalty) <= 2, "--presence-penalty must be in [-2, 2], got %g", params.presence_penalty);
  DL_CHECK(std::fabs(params.frequency_penalty) <= 2, "--frequency-penalty must be in [-2, 2], got %g", params.frequency_penalty);
  DL_CHECK(params.repetition_penalty > 0, "--repetition-penalty must be > 0, got %g", params.repetition_penalty);
  DL_CHECK(block_size >= 1 && block_size <= 1024, "--block-size must be in [1, 1024]");

  serve::ModelBundle bundle = serve::load_model_bundle(model_dir);
  const ModelConfig& cfg = bundle.weights->config();
  serve::TokenizerCodec codec(std::move(*bundle.tokenizer));
  // As the server encodes a completion's text prompt (BOS where the tokenizer adds one).
  std::vector<int32_t> tokens = codec.encode_prompt(prompt);
  if (tokens.empty()) {
    // Like transformers, an empty prompt starts from the beginning-of-text token.
    auto start = codec.tokenizer().bos_token_id();
    if (!start) start = codec.tokenizer().eos_token_id();
    DL_CHECK(start.has_value(), "the prompt is empty and the tokenizer has no BOS/EOS token to start from");
    tokens.push_back(*start);
  }
  const int64_t prompt_len = static_cast<int64_t>(tokens.size());
  DL_CHECK(prompt_len + max_tokens <= cfg.max_position,
           "prompt (%lld tokens) + max tokens (%lld) exceeds the model's context of %d", (long long)prompt_len,
           (long long)max_tokens, cfg.max_position);

  InferenceModel engine(bundle.weights, dtype);
  bundle.weights.reset();  // the engine copied what it reads
  const int blocks = static_cast<int>((prompt_len + max_tokens + block_size - 1) / block_size);
  PagedKvCache cache(cfg, blocks, block_size, kv_dtype);
  std::vector<int32_t> table(blocks);
  for (int i = 0; i < blocks; ++i) table[i] = i;
  serve::Detokenizer detok(codec.stream_decoder(), stops);
  serve::SamplerScratch scratch;
  auto is_eos = [&](int32_t t) {
    return std::find(bundle.eos_ids.begin(), bundle.eos_ids.end(), t) != bundle.eos_ids.end();
  };

  if (echo) std::fputs(prompt.c_str(), stdout);
  std::fflush(stdout);
  Timer timer;
  std::vector<float> logits;
  engine.forward({InferenceChunk{tokens.data(), static_cast<int>(prompt_len), 0, table.data(), blocks, true}}, cache,
                 logits);
  double prefill_s = timer.seconds();
  const char* finish = "length";
  bool stop_string_matched = false;
  int64_t generated = 0;
  for (int64_t i = 0; i < max_tokens; ++i) {
    serve::SequenceContext context;
    context.prompt = std::span<const int32_t>(tokens).first(static_cast<size_t>(prompt_len));
    context.generated = std::span<const int32_t>(tokens).subspan(static_cast<size_t>(prompt_len));
    serve::SampleResult r = serve::sample_token(logits, params, static_cast<uint64_t>(i), scratch, context);
    if (is_eos(r.token) && !ignore_eos) {
      finish = "stop";
      break;
    }
    tokens.push_back(r.token);
    ++generated;
    serve::Detokenizer::Output out = detok.push(r.token);
    std::fputs(out.text.c_str(), stdout);
    std::fflush(stdout);
    if (out.stopped) {
      finish = "stop";
      stop_string_matched = true;
      break;
    }
    if (i + 1 == max_tokens) break;
    int pos = static_cast<int>(tokens.size()) - 1;
    engine.forward({InferenceChunk{&tokens[pos], 1, pos, table.data(), blocks, true}}, cache, logits);
  }
  if (!stop_string_matched) std::fputs(detok.finish().text.c_str(), stdout);  // text held back for stop matching
  std::fputs("\n", stdout);
  std::fflush(stdout);  // the text's last line ends before the statistics (stderr) start
  double total_s = timer.seconds();
  std::fprintf(stderr,
               "[generate] prompt %lld tokens (%.0f ms), generated %lld tokens at %.1f tok/s, finish: %s; KV cache %s, "
               "%d tokens\n",
               (long long)prompt_len, prefill_s * 1e3, (long long)generated,
               generated > 0 ? static_cast<double>(generated) / std::max(total_s - prefill_s, 1e-9) : 0.0, finish,
               inference_dtype_name(kv_dtype), blocks * block_size);
  return 0;
}

DISTLLM_REGISTER_COMMAND("generate", "sample text from a model directory (streamed)", run_generate);

}  // namespace
}  // namespace distllm
