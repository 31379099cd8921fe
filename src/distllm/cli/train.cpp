// `distllm train`: train a GPT-2 or Llama model on one process.
#include <cstdio>
#include <memory>
#include <optional>

#include "distllm/base/error.h"
#include "distllm/base/log.h"
#include "distllm/cli/command.h"
#include "distllm/cli/model_flags.h"
#include "distllm/io/file_util.h"
#include "distllm/model/hf_checkpoint.h"
#include "distllm/tokenizer/tokenizer.h"
#include "distllm/train/trainer.h"

namespace distllm {
namespace {

// Byte-level tokens (vocabulary 256) from a text file: until a tokenizer is chosen,
// any text trains. The last `val_fraction` of the bytes is held out.
void byte_datasets(const std::string& path, double val_fraction, std::unique_ptr<TokenDataset>& train,
                   std::unique_ptr<TokenDataset>& val) {
  std::string text = read_file(path);
  DL_CHECK(!text.empty(), "%s: empty text file", path.c_str());
  size_t n_val = static_cast<size_t>(static_cast<double>(text.size()) * val_fraction);
  std::vector<uint32_t> tr(text.begin(), text.end() - static_cast<long>(n_val));
  for (auto& t : tr) t &= 0xffu;
  train = std::make_unique<TokenDataset>(TokenDataset::from_tokens(std::move(tr), 256, path));
  if (n_val > 0) {
    std::vector<uint32_t> va(text.end() - static_cast<long>(n_val), text.end());
    for (auto& t : va) t &= 0xffu;
    val = std::make_unique<TokenDataset>(TokenDataset::from_tokens(std::move(va), 256, path + " (val)"));
  }
}

int run_train(Args& args) {
  apply_thread_flag(args);
  auto data = args.get_optional("data", "token file or prepared data directory (see `distllm data prepare`)");
  auto val_data = args.get_optional("val-data", "validation token file/directory (default: the data dir's val split)");
  auto text = args.get_optional("text", "train byte-level (vocabulary 256) on this text file instead of --data");
  double val_fraction = args.get_double("val-fraction", 0.05, "held-out fraction of --text for validation");
  auto init_from = args.get_optional("init-from", "start from this Hugging Face model directory");

  TrainOptions o;
  o.batch = static_cast<int>(args.get_int("batch", 8, "sequences per micro-batch"));
  o.seq_len = static_cast<int>(args.get_int("seq", 256, "tokens per sequence"));
  o.grad_accum = static_cast<int>(args.get_int("grad-accum", 1, "micro-batches per optimizer step"));
  o.steps = args.get_int("steps", 100, "optimizer steps");
  o.schedule.max_lr = args.get_double("lr", 6e-4, "peak learning rate");
  o.schedule.min_lr = args.get_double("min-lr", -1, "final learning rate (default lr/10)");
  o.schedule.warmup_steps = args.get_int("warmup", 0, "linear warmup steps");
  o.schedule.kind = args.get_string("schedule", "cosine", "cosine | constant");
  o.adamw.beta1 = args.get_double("beta1", 0.9, "AdamW beta1");
  o.adamw.beta2 = args.get_double("beta2", 0.95, "AdamW beta2");
  o.adamw.eps = args.get_double("adam-eps", 1e-8, "AdamW epsilon");
  o.adamw.weight_decay = args.get_double("weight-decay", 0.1, "decoupled weight decay (matrices and embeddings)");
  o.adamw.grad_clip = args.get_double("clip", 1.0, "max global gradient norm (0: off)");
  o.seed = static_cast<uint64_t>(args.get_int("seed", 1337, "seed for initialisation and data order"));
  o.eval_every = args.get_int("eval-every", 0, "evaluate every N steps (0: at start and end only)");
  o.eval_batches = static_cast<int>(args.get_int("eval-batches", 8, "validation batches per evaluation"));
  o.time_limit_seconds = args.get_double("time-limit", 0, "stop after this many seconds of training (0: none)");
  auto out = args.get_optional("out", "save the trained model here (Hugging Face layout)");
  int64_t log_every = args.get_int("log-every", 1, "print one line every N steps");

  std::unique_ptr<TokenDataset> train, val;
  int vocab_hint = 0;
  if (text) {
    DL_CHECK(!data, "give either --data or --text, not both");
    byte_datasets(*text, val_fraction, train, val);
    vocab_hint = 256;
  } else {
    DL_CHECK(data.has_value() || args.help_requested(), "no training data: pass --data DIR|FILE or --text FILE");
    if (data) {
      train = std::make_unique<TokenDataset>(TokenDataset::open(*data, "train"));
      if (val_data) {
        val = std::make_unique<TokenDataset>(TokenDataset::open(*val_data, "val"));
      } else if (is_directory(*data)) {
        try {
          val = std::make_unique<TokenDataset>(TokenDataset::open(*data, "val"));
        } catch (const Error&) {
          LOG_WARN("%s has no validation split; training without evaluation", data->c_str());
        }
      }
      vocab_hint = static_cast<int>(train->vocab_size());
    }
  }
  ModelConfig cfg = model_config_from_flags(args, "gpt2-tiny", vocab_hint);
  if (args.help_or_finish()) return 0;
  if (o.schedule.min_lr < 0) o.schedule.min_lr = o.schedule.max_lr / 10;

  std::unique_ptr<Transformer> model;
  if (init_from) {
    model = load_hf_model(*init_from);
    cfg = model->config();
  } else {
    model = std::make_unique<Transformer>(cfg);
    model->init_weights(o.seed);
  }
  std::printf("model: %s\n", cfg.describe().c_str());
  std::printf("data: %s, %llu tokens%s\n", train->origin().c_str(), (unsigned long long)train->size(),
              val ? strprintf("; validation %llu tokens", (unsigned long long)val->size()).c_str() : "");
  std::printf("batch %d x %d tokens, %d accumulation step(s), %lld steps, lr %g -> %g (%s, warmup %lld)\n", o.batch,
              o.seq_len, o.grad_accum, (long long)o.steps, o.schedule.max_lr, o.schedule.min_lr,
              o.schedule.kind.c_str(), (long long)o.schedule.warmup_steps);
  std::fflush(stdout);

  Trainer trainer(*model, *train, val.get(), o);
  trainer.run(
      [&](const StepStats& s) {
        if (s.step % log_every == 0 || s.step == o.steps)
          std::printf("step %5lld/%lld | loss %.4f | lr %.3e | grad norm %.4f | %.1f ms | %.0f tok/s\n",
                      (long long)s.step, (long long)o.steps, s.loss, s.lr, s.grad_norm, s.millis, s.tokens_per_second);
        std::fflush(stdout);
      },
      [&](int64_t step, double loss) {
        std::printf("eval  %5lld | val loss %.4f\n", (long long)step, loss);
        std::fflush(stdout);
      });
  if (out) {
    // The model directory gets the tokenizer the data was made with, so `generate`
    // and `serve` can use it directly.
    SaveOptions save;
    std::optional<Tokenizer> tok;
    if (text) {
      tok = Tokenizer::byte_level();
    } else if (data && is_directory(*data) && file_exists(join_path(*data, "tokenizer.json"))) {
      tok = Tokenizer::from_file(join_path(*data, "tokenizer.json"));
    }
    if (tok) {
      DL_CHECK(tok->vocab_size() <= cfg.vocab_size, "tokenizer vocabulary %d exceeds the model's %d",
               tok->vocab_size(), cfg.vocab_size);
      save.extra_files["tokenizer.json"] = tok->to_json();
      if (tok->eos_token_id()) save.eos_token_id = *tok->eos_token_id();
      if (tok->bos_token_id()) save.bos_token_id = *tok->bos_token_id();
    }
    save_hf_model(*model, *out, save);
    std::printf("saved %s%s\n", out->c_str(), tok ? " (with tokenizer.json)" : "");
  }
  return 0;
}

DISTLLM_REGISTER_COMMAND("train", "train a GPT-2 or Llama model", run_train);

}  // namespace
}  // namespace distllm
