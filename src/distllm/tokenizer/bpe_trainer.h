// Trains a byte-level BPE vocabulary (GPT-2 style) the way Hugging Face tokenizers'
// BpeTrainer does, and writes it as the tokenizer.json that library writes.
//
//   WordCounts words;
//   words.add_text(corpus);                        // pre-tokenize and count, all threads
//   TrainedBpe bpe = train_bpe(words, {.vocab_size = 8192});
//   std::string json = trained_bpe_json(bpe);      // loads in Tokenizer::from_json and HF
//
// Words are the pieces of GPT-2's pre-tokenizer (pretokenizer.h), taken line by line
// as Hugging Face's train_from_files feeds them (each line keeps its line break). The
// vocabulary starts with the special tokens (ids 0..), then the 256 byte-level
// characters in code point order (ByteLevel.alphabet()); each step then merges the
// most frequent adjacent pair of symbols over all words, ties going to the smallest
// (left id, right id) as in Hugging Face, until the vocabulary has vocab_size tokens
// or no pair occurs min_frequency times. A merge whose result already is a token adds
// a merge rule but no token, as Hugging Face does.
//
// Cost: one pass over the corpus to count words; then each merge touches only the
// words that contain its pair (pair -> count, pair -> words, a max-heap with lazy
// updates), never the whole corpus.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace distllm {

// How often each pre-tokenized word occurs in a corpus (words as raw bytes).
class WordCounts {
 public:
  // Adds every word of `text`, cut into lines and each line into GPT-2 pieces; the
  // work is split across the threads of parallel.h at line breaks.
  void add_text(std::string_view text);
  void add(std::string_view word, uint64_t count = 1);

  const std::unordered_map<std::string, uint64_t>& counts() const { return counts_; }
  size_t unique_words() const { return counts_.size(); }
  uint64_t total_words() const { return total_; }

 private:
  std::unordered_map<std::string, uint64_t> counts_;
  uint64_t total_ = 0;
};

struct BpeTrainerOptions {
  // Tokens in the result, special tokens and the 256 byte symbols included; at least
  // 256 + the number of distinct special tokens.
  int64_t vocab_size = 30000;
  // A pair that occurs fewer times is never merged (0 and 1 both mean "any pair").
  uint64_t min_frequency = 0;
  // Added tokens with ids 0.., in this order (duplicates are ignored; none may be empty).
  std::vector<std::string> special_tokens = {"<|endoftext|>"};
};

struct TrainedBpe {
  // Every token's string by id, in Hugging Face's byte-level form ("Ġthe"); special
  // tokens first, as their own text.
  std::vector<std::string> tokens;
  size_t num_special = 0;  // tokens[0, num_special) are the special tokens
  // Merge rules in rank order, as byte-level strings.
  std::vector<std::pair<std::string, std::string>> merges;
};

// Throws naming the option when vocab_size is too small for the byte symbols and the
// special tokens, or a special token is empty or not UTF-8. train_bpe checks too;
// this is for refusing options before reading a corpus.
void check_bpe_trainer_options(const BpeTrainerOptions& options);

TrainedBpe train_bpe(const WordCounts& words, const BpeTrainerOptions& options);

// The tokenizer.json Hugging Face tokenizers (0.20 and later) writes for this model:
// BPE model with vocab and merges (as pairs), ByteLevel pre-tokenizer (no prefix
// space), post-processor and decoder, and the special tokens as added tokens.
std::string trained_bpe_json(const TrainedBpe& bpe);

}  // namespace distllm
