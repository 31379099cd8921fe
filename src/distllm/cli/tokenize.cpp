// `distllm tokenize`: text -> token ids as a JSON array (Hugging Face's
// encode(text, add_special_tokens=False); --add-special-tokens: its default), or
// (--decode) ids -> text.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "distllm/base/error.h"
#include "distllm/cli/command.h"
#include "distllm/tokenizer/tokenizer.h"

namespace distllm {
namespace {

std::string read_input(const std::string& path) {
  if (path == "-") return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  std::ifstream in(path, std::ios::binary);
  DL_CHECK(in.good(), "cannot open %s", path.c_str());
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::vector<int32_t> parse_ids(const std::string& text, const std::string& where) {
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception&) {
    throw_error(where + ": expected a JSON array of token ids, e.g. [15496, 995]");
  }
  DL_CHECK(doc.is_array(), "%s: expected a JSON array of token ids, e.g. [15496, 995]", where.c_str());
  std::vector<int32_t> ids;
  ids.reserve(doc.size());
  for (size_t i = 0; i < doc.size(); ++i) {
    const auto& v = doc[i];
    DL_CHECK(v.is_number_integer() && v.get<int64_t>() >= INT32_MIN && v.get<int64_t>() <= INT32_MAX,
             "%s: element %zu is not a token id: %s", where.c_str(), i, v.dump().c_str());
    ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
  }
  return ids;
}

int run_tokenize(Args& args) {
  std::string path = args.get_string(
      "tokenizer", "gpt2", "tokenizer.json, a model directory, a directory with encoder.json + vocab.bpe, or gpt2");
  auto text = args.get_optional("text", "the text to encode (with --decode: a JSON array of ids)");
  auto file = args.get_optional("file", "read the input from this file instead ('-' = stdin)");
  bool decode = args.get_flag("decode", "turn a JSON array of ids back into text (written as raw bytes)");
  bool no_special = args.get_flag("no-special", "encode special tokens' text (e.g. <|endoftext|>) as plain text");
  bool add_special = args.get_flag("add-special-tokens",
                                   "add the special tokens the tokenizer puts around a text (e.g. BOS), as Hugging "
                                   "Face's encode() does by default");
  bool skip_special = args.get_flag("skip-special", "with --decode: leave special tokens out");
  auto save = args.get_optional("save", "write the tokenizer as a Hugging Face tokenizer.json to this path");
  if (args.help_or_finish()) return 0;
  Tokenizer tok = Tokenizer::load(path);
  if (save) {
    tok.save(*save);
    if (!text && !file) return 0;
  }
  DL_CHECK(text.has_value() != file.has_value(), "give exactly one of --text or --file");
  std::string input = text ? *text : read_input(*file);
  if (decode) {
    std::string out = tok.decode(parse_ids(input, text ? "--text" : *file), skip_special);
    std::fwrite(out.data(), 1, out.size(), stdout);
    return 0;
  }
  std::vector<int32_t> ids = tok.encode(input, !no_special);
  if (add_special) ids = tok.add_special_tokens(ids);
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(ids[i]);
  }
  out += "]\n";
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

DISTLLM_REGISTER_COMMAND("tokenize", "text -> token ids as JSON (--decode: ids -> text)", run_tokenize);

}  // namespace
}  // namespace distllm
