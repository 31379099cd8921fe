// Added tokens (tokenizer.json's "added_tokens"): strings such as <|im_start|> that are
// cut out of the text before anything else sees it, as Hugging Face's AddedVocabulary
// does. Matching is leftmost-longest over all tokens at once (a byte trie), and each
// match then obeys its token's flags:
//   single_word  only where no word character (\w) touches it on either side;
//   lstrip       the match also takes the white space on its left ...
//   rstrip       ... and on its right;
//   special      left as text when special tokens are not allowed (the match is
//                skipped, as Hugging Face's split_special_tokens does);
//   normalized   matched in the normalized text (second pass), else in the raw text.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace distllm {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = true;
};

class AddedTokenMatcher {
 public:
  AddedTokenMatcher();
  struct Match {
    size_t begin, end;  // the span the token takes from the text, white space included
    const AddedToken* token;
  };
  // Each token is matched where `pattern` occurs (its content, or its normalized form).
  void build(const std::vector<std::pair<std::string, const AddedToken*>>& patterns);
  bool empty() const { return nodes_.size() <= 1; }
  // Every match in `text`, in order and not overlapping.
  void find_all(std::string_view text, bool allow_special, std::vector<Match>& out) const;

 private:
  // The longest pattern that starts at text[i], or false.
  bool longest_at(std::string_view text, size_t i, size_t* end, const AddedToken** token) const;
  struct Node {
    const AddedToken* token = nullptr;            // a pattern ends here
    std::vector<std::pair<uint8_t, int32_t>> next;  // sorted by byte
  };
  std::vector<Node> nodes_{1};  // nodes_[0] is the root
  int32_t root_next_[256];      // the root's children by byte, -1 for none
};

}  // namespace distllm
