// Fuzzes the HTTP edge that `distllm serve` and `distllm route` share
// (http/request_reader.h over http/framing.h) with a connection's bytes as a client
// would send them, pipelined requests included. The first byte picks how the bytes
// arrive (pieces of 1 to 128 bytes) and whether an API key guards /v1/, /admin/ and
// /internal/ (high bit). Checked: reading the bytes in pieces gives exactly the
// requests and the refusal that reading them at once gives; every refusal is a
// 4xx/5xx; the body limit holds however the chunks fall; and every canonical
// request handed to cpp-httplib parses back as one plain request with the same
// method, target and body length.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "distllm/http/api_key.h"
#include "distllm/http/request_reader.h"

using namespace distllm::http;

namespace {

constexpr size_t kMaxHead = 4096, kMaxBody = 1024;

struct Outcome {
  std::vector<std::string> requests;
  int refusal = 0;  // status of the refusal that ended the connection, or 0
};

void check_request(const RequestHead& head, const std::string& canon) {
  RequestHead again;
  size_t again_len = 0;
  FramingError err;
  if (parse_request_head(canon, canon.size() + 1, again, again_len, err) != HeadStatus::kComplete) __builtin_trap();
  if (again.chunked || again.content_length > kMaxBody || again_len + again.content_length != canon.size() ||
      again.method != head.method || again.target != head.target)
    __builtin_trap();
}

Outcome read_all(std::string_view wire, size_t piece, const RequestReader::Screen* screen) {
  Outcome out;
  RequestReader reader(ReaderLimits{kMaxHead, kMaxBody}, screen);
  for (size_t at = 0; at < wire.size() && out.refusal == 0; at += piece) {
    reader.append(wire.substr(at, piece));
    for (bool more = true; more;) {
      switch (reader.next()) {
        case RequestReader::Event::kNeedMore: more = false; break;
        case RequestReader::Event::kHeadDone: break;
        case RequestReader::Event::kRequest:
          out.requests.push_back(reader.take_request());
          check_request(reader.head(), out.requests.back());
          break;
        case RequestReader::Event::kError:
          out.refusal = reader.error().status;
          if (out.refusal < 400 || out.refusal > 599) __builtin_trap();
          more = false;
          break;
      }
    }
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const size_t piece = 1 + (data[0] & 0x7f);
  const std::string_view wire(reinterpret_cast<const char*>(data) + 1, size - 1);
  const ApiKeyCheck key(data[0] & 0x80 ? "k" : "");
  const RequestReader::Screen screen = [&key](const RequestHead& head) -> std::optional<FramingError> {
    if (key.allows(head.path(), head.header("Authorization"))) return std::nullopt;
    return FramingError{401, kBadKeyMessage, "invalid_api_key"};
  };
  const Outcome whole = read_all(wire, wire.size() + 1, &screen);
  const Outcome pieces = read_all(wire, piece, &screen);
  if (whole.requests != pieces.requests || whole.refusal != pieces.refusal) __builtin_trap();
  return 0;
}
