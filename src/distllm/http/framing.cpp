#include "distllm/http/framing.h"

#include <algorithm>
#include <cctype>

namespace distllm::http {
namespace {

constexpr size_t kMaxChunkLine = 1024;       // "size;extensions\r\n"
constexpr size_t kMaxTrailerBytes = 8192;

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) { return std::tolower(x) == std::tolower(y); });
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// RFC 9110 token characters (method and header names).
bool is_token(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (std::isalnum(static_cast<unsigned char>(c))) continue;
    if (std::string_view("!#$%&'*+-.^_`|~").find(c) == std::string_view::npos) return false;
  }
  return true;
}

// Splits a comma-separated header value into trimmed, non-empty items.
std::vector<std::string_view> list_items(std::string_view v) {
  std::vector<std::string_view> out;
  while (!v.empty()) {
    size_t comma = v.find(',');
    std::string_view item = trim(v.substr(0, comma));
    if (!item.empty()) out.push_back(item);
    if (comma == std::string_view::npos) break;
    v.remove_prefix(comma + 1);
  }
  return out;
}

bool parse_decimal(std::string_view s, uint64_t& out) {
  if (s.empty() || s.size() > 18) return false;
  out = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    out = out * 10 + static_cast<uint64_t>(c - '0');
  }
  return true;
}

HeadStatus fail(FramingError& err, int status, std::string message) {
  err.status = status;
  err.message = std::move(message);
  err.code = status == 431 ? "request_header_fields_too_large" : "invalid_request_framing";
  return HeadStatus::kError;
}

// Settles the body framing from the headers (RFC 9112 §6.3).
HeadStatus judge_framing(RequestHead& h, FramingError& err) {
  bool has_length = false, has_te = false;
  std::string te;
  for (const auto& [name, value] : h.headers) {
    if (iequals(name, "Content-Length")) {
      for (std::string_view item : list_items(value)) {
        uint64_t n = 0;
        if (!parse_decimal(item, n)) return fail(err, 400, "Content-Length '" + std::string(value) + "' is not a number");
        if (has_length && n != h.content_length)
          return fail(err, 400, "conflicting Content-Length values: the body's length is ambiguous");
        has_length = true;
        h.content_length = n;
      }
      if (list_items(value).empty()) return fail(err, 400, "empty Content-Length");
    } else if (iequals(name, "Transfer-Encoding")) {
      has_te = true;
      if (!te.empty()) te += ",";
      te += value;
    } else if (iequals(name, "Expect")) {
      h.expect_continue = iequals(trim(value), "100-continue");
    }
  }
  if (has_te) {
    if (has_length)
      return fail(err, 400, "both Content-Length and Transfer-Encoding: the body's length is ambiguous");
    if (h.version == "HTTP/1.0") return fail(err, 400, "Transfer-Encoding is not allowed in HTTP/1.0");
    std::vector<std::string_view> codings = list_items(te);
    if (codings.empty() || !iequals(codings.back(), "chunked"))
      return fail(err, 400, "Transfer-Encoding must end with chunked");
    if (codings.size() > 1) return fail(err, 501, "only the chunked transfer coding is supported");
    h.chunked = true;
  }
  return HeadStatus::kComplete;
}

}  // namespace

std::string RequestHead::header(std::string_view name) const {
  for (const auto& [n, v] : headers)
    if (iequals(n, name)) return v;
  return "";
}

HeadStatus parse_request_head(std::string_view buf, size_t max_head_bytes, RequestHead& head, size_t& head_len,
                              FramingError& err) {
  size_t start = 0;
  while (start < buf.size() && (buf[start] == '\r' || buf[start] == '\n')) ++start;  // RFC 9112 §2.2
  // The head ends at the first empty line (CRLF CRLF, or bare LFs).
  size_t end = std::string_view::npos, body = 0;
  for (size_t i = buf.find('\n', start); i != std::string_view::npos; i = buf.find('\n', i + 1)) {
    size_t next = i + 1;
    if (next < buf.size() && buf[next] == '\r') ++next;
    if (next < buf.size() && buf[next] == '\n') {
      end = i;
      body = next + 1;
      break;
    }
    if (i - start > max_head_bytes) break;
  }
  if (end == std::string_view::npos) {
    if (buf.size() - start > max_head_bytes)
      return fail(err, 431, "the request head is larger than " + std::to_string(max_head_bytes) + " bytes");
    return HeadStatus::kIncomplete;
  }
  if (body - start > max_head_bytes)
    return fail(err, 431, "the request head is larger than " + std::to_string(max_head_bytes) + " bytes");

  head = RequestHead{};
  std::string_view text = buf.substr(start, end - start);
  bool first = true;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find('\r') != std::string_view::npos || line.find('\0') != std::string_view::npos)
      return fail(err, 400, "a bare CR or NUL in the request head");
    if (first) {
      first = false;
      size_t sp1 = line.find(' '), sp2 = line.rfind(' ');
      if (sp1 == std::string_view::npos || sp1 == sp2) return fail(err, 400, "malformed request line");
      head.method = line.substr(0, sp1);
      head.target = line.substr(sp1 + 1, sp2 - sp1 - 1);
      head.version = line.substr(sp2 + 1);
      if (!is_token(head.method) || head.target.empty() || head.target.find(' ') != std::string::npos)
        return fail(err, 400, "malformed request line");
      if (head.version != "HTTP/1.1" && head.version != "HTTP/1.0")
        return fail(err, 505, "only HTTP/1.0 and HTTP/1.1 are supported");
      continue;
    }
    if (line.front() == ' ' || line.front() == '\t') return fail(err, 400, "folded header lines are not allowed");
    size_t colon = line.find(':');
    if (colon == std::string_view::npos || !is_token(line.substr(0, colon)))
      return fail(err, 400, "malformed header line");  // also catches whitespace before the colon
    head.headers.emplace_back(std::string(line.substr(0, colon)), std::string(trim(line.substr(colon + 1))));
  }
  if (head.method.empty()) return fail(err, 400, "missing request line");
  std::string connection = lower(head.header("Connection"));
  bool says_close = connection.find("close") != std::string::npos;
  bool says_keep = connection.find("keep-alive") != std::string::npos;
  head.keep_alive = head.version == "HTTP/1.1" ? !says_close : says_keep;
  if (judge_framing(head, err) == HeadStatus::kError) return HeadStatus::kError;
  head_len = body;
  return HeadStatus::kComplete;
}

ChunkedDecoder::Status ChunkedDecoder::feed(std::string_view in, size_t& consumed, std::string& body, size_t max_body,
                                            FramingError& err) {
  consumed = 0;
  auto error = [&](int status, std::string message) {
    err.status = status;
    err.message = std::move(message);
    err.code = status == 413 ? "request_too_large" : "invalid_request_framing";
    return Status::kError;
  };
  while (true) {
    std::string_view rest = in.substr(consumed);
    switch (state_) {
      case State::kSize: {
        size_t nl = rest.find('\n');
        if (nl == std::string_view::npos) {
          if (rest.size() > kMaxChunkLine) return error(400, "a chunk-size line is too long");
          return Status::kNeedMore;
        }
        std::string_view line = rest.substr(0, nl);
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        line = trim(line.substr(0, line.find(';')));  // chunk extensions are ignored
        if (line.empty() || line.size() > 15) return error(400, "invalid chunk size");
        uint64_t size = 0;
        for (char c : line) {
          int d = std::isdigit(static_cast<unsigned char>(c)) ? c - '0'
                  : (c >= 'a' && c <= 'f')                    ? c - 'a' + 10
                  : (c >= 'A' && c <= 'F')                    ? c - 'A' + 10
                                                              : -1;
          if (d < 0) return error(400, "invalid chunk size");
          size = size * 16 + static_cast<uint64_t>(d);
        }
        consumed += nl + 1;
        if (size == 0) {
          state_ = State::kTrailer;
        } else {
          if (size > max_body - std::min(max_body, body.size()))
            return error(413, "the request body is larger than the limit of " + std::to_string(max_body) + " bytes");
          remaining_ = size;
          state_ = State::kData;
        }
        break;
      }
      case State::kData: {
        size_t take = static_cast<size_t>(std::min<uint64_t>(remaining_, rest.size()));
        body.append(rest.data(), take);
        consumed += take;
        remaining_ -= take;
        if (remaining_ > 0) return Status::kNeedMore;
        state_ = State::kDataEnd;
        break;
      }
      case State::kDataEnd: {
        if (rest.empty() || (rest[0] == '\r' && rest.size() < 2)) return Status::kNeedMore;
        size_t n = rest[0] == '\n' ? 1 : (rest[0] == '\r' && rest[1] == '\n') ? 2 : 0;
        if (n == 0) return error(400, "a chunk is longer than its size says");
        consumed += n;
        state_ = State::kSize;
        break;
      }
      case State::kTrailer: {
        size_t nl = rest.find('\n');
        if (nl == std::string_view::npos) {
          if (trailer_bytes_ + rest.size() > kMaxTrailerBytes) return error(431, "the chunked trailer is too long");
          return Status::kNeedMore;
        }
        trailer_bytes_ += nl + 1;
        if (trailer_bytes_ > kMaxTrailerBytes) return error(431, "the chunked trailer is too long");
        std::string_view line = rest.substr(0, nl);
        consumed += nl + 1;
        if (line.empty() || line == "\r") return Status::kDone;  // trailer fields are ignored
        break;
      }
    }
  }
}

std::string canonical_request(const RequestHead& head, std::string_view body) {
  std::string out = head.method + " " + head.target + " " + head.version + "\r\n";
  for (const auto& [name, value] : head.headers) {
    if (iequals(name, "Content-Length") || iequals(name, "Transfer-Encoding") || iequals(name, "Expect")) continue;
    if (iequals(name, "Content-Type") && lower(value).rfind("application/x-www-form-urlencoded", 0) == 0) {
      out += "Content-Type: application/json\r\n";
      continue;
    }
    out += name + ": " + value + "\r\n";
  }
  bool may_have_body = head.method == "POST" || head.method == "PUT" || head.method == "PATCH";
  if (!body.empty() || may_have_body) out += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  out += "\r\n";
  out.append(body);
  return out;
}

const char* status_reason(int status) {
  switch (status) {
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 408: return "Request Timeout";
    case 413: return "Payload Too Large";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
  }
  return "Error";
}

std::string closing_response(int status, std::string_view json_body, std::string_view extra_headers) {
  std::string out = "HTTP/1.1 " + std::to_string(status) + " " + status_reason(status) + "\r\n";
  out += "Content-Type: application/json\r\nConnection: close\r\n";
  out += "Content-Length: " + std::to_string(json_body.size()) + "\r\n";
  out.append(extra_headers);
  out += "\r\n";
  out.append(json_body);
  return out;
}

}  // namespace distllm::http
