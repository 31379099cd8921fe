// `distllm tokenizer train`: a byte-level BPE vocabulary (GPT-2 style) learned from
// text files, written as a Hugging Face tokenizer.json (tokenizer/bpe_trainer.h) that
// `distllm tokenize --tokenizer` and `distllm data prepare --tokenizer` accept.
#include <cstdio>
#include <string>
#include <vector>

#include "distllm/base/error.h"
#include "distllm/base/timer.h"
#include "distllm/cli/command.h"
#include "distllm/io/file_util.h"
#include "distllm/tokenizer/bpe_trainer.h"
#include "distllm/tokenizer/tokenizer.h"

namespace distllm {
namespace {

int run_tokenizer_train(Args& args) {
  apply_thread_flag(args);
  std::vector<std::string> inputs = args.get_list("input", "text files to learn the vocabulary from");
  int64_t vocab_size = args.get_int("vocab-size", 0,
                                    "tokens in the vocabulary, the 256 byte symbols and the special tokens included");
  std::vector<std::string> specials =
      args.get_list("special-tokens", "special tokens, ids 0.. in this order (default: <|endoftext|>)");
  bool no_specials = args.get_flag("no-special-tokens", "no special tokens at all");
  int64_t min_frequency = args.get_int("min-frequency", 0, "never merge a pair seen fewer times than this");
  std::string out = args.get_required("out", "the tokenizer.json to write");
  if (args.help_or_finish()) return 0;

  DL_CHECK(!inputs.empty(), "no input files: pass --input FILE...");
  DL_CHECK(vocab_size > 0, "--vocab-size N is required (a positive number of tokens, e.g. 8192)");
  DL_CHECK(min_frequency >= 0, "--min-frequency must be >= 0, got %lld", static_cast<long long>(min_frequency));
  DL_CHECK(!(no_specials && !specials.empty()), "give --special-tokens or --no-special-tokens, not both");
  BpeTrainerOptions options;
  options.vocab_size = vocab_size;
  options.min_frequency = static_cast<uint64_t>(min_frequency);
  if (no_specials) options.special_tokens.clear();
  if (!specials.empty()) options.special_tokens = specials;
  // Refuse a too-small vocabulary before reading a large corpus.
  check_bpe_trainer_options(options);

  Timer timer;
  WordCounts words;
  size_t total_bytes = 0;
  for (const std::string& path : inputs) {
    DL_CHECK(file_exists(path), "%s: no such file", path.c_str());
    DL_CHECK(!is_directory(path), "%s is a directory; --input takes text files", path.c_str());
    MappedFile file(path);
    words.add_text(std::string_view(reinterpret_cast<const char*>(file.data()), file.size()));
    file.check_unchanged("training text");
    total_bytes += file.size();
  }
  DL_CHECK(words.total_words() > 0, "the input files contain no text (%zu file%s, %zu bytes)", inputs.size(),
           inputs.size() == 1 ? "" : "s", total_bytes);
  const double count_seconds = timer.seconds();

  TrainedBpe bpe = train_bpe(words, options);
  std::string json = trained_bpe_json(bpe);
  // What we write must load here (and so in `tokenize` and `data prepare`).
  Tokenizer check = Tokenizer::from_json(json, out);
  DL_CHECK(check.vocab_size() == static_cast<int32_t>(bpe.tokens.size()), "internal error: %s has %d tokens, not %zu",
           out.c_str(), check.vocab_size(), bpe.tokens.size());
  write_file_atomic(out, json);
  const double seconds = timer.seconds();

  std::printf("trained %zu tokens (%zu special, 256 bytes, %zu merges) on %.2f MB of text from %zu file%s: "
              "%llu words, %zu distinct\n",
              bpe.tokens.size(), bpe.num_special, bpe.merges.size(), total_bytes / 1e6, inputs.size(),
              inputs.size() == 1 ? "" : "s", static_cast<unsigned long long>(words.total_words()),
              words.unique_words());
  std::printf("time: %.2f s (counting words %.2f s, merging %.2f s), %.2f MB/s\n", seconds, count_seconds,
              seconds - count_seconds, seconds > 0 ? total_bytes / 1e6 / seconds : 0.0);
  if (static_cast<int64_t>(bpe.tokens.size()) < vocab_size)
    std::printf("note: stopped at %zu of %lld tokens: no pair of symbols is left that occurs %s\n", bpe.tokens.size(),
                static_cast<long long>(vocab_size),
                min_frequency > 1 ? strprintf("at least %lld times", static_cast<long long>(min_frequency)).c_str()
                                  : "in the text");
  std::printf("wrote %s\n", out.c_str());
  return 0;
}

DISTLLM_REGISTER_COMMAND("tokenizer train", "learn a byte-level BPE vocabulary from text files (tokenizer.json)",
                         run_tokenizer_train);

}  // namespace
}  // namespace distllm
