#include "distllm/http/request_reader.h"

#include <algorithm>

namespace distllm::http {

RequestReader::Event RequestReader::fail(FramingError err) {
  error_ = std::move(err);
  state_ = State::kFailed;
  return Event::kError;
}

RequestReader::Event RequestReader::next() {
  switch (state_) {
    case State::kFailed: return Event::kError;
    case State::kReady: return Event::kRequest;
    case State::kHead: {
      if (in_.empty()) return Event::kNeedMore;
      FramingError err;
      size_t head_len = 0;
      HeadStatus st = parse_request_head(in_, limits_.max_head_bytes, head_, head_len, err);
      if (st == HeadStatus::kIncomplete) return Event::kNeedMore;
      if (st == HeadStatus::kError) return fail(std::move(err));
      in_.erase(0, head_len);
      if (screen_ && *screen_) {
        if (std::optional<FramingError> no = (*screen_)(head_)) return fail(std::move(*no));
      }
      if (!head_.chunked && head_.content_length > limits_.max_body_bytes) {
        return fail(FramingError{413,
                                 "The request body is larger than the limit of " +
                                     std::to_string(limits_.max_body_bytes) + " bytes.",
                                 "request_too_large"});
      }
      body_.clear();
      chunks_ = ChunkedDecoder();
      state_ = State::kBody;
      return Event::kHeadDone;
    }
    case State::kBody: {
      if (head_.chunked) {
        FramingError err;
        size_t used = 0;
        ChunkedDecoder::Status st = chunks_.feed(in_, used, body_, limits_.max_body_bytes, err);
        in_.erase(0, used);
        if (st == ChunkedDecoder::Status::kError) return fail(std::move(err));
        if (st == ChunkedDecoder::Status::kNeedMore) return Event::kNeedMore;
      } else {
        size_t take = std::min(static_cast<size_t>(head_.content_length - body_.size()), in_.size());
        body_.append(in_, 0, take);
        in_.erase(0, take);
        if (body_.size() < head_.content_length) return Event::kNeedMore;
      }
      state_ = State::kReady;
      return Event::kRequest;
    }
  }
  return Event::kError;
}

std::string RequestReader::take_request() {
  std::string request = canonical_request(head_, body_);
  std::string().swap(body_);
  state_ = State::kHead;
  return request;
}

bool RequestReader::wants_continue() const {
  return state_ == State::kBody && head_.expect_continue && (head_.chunked || head_.content_length > 0) && in_.empty();
}

void RequestReader::discard() {
  std::string().swap(in_);
  std::string().swap(body_);
}

}  // namespace distllm::http
