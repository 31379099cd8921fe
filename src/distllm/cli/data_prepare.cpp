// `distllm data prepare`: text files -> tokenized shards + manifest.json.
//
// Each input file is split into documents (whole file, or at --doc-separator), every
// document is tokenized and followed by the tokenizer's end-of-text token, and each
// document goes to the validation split with probability --val-fraction (decided by
// a hash of its index, so the split is reproducible and spread over all sources).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <vector>

#include "distllm/base/error.h"
#include "distllm/base/parallel.h"
#include "distllm/base/rng.h"
#include "distllm/base/timer.h"
#include "distllm/cli/command.h"
#include "distllm/io/file_util.h"
#include "distllm/tokenizer/tokenizer.h"
#include "distllm/tokenizer/utf8.h"
#include "distllm/train/token_file.h"

namespace distllm {
namespace {

struct Document {
  size_t source;
  std::string_view text;
};

// Splits text at every occurrence of `sep` (dropped), skipping empty pieces.
std::vector<std::string_view> split_documents(std::string_view text, const std::string& sep) {
  std::vector<std::string_view> out;
  if (sep.empty()) {
    if (!text.empty()) out.push_back(text);
    return out;
  }
  size_t start = 0;
  while (start <= text.size()) {
    size_t pos = text.find(sep, start);
    std::string_view piece = text.substr(start, pos == std::string_view::npos ? std::string_view::npos : pos - start);
    if (!piece.empty()) out.push_back(piece);
    if (pos == std::string_view::npos) break;
    start = pos + sep.size();
  }
  return out;
}

// What a text file's start says about it: binary files (executables, archives,
// images) hold NUL bytes and byte sequences that are not UTF-8.
struct TextCheck {
  size_t nul = 0, invalid = 0, checked = 0;
  bool looks_binary() const { return nul > 0 || invalid * 100 > checked; }
};

TextCheck check_text(std::string_view text) {
  TextCheck c;
  c.checked = std::min<size_t>(text.size(), 1 << 16);
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  for (size_t i = 0; i < c.checked;) {
    const Utf8Step step = utf8_step(p + i, c.checked - i);
    if (step.kind == Utf8Step::kTruncated) break;  // cut by the sample's end
    if (step.kind == Utf8Step::kInvalid) ++c.invalid;
    if (step.kind == Utf8Step::kChar && step.cp == 0) ++c.nul;
    i += step.length;
  }
  return c;
}

class Progress {
 public:
  explicit Progress(size_t total) : total_(total), tty_(isatty(STDOUT_FILENO)) {}
  void update(size_t done) {
    if (!tty_ || timer_.seconds() - last_ < 0.1) return;
    last_ = timer_.seconds();
    int width = 40, filled = static_cast<int>(width * done / std::max<size_t>(total_, 1));
    std::printf("\r[%s%s] %3zu%% %.1f MB/s", std::string(filled, '#').c_str(), std::string(width - filled, ' ').c_str(),
                100 * done / std::max<size_t>(total_, 1), done / 1e6 / std::max(timer_.seconds(), 1e-9));
    std::fflush(stdout);
  }
  void finish() {
    if (tty_) std::printf("\r%70s\r", "");
  }

 private:
  size_t total_;
  bool tty_;
  Timer timer_;
  double last_ = -1;
};

void write_shards(const std::string& dir, const std::string& split, const std::vector<uint32_t>& tokens,
                  uint64_t shard_tokens, uint32_t vocab, nlohmann::json& names) {
  names = nlohmann::json::array();
  size_t count = std::max<size_t>(1, (tokens.size() + shard_tokens - 1) / shard_tokens);
  for (size_t k = 0; k < count; ++k) {
    size_t lo = k * shard_tokens, hi = std::min<size_t>(tokens.size(), lo + shard_tokens);
    std::string name = strprintf("%s_%05zu.tok", split.c_str(), k);
    write_token_file(join_path(dir, name), std::span<const uint32_t>(tokens.data() + lo, hi - lo), vocab);
    names.push_back(name);
  }
}

int run_data_prepare(Args& args) {
  apply_thread_flag(args);
  std::vector<std::string> inputs = args.get_list("input", "text files to tokenize");
  std::string tok_path = args.get_string("tokenizer", "gpt2",
                                         "tokenizer.json, a model or GPT-2 vocabulary directory, 'gpt2' or 'bytes'");
  std::string out = args.get_required("out", "output directory");
  double val_fraction = args.get_double("val-fraction", 0.01, "fraction of documents held out for validation");
  std::string sep = args.get_string("doc-separator", "", "split files into documents at this string (\\n and \\t escapes)");
  int64_t shard_tokens = args.get_int("shard-tokens", 100'000'000, "tokens per shard file");
  uint64_t seed = static_cast<uint64_t>(args.get_int("seed", 0, "seed for the train/validation split"));
  if (args.help_or_finish()) return 0;
  DL_CHECK(!inputs.empty(), "no input files: pass --input FILE...");
  DL_CHECK(val_fraction >= 0 && val_fraction < 1, "--val-fraction must be in [0, 1), got %g", val_fraction);
  DL_CHECK(shard_tokens > 0, "--shard-tokens must be positive");
  std::string separator;
  for (size_t i = 0; i < sep.size(); ++i) {
    if (sep[i] == '\\' && i + 1 < sep.size() && (sep[i + 1] == 'n' || sep[i + 1] == 't')) {
      separator.push_back(sep[++i] == 'n' ? '\n' : '\t');
    } else {
      separator.push_back(sep[i]);
    }
  }

  Tokenizer tok = tok_path == "bytes" ? Tokenizer::byte_level() : Tokenizer::load(tok_path);
  std::optional<int32_t> eos = tok.eos_token_id();
  std::vector<std::string> texts;
  size_t total_bytes = 0;
  for (const auto& path : inputs) {
    texts.push_back(read_file(path));
    total_bytes += texts.back().size();
    if (const TextCheck c = check_text(texts.back()); c.looks_binary())
      std::fprintf(stderr,
                   "warning: %s looks like a binary file (%zu NUL bytes and %zu invalid UTF-8 sequences in its first "
                   "%zu bytes); it is tokenized as text anyway\n",
                   path.c_str(), c.nul, c.invalid, c.checked);
  }
  std::vector<Document> docs;
  for (size_t s = 0; s < texts.size(); ++s)
    for (std::string_view d : split_documents(texts[s], separator)) docs.push_back({s, d});
  DL_CHECK(!docs.empty(), "the inputs contain no text");

  // Tokenize documents on all threads, in chunks so the progress bar moves.
  Timer timer;
  Progress progress(total_bytes);
  std::vector<std::vector<int32_t>> ids(docs.size());
  size_t done_bytes = 0;
  constexpr size_t kBatch = 256;
  for (size_t lo = 0; lo < docs.size(); lo += kBatch) {
    size_t hi = std::min(docs.size(), lo + kBatch);
    if (hi - lo == 1) {
      ids[lo] = tok.encode_parallel(docs[lo].text, /*allow_special=*/false);
    } else {
      parallel_for(static_cast<int64_t>(lo), static_cast<int64_t>(hi),
                   [&](int64_t i) { ids[i] = tok.encode(docs[i].text, /*allow_special=*/false); });
    }
    for (size_t i = lo; i < hi; ++i) done_bytes += docs[i].text.size();
    progress.update(done_bytes);
  }
  progress.finish();

  std::vector<uint32_t> train, val;
  size_t val_docs = 0;
  uint64_t train_bytes = 0, val_bytes = 0;  // for bits per byte (TokenDataset::text_bytes)
  for (size_t i = 0; i < docs.size(); ++i) {
    bool to_val = CounterRng(seed, 17, i).uniform_double() < val_fraction;
    std::vector<uint32_t>& dst = to_val ? val : train;
    val_docs += to_val;
    (to_val ? val_bytes : train_bytes) += docs[i].text.size();
    for (int32_t t : ids[i]) dst.push_back(static_cast<uint32_t>(t));
    if (eos) dst.push_back(static_cast<uint32_t>(*eos));
  }
  DL_CHECK(!train.empty(), "every document went to validation; lower --val-fraction");

  make_directories(out);
  uint32_t vocab = static_cast<uint32_t>(tok.vocab_size());
  nlohmann::json train_names, val_names;
  write_shards(out, "train", train, static_cast<uint64_t>(shard_tokens), vocab, train_names);
  if (!val.empty()) write_shards(out, "val", val, static_cast<uint64_t>(shard_tokens), vocab, val_names);
  tok.save(join_path(out, "tokenizer.json"));
  nlohmann::json manifest = {
      {"format", "distllm-tokens-v1"},
      {"tokenizer", tok_path},
      {"vocab_size", vocab},
      {"eos_token_id", eos ? nlohmann::json(*eos) : nlohmann::json(nullptr)},
      {"sources", inputs},
      {"documents", {{"train", docs.size() - val_docs}, {"val", val_docs}}},
      {"tokens", {{"train", train.size()}, {"val", val.size()}}},
      {"bytes", total_bytes},
      {"text_bytes", {{"train", train_bytes}, {"val", val_bytes}}},
      {"shards", {{"train", train_names}, {"val", val.empty() ? nlohmann::json::array() : val_names}}},
  };
  write_file_atomic(join_path(out, "manifest.json"), manifest.dump(2));
  double secs = timer.seconds();
  std::printf("%zu files, %zu documents, %.1f MB -> %zu train + %zu val tokens (vocab %u) in %.1f s (%.1f MB/s)\n",
              inputs.size(), docs.size(), total_bytes / 1e6, train.size(), val.size(), vocab, secs,
              total_bytes / 1e6 / secs);
  std::printf("wrote %s\n", out.c_str());
  return 0;
}

DISTLLM_REGISTER_COMMAND("data prepare", "tokenize text files into training shards", run_data_prepare);

}  // namespace
}  // namespace distllm
