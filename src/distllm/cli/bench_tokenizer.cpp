// `distllm bench tokenizer`: encode throughput on one thread and on all threads.
//
// The default corpus is the text of Debian's fortunes package (several MB of real
// English prose, installed by scripts/setup.sh). "Cold" runs start with an empty piece
// cache, as a corpus is encoded once in practice; "warm" ones reuse it.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "distllm/base/error.h"
#include "distllm/base/parallel.h"
#include "distllm/base/timer.h"
#include "distllm/cli/command.h"
#include "distllm/tokenizer/tokenizer.h"

namespace distllm {
namespace {

namespace fs = std::filesystem;

constexpr const char* kFortunesDir = "/usr/share/games/fortunes";

std::string read_all(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  DL_CHECK(in.good(), "cannot open %s", path.c_str());
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The fortune files themselves: not the .dat indexes, not the .u8 symlinks.
std::vector<fs::path> fortune_files() {
  std::vector<fs::path> files;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(kFortunesDir, ec)) {
    if (!entry.is_regular_file() || entry.is_symlink()) continue;
    std::string ext = entry.path().extension().string();
    if (ext == ".dat" || ext == ".u8") continue;
    files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int run_bench_tokenizer(Args& args) {
  std::vector<std::string> files = args.get_list("file", "corpus files (default: Debian's fortunes)");
  std::string path = args.get_string("tokenizer", "gpt2", "tokenizer (see `distllm tokenize --help`)");
  int64_t repeat = args.get_int("repeat", 3, "timed runs per measurement (the median is shown)");
  apply_thread_flag(args);
  if (args.help_or_finish()) return 0;
  DL_CHECK(repeat >= 1 && repeat <= 100, "--repeat must be in [1, 100]");

  std::string corpus, source;
  if (files.empty()) {
    std::vector<fs::path> fortunes = fortune_files();
    DL_CHECK(!fortunes.empty(), "no corpus: %s has no fortune files (install Debian's fortunes package, or pass --file)",
             kFortunesDir);
    for (const fs::path& f : fortunes) corpus += read_all(f);
    source = strprintf("%zu fortune files in %s", fortunes.size(), kFortunesDir);
  } else {
    for (const std::string& f : files) corpus += read_all(f);
    source = strprintf("%zu file(s)", files.size());
  }
  DL_CHECK(!corpus.empty(), "the corpus is empty");

  Tokenizer tok = Tokenizer::load(path);
  const int threads = num_threads();
  const double mb = static_cast<double>(corpus.size()) / 1e6;
  std::printf("tokenizer: %s (%d tokens)\ncorpus: %s, %.2f MB\n\n", path.c_str(), tok.vocab_size(), source.c_str(), mb);
  std::printf("%-8s %-5s %10s %14s\n", "threads", "cache", "MB/s", "tokens/s");

  std::vector<int32_t> reference;
  auto measure = [&](bool parallel, bool cold, const char* label, int shown_threads) {
    std::vector<double> seconds;
    std::vector<int32_t> ids;
    for (int64_t r = 0; r < repeat; ++r) {
      if (cold) tok.clear_encode_cache();
      Timer timer;
      ids = parallel ? tok.encode_parallel(corpus, false) : tok.encode(corpus, false);
      seconds.push_back(timer.seconds());
    }
    double s = median(seconds);
    std::printf("%-8d %-5s %10.2f %14.0f\n", shown_threads, label, mb / s, static_cast<double>(ids.size()) / s);
    if (reference.empty()) reference = ids;
    DL_CHECK(ids == reference, "encoding on %d threads gave different ids than on one thread", shown_threads);
    return mb / s;
  };
  double one = measure(false, true, "cold", 1);
  measure(false, false, "warm", 1);
  if (threads > 1) {
    double all = measure(true, true, "cold", threads);
    measure(true, false, "warm", threads);
    std::printf("\nspeedup on %d threads (cold): %.2fx\n", threads, all / one);
  }
  std::printf("tokens: %zu (%.2f bytes/token); ids identical on 1 and %d threads\n", reference.size(),
              static_cast<double>(corpus.size()) / static_cast<double>(reference.size()), threads);
  return 0;
}

DISTLLM_REGISTER_COMMAND("bench tokenizer", "encode throughput (MB/s) on one and on all threads", run_bench_tokenizer);

}  // namespace
}  // namespace distllm
