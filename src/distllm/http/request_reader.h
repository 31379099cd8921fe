// One connection's requests, read from its bytes as they arrive: the head judged
// by framing.h, the head screened (API key) before a byte of the body is read, the
// body read under the size limit (a chunked body decoded as it comes, never held
// past the limit), and the complete request handed out as the canonical request
// cpp-httplib processes. Bytes of a pipelined next request stay buffered for the
// next call.
//
// Why a class of its own: no sockets and no clocks here, so the front (front.h)
// keeps only descriptors, deadlines and workers, and the fuzzer
// (fuzz/fuzz_http_request.cpp) drives exactly the code both servers run, with any
// split of the bytes.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "distllm/http/framing.h"

namespace distllm::http {

struct ReaderLimits {
  size_t max_head_bytes = 16u << 10;
  size_t max_body_bytes = 2u << 20;
};

class RequestReader {
 public:
  // Looks at a head before its body is read: an error refuses the request (and the
  // connection) without reading the body.
  using Screen = std::function<std::optional<FramingError>(const RequestHead& head)>;

  enum class Event {
    kNeedMore,  // everything buffered is consumed; more bytes are needed
    kHeadDone,  // a head was accepted; its body (if any) is read next
    kRequest,   // a complete request is ready: take_request()
    kError,     // refused: error(); the connection must close
  };

  // `screen` (may be empty) must outlive the reader.
  RequestReader(ReaderLimits limits, const Screen* screen) : limits_(limits), screen_(screen) {}

  void append(std::string_view bytes) { in_.append(bytes); }
  // Advances as far as the buffered bytes allow.
  Event next();
  // After kRequest: the canonical request (framing.h); the reader then waits for
  // the next head.
  std::string take_request();

  // Bytes received and not yet consumed.
  bool has_input() const { return !in_.empty(); }
  // A head is accepted and its body is being read.
  bool reading_body() const { return state_ == State::kBody; }
  // The head of the request being read or handed out.
  const RequestHead& head() const { return head_; }
  // After kHeadDone: the client waits for "100 Continue" before sending its body.
  bool wants_continue() const;
  const FramingError& error() const { return error_; }
  // Drops everything buffered (a refused connection's input is never read again).
  void discard();

 private:
  enum class State { kHead, kBody, kReady, kFailed };
  Event fail(FramingError err);

  ReaderLimits limits_;
  const Screen* screen_;
  State state_ = State::kHead;
  std::string in_;  // received, not yet consumed
  RequestHead head_;
  ChunkedDecoder chunks_;
  std::string body_;
  FramingError error_;
};

}  // namespace distllm::http
