#include "serve/test_codec.h"

namespace distllm::serve::testing {
namespace {

const std::string kEosText = "<|endoftext|>";
const std::string kReplacement = "\xEF\xBF\xBD";

// Length of the UTF-8 sequence starting with `lead`, or 0 if it cannot start one.
size_t sequence_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

bool valid_continuation(unsigned char lead, size_t index, unsigned char c) {
  if ((c & 0xC0) != 0x80) return false;
  if (index != 1) return true;
  if (lead == 0xE0) return c >= 0xA0;  // overlong
  if (lead == 0xED) return c <= 0x9F;  // surrogates
  if (lead == 0xF0) return c >= 0x90;  // overlong
  if (lead == 0xF4) return c <= 0x8F;  // > U+10FFFF
  return true;
}

class ByteStreamDecoder : public TextStreamDecoder {
 public:
  std::string push(int32_t token) override {
    if (token >= 256) return flush_all() + (token == ByteCodec::kEos ? kEosText : "");
    pending_.push_back(static_cast<char>(token));
    return drain(false);
  }
  std::string finish() override { return flush_all(); }

 private:
  std::string flush_all() { return drain(true); }
  // Emits every complete character; invalid bytes become U+FFFD. With `final`, an
  // unfinished character at the end becomes one U+FFFD.
  std::string drain(bool final) {
    std::string out;
    size_t i = 0;
    while (i < pending_.size()) {
      unsigned char lead = static_cast<unsigned char>(pending_[i]);
      size_t len = sequence_length(lead);
      if (len == 0) {
        out += kReplacement;
        ++i;
        continue;
      }
      size_t j = 1;
      while (j < len && i + j < pending_.size() && valid_continuation(lead, j, static_cast<unsigned char>(pending_[i + j]))) ++j;
      if (j == len) {
        out.append(pending_, i, len);
        i += len;
      } else if (i + j == pending_.size() && !final) {
        break;  // unfinished: wait for more bytes
      } else {
        out += kReplacement;
        i += j;
      }
    }
    pending_.erase(0, i);
    return out;
  }
  std::string pending_;
};

}  // namespace

std::vector<int32_t> ByteCodec::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < text.size()) {
    if (text.compare(i, kEosText.size(), kEosText) == 0) {
      ids.push_back(kEos);
      i += kEosText.size();
    } else {
      ids.push_back(static_cast<unsigned char>(text[i++]));
    }
  }
  return ids;
}

std::vector<int32_t> ByteCodec::encode_prompt(std::string_view text) const {
  std::vector<int32_t> ids = encode(text);
  if (bos_ >= 0) ids.insert(ids.begin(), bos_);
  return ids;
}

std::string ByteCodec::token_bytes(int32_t id) const {
  if (id == kEos) return kEosText;
  if (id < 0 || id > 255) return "";
  return std::string(1, static_cast<char>(id));
}

std::unique_ptr<TextStreamDecoder> ByteCodec::stream_decoder() const { return std::make_unique<ByteStreamDecoder>(); }

std::string decode_all(const TextCodec& codec, const std::vector<int32_t>& ids) {
  auto d = codec.stream_decoder();
  std::string out;
  for (int32_t id : ids) out += d->push(id);
  return out + d->finish();
}

}  // namespace distllm::serve::testing
