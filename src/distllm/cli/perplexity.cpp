// `distllm perplexity`: perplexity of a model directory on held-out tokens through
// the inference path, for one or more weight dtypes and KV cache dtypes side by side:
//
//   distllm perplexity --model runs/quickstart/model --data runs/quickstart/data
//                      --dtype f32,bf16,int8 --kv-cache-dtype f32,bf16
//   distllm perplexity --model runs/quickstart/model --text held_out.txt
//
// One row per (weight dtype, KV cache dtype), named by the weight dtype, with
// "+kvbf16" when the KV cache is bf16. The first row is the reference: each other
// one's change is printed against it.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "distllm/base/error.h"
#include "distllm/base/parallel.h"
#include "distllm/base/strings.h"
#include "distllm/base/timer.h"
#include "distllm/cli/command.h"
#include "distllm/cli/model_flags.h"
#include "distllm/model/hf_cache.h"
#include "distllm/model/hf_checkpoint.h"
#include "distllm/model/perplexity.h"
#include "distllm/io/file_util.h"
#include "distllm/tokenizer/tokenizer.h"
#include "distllm/train/dataset.h"

namespace distllm {
namespace {

// Every token of a held-out text file, encoded as the model's tokenizer encodes it.
TokenDataset tokenize_text(const std::string& path, const std::string& model_dir) {
  const Tokenizer tok = Tokenizer::load(model_dir);
  std::vector<uint32_t> ids;
  const std::string text = read_file(path);
  for (int32_t t : tok.encode_parallel(text, /*allow_special=*/false)) ids.push_back(static_cast<uint32_t>(t));
  DL_CHECK(!ids.empty(), "%s: no text", path.c_str());
  const size_t n = ids.size();
  TokenDataset d = TokenDataset::from_tokens(std::move(ids), static_cast<uint32_t>(tok.vocab_size()),
                                             strprintf("%s (held-out text, %zu tokens)", path.c_str(), n));
  d.set_text_bytes(text.size());
  return d;
}

int run_perplexity(Args& args) {
  apply_thread_flag(args);
  const std::string model_dir = resolve_model_dir(args.get_required(
      "model", "Hugging Face model directory, hub cache folder (models--ORG--NAME) or cached id ORG/NAME"));
  const std::string data =
      args.get_string("data", "", "token data: a `distllm data prepare` directory or a .tok file (or give --text)");
  const std::string text = args.get_string("text", "", "a held-out text file, tokenized with the model's tokenizer");
  const std::string split_name =
      args.get_string("split", "val", "which split of a data directory: val, train or all (every token)");
  const std::string dtypes = args.get_string("dtype", "f32,bf16,int8", "weight dtypes, comma-separated; the first is the reference");
  const std::string kv_dtypes = args.get_string(
      "kv-cache-dtype", "f32", "KV cache dtypes (f32, bf16, int8), comma-separated; each weight dtype with each");
  const int seq = static_cast<int>(args.get_int("seq", 128, "tokens per scored window"));
  const int64_t max_windows = args.get_int("windows", 64, "windows scored at most (spread over the data)");
  if (args.help_or_finish()) return 0;

  std::shared_ptr<const Transformer> model = load_hf_model(model_dir);
  const ModelConfig& cfg = model->config();
  DL_CHECK(seq >= 2 && seq <= cfg.max_position, "--seq must be in [2, %d], got %d", cfg.max_position, seq);
  DL_CHECK(max_windows >= 1, "--windows must be at least 1");
  DL_CHECK(data.empty() != text.empty(), "give the held-out tokens as --data DIR|FILE or --text FILE (one of them)");
  DL_CHECK(split_name == "val" || split_name == "train" || split_name == "all",
           "--split must be val, train or all, got '%s'", split_name.c_str());
  TokenDataset tokens = text.empty() ? TokenDataset::open(data, split_name) : tokenize_text(text, model_dir);
  tokens.check_tokens_below(cfg.vocab_size);
  // Windows of seq tokens (window() gives seq + 1: the last is the next window's first).
  const uint64_t available = tokens.num_windows(seq - 1);
  DL_CHECK(available > 0, "%s has no window of %d tokens", tokens.origin().c_str(), seq);
  const uint64_t n = std::min<uint64_t>(available, static_cast<uint64_t>(max_windows));
  std::printf("model: %s\ndata:  %s, %llu windows of %d tokens\n\n", cfg.describe().c_str(), tokens.origin().c_str(),
              static_cast<unsigned long long>(n), seq);
  std::vector<DType> kv_list;
  for (const std::string& name : split(kv_dtypes, ',')) kv_list.push_back(parse_kv_cache_dtype(name));
  std::printf("%-11s %12s %12s %10s %10s %8s\n", "dtype", "nll/token", "perplexity", "bits/byte", "vs first",
              "seconds");
  double reference = 0;
  for (const std::string& name : split(dtypes, ',')) {
    const DType dtype = parse_inference_dtype(name);
    InferenceModel engine(model, dtype);
    for (DType kv : kv_list) {
      Timer t;
      NllSum total;
      std::vector<int32_t> window(static_cast<size_t>(seq));
      for (uint64_t i = 0; i < n; ++i) {
        tokens.window(i * available / n, seq - 1, window.data());
        total.add(sequence_nll(engine, window.data(), seq, kv));
      }
      const double ppl = total.perplexity();
      if (reference == 0) reference = ppl;
      const std::string label = kv == DType::kF32 ? name : name + "+kv" + inference_dtype_name(kv);
      const double nll = total.nats / static_cast<double>(total.tokens);
      // Bits per byte compares models whose tokenizers differ; "-" when the data
      // does not record its text's size (token files, older manifests).
      const double bpb = tokens.bits_per_byte(nll);
      const std::string bpb_text = bpb > 0 ? strprintf("%10.4f", bpb) : strprintf("%10s", "-");
      std::printf("%-11s %12.5f %12.4f %s %+9.3f%% %8.1f\n", label.c_str(), nll, ppl, bpb_text.c_str(),
                  100.0 * (ppl / reference - 1.0), t.seconds());
      std::fflush(stdout);
    }
  }
  return 0;
}

DISTLLM_REGISTER_COMMAND("perplexity", "perplexity on held-out tokens through the inference path, per weight dtype",
                         run_perplexity);

}  // namespace
}  // namespace distllm
