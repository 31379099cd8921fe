// Fuzzes the server front's HTTP/1.1 framing (serve/api/http_framing.h) as a client
// would send it: the head is parsed and judged, a chunked body is decoded in two
// pieces split where the input says, and the canonical request handed to
// cpp-httplib must itself parse as one plain request with exactly the body's length.
// The body limit must hold however the chunks fall.
#include <cstddef>
#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>

#include "distllm/serve/api/http_framing.h"

using namespace distllm::serve::api;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const size_t split_at = data[0];  // where the body is cut in two
  const std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  constexpr size_t kMaxHead = 4096, kMaxBody = 1024;

  RequestHead head;
  size_t head_len = 0;
  FramingError err;
  const HeadStatus hs = parse_request_head(in, kMaxHead, head, head_len, err);
  if (hs == HeadStatus::kError) {
    if (err.status < 400 || err.status > 599) __builtin_trap();
    return 0;
  }
  if (hs == HeadStatus::kIncomplete) return 0;
  if (head_len > in.size()) __builtin_trap();

  std::string body;
  std::string_view rest = in.substr(head_len);
  if (head.chunked) {
    // Fed as a server reads: the first piece, then what it left over plus the rest.
    ChunkedDecoder dec;
    ChunkedDecoder::Status st = ChunkedDecoder::Status::kNeedMore;
    const size_t cut = std::min(split_at, rest.size());
    std::string pending;
    for (std::string_view piece : {rest.substr(0, cut), rest.substr(cut)}) {
      pending.append(piece);
      size_t used = 0;
      if (st == ChunkedDecoder::Status::kNeedMore) st = dec.feed(pending, used, body, kMaxBody, err);
      if (used > pending.size() || body.size() > kMaxBody) __builtin_trap();
      pending.erase(0, used);
    }
    if (st == ChunkedDecoder::Status::kError) {
      if (err.status < 400 || err.status > 599) __builtin_trap();
      return 0;
    }
    if (st != ChunkedDecoder::Status::kDone) return 0;
  } else {
    if (head.content_length > kMaxBody || head.content_length > rest.size()) return 0;
    body.assign(rest.substr(0, head.content_length));
  }

  // What httplib receives parses back as one plain request carrying that body.
  const std::string canon = canonical_request(head, body);
  RequestHead again;
  size_t again_len = 0;
  FramingError again_err;
  if (parse_request_head(canon, canon.size() + 1, again, again_len, again_err) != HeadStatus::kComplete)
    __builtin_trap();
  if (again.chunked || again.content_length != body.size() || again_len + body.size() != canon.size() ||
      again.method != head.method || again.target != head.target)
    __builtin_trap();
  return 0;
}
