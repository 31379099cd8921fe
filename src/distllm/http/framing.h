// HTTP/1.1 request framing, checked before cpp-httplib sees a request.
//
// cpp-httplib 0.11 (Debian's) reads chunked bodies without a size limit, accepts
// Content-Length together with Transfer-Encoding and conflicting Content-Length
// values, and refuses form-encoded bodies over 8 KB with a 413. So the HTTP front
// (front.h, shared by `distllm serve` and `distllm route`) reads every request
// itself: the head is parsed and judged here (RFC 9112 §6.3), the body is read
// under the size limit (chunked bodies decoded as they arrive, request_reader.h),
// and httplib then gets one canonical request: the same head without
// Transfer-Encoding/Expect, with one Content-Length, and the body.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace distllm::http {

// A request the front refuses itself, with the status to answer. After it the
// connection is closed (its framing can no longer be trusted).
struct FramingError {
  int status = 400;
  std::string message;
  std::string code = "invalid_request_framing";
};

struct RequestHead {
  std::string method, target, version;                       // version: "HTTP/1.1" or "HTTP/1.0"
  std::vector<std::pair<std::string, std::string>> headers;  // in order, values trimmed
  bool chunked = false;
  uint64_t content_length = 0;
  bool expect_continue = false;
  bool keep_alive = true;

  // The first value of a header (case-insensitive name), or "".
  std::string header(std::string_view name) const;
  std::string path() const { return target.substr(0, target.find('?')); }
};

enum class HeadStatus { kIncomplete, kComplete, kError };

// Parses the head at the front of `buf` (leading empty lines skipped). On
// kComplete `head_len` is the number of bytes it took. A head longer than
// `max_head_bytes` is an error (431) as soon as that is known.
HeadStatus parse_request_head(std::string_view buf, size_t max_head_bytes, RequestHead& head, size_t& head_len,
                              FramingError& err);

// Decodes a chunked body incrementally, never holding more than `max_body` bytes:
// a chunk that would pass the limit is refused (413) before its data is read.
class ChunkedDecoder {
 public:
  enum class Status { kNeedMore, kDone, kError };
  // Consumes what it can of `in` (`consumed` bytes), appending data to `body`.
  Status feed(std::string_view in, size_t& consumed, std::string& body, size_t max_body, FramingError& err);

 private:
  enum class State { kSize, kData, kDataEnd, kTrailer };
  State state_ = State::kSize;
  uint64_t remaining_ = 0;
  size_t trailer_bytes_ = 0;
};

// The request httplib gets: `head` re-serialized without Transfer-Encoding,
// Content-Length and Expect, plus one Content-Length, then `body`. A form-encoded
// Content-Type (curl -d's default) becomes application/json: the API only takes
// JSON, and clients that forget -H get their JSON read instead of a false 413.
std::string canonical_request(const RequestHead& head, std::string_view body);

// A complete response with a JSON body that closes the connection.
std::string closing_response(int status, std::string_view json_body, std::string_view extra_headers = "");

const char* status_reason(int status);

}  // namespace distllm::http
