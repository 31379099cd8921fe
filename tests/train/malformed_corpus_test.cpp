// The fuzz seeds under fuzz/corpus/ for the file parsers (safetensors header, token
// file header, config.json, model.safetensors.index.json) double as a regression
// corpus: every file there is listed below with the exact outcome it must have, so a
// malformed file that once found a bug (or that an issue names: a 2^63 header length,
// offsets past the end, wrong dtype sizes, non-UTF-8 JSON, duplicate names ...) keeps
// getting the same clear error. A seed added without an expectation fails the test.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "distllm/base/error.h"
#include "distllm/io/safetensors.h"
#include "distllm/model/config.h"
#include "distllm/model/hf_checkpoint.h"
#include "distllm/train/token_file.h"

namespace distllm {
namespace {

namespace fs = std::filesystem;

const std::string kCorpus = DISTLLM_SOURCE_DIR "/fuzz/corpus/";

std::vector<uint8_t> read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// "" = the file must parse; otherwise the error must contain this text.
using Expectations = std::map<std::string, std::string>;

// Runs `parse` on every seed of `target` and checks each against `expected`.
template <typename Parse>
void check_corpus(const std::string& target, const Expectations& expected, Parse parse) {
  std::map<std::string, bool> seen;
  for (const auto& entry : fs::directory_iterator(kCorpus + target)) {
    const std::string name = entry.path().filename().string();
    SCOPED_TRACE(target + "/" + name);
    auto it = expected.find(name);
    ASSERT_NE(it, expected.end()) << "seed has no expected outcome; add it to this test";
    seen[name] = true;
    const std::vector<uint8_t> bytes = read_bytes(entry.path());
    std::string error;
    try {
      parse(bytes);
    } catch (const Error& e) {
      error = e.what();
    }
    if (getenv("PRINT_ERRORS")) printf("%s/%s: %s\n", target.c_str(), name.c_str(), error.c_str());
    if (it->second.empty()) {
      EXPECT_EQ(error, "") << "expected to parse";
    } else {
      EXPECT_NE(error.find(it->second), std::string::npos) << "error was: '" << error << "'";
    }
  }
  for (const auto& [name, outcome] : expected) EXPECT_TRUE(seen.count(name)) << target << "/" << name << " is missing";
}

TEST(MalformedCorpus, Safetensors) {
  const Expectations expected = {
      {"ok_f32", ""},
      {"ok_mixed", ""},
      {"huge_len", "header length 9223372036854775808 exceeds the 100 MB limit"},
      {"too_short", "truncated file: 3 bytes, need at least 8 for the header length"},
      {"truncated_header", "truncated file: header length 100 but only 7 bytes follow"},
      {"offsets_past_end", "tensor 'a': data_offsets end 64 is past the end of the data (8 bytes)"},
      {"wrong_size", "tensor 'a': 8 bytes for dtype F32 and shape of 3 elements, expected 12"},
      {"bad_dtype", "tensor 'a': unsupported dtype 'F33'"},
      {"not_utf8", "header is not valid JSON: [json.exception.parse_error.101] parse error at line 1, column 3: syntax error while parsing object key - invalid string: ill-formed UTF-8 byte"},
      {"duplicate_name", "duplicate tensor name 'a' in header"},
      {"not_object", "header must start with '{'"},
      {"metadata_not_string", "__metadata__ value for 'format' must be a string"},
      {"overlap", "tensor 'b' overlaps the previous tensor (starts at 2, previous ends at 4)"},
      {"gap", "gap in the data section before tensor 'a' (bytes 0..4 unused)"},
  };
  check_corpus("fuzz_safetensors", expected, [](const std::vector<uint8_t>& bytes) {
    auto file = SafetensorsFile::parse(bytes, "seed.safetensors");
    for (const auto& t : file.tensors()) {
      std::vector<float> out(static_cast<size_t>(t.numel()));
      file.read_f32(t, out.data());
    }
  });
}

TEST(MalformedCorpus, TokenFile) {
  const Expectations expected = {
      {"u16", ""},
      {"u32", ""},
      {"truncated", "header says 10 tokens (20 bytes) but the file holds 6 bytes of tokens (truncated?)"},
      {"bad_magic", "not a distllm token file (bad magic; expected \"DLTK\")"},
      {"bad_version", "unsupported token file version 7 (expected 1)"},
      {"bad_token_bytes", "token width 3 bytes is invalid (must be 2 or 4)"},
      {"short_header", "truncated token file: 8 bytes, the header alone needs 32"},
      {"extra_bytes", "header says 3 tokens (6 bytes) but the file holds 8 bytes of tokens"},
  };
  check_corpus("fuzz_token_file", expected,
               [](const std::vector<uint8_t>& bytes) { parse_token_file_header(bytes, "seed.tok"); });
}

TEST(MalformedCorpus, HfConfig) {
  const Expectations expected = {
      {"gpt2.json", ""},
      {"llama.json", ""},
      {"bad_heads.json", "n_head (5) must divide n_embd (12) unless head_dim is given"},
      {"missing_vocab.json", "missing required key 'vocab_size'"},
      {"negative_layers.json", "'n_layer' must be positive, got -2"},
      {"bad_kv_heads.json", "n_kv_head (3) must divide n_head (4)"},
      {"wrong_type.json", "'n_embd' must be an integer"},
      {"unknown_family.json", "model_type 'mamba' is not supported (supported: gpt2, llama, qwen2, qwen3, phi3, mistral, gemma2"},
      {"huge_layers.json", "'n_layer' = 1000000000 is larger than the supported maximum 1024"},
      {"huge_positions.json", "for its parameters and position tables alone (max_position_embeddings = 2097152 "
                              "with head_dim = 4096), more than the 1.1 GB of memory"},
      {"overflow_width.json", "'hidden_size' = 18446744073709551615 is larger than the supported maximum 65536"},
  };
  // As the fuzz target: parse, then refuse what does not fit a 1 GiB budget.
  check_corpus("fuzz_hf_config", expected, [](const std::vector<uint8_t>& bytes) {
    nlohmann::json j = nlohmann::json::parse(bytes.begin(), bytes.end());
    ModelConfig::from_hf_json(j, "config.json").check_fits(int64_t(1) << 30, "config.json");
  });
}

TEST(MalformedCorpus, ShardIndex) {
  const Expectations expected = {
      {"ok.json", ""},
      {"escape.json", "weight_map entry 'a' names '../etc/passwd', which is not a file in the directory"},
      {"no_weight_map.json", "missing object 'weight_map'"},
      {"value_not_string.json", "weight_map entry 'a' must be a file name"},
      {"truncated.json", "not valid JSON: [json.exception.parse_error.101] parse error at line 1, column 32"},
  };
  check_corpus("fuzz_shard_index", expected, [](const std::vector<uint8_t>& bytes) {
    parse_shard_index(std::string(bytes.begin(), bytes.end()), "model.safetensors.index.json");
  });
}

}  // namespace
}  // namespace distllm
