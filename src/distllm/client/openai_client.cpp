#include "distllm/client/openai_client.h"

#include <httplib.h>

#include "distllm/base/error.h"

namespace distllm::client {
namespace {

httplib::Client make_client(const std::string& base_url, double timeout) {
  httplib::Client cli(base_url);
  cli.set_tcp_nodelay(true);
  auto secs = static_cast<time_t>(timeout);
  auto usecs = static_cast<time_t>((timeout - static_cast<double>(secs)) * 1e6);
  cli.set_connection_timeout(10, 0);
  cli.set_read_timeout(secs, usecs);
  cli.set_write_timeout(secs, usecs);
  return cli;
}

httplib::Headers headers_for(const std::string& api_key) {
  httplib::Headers h;
  if (!api_key.empty()) h.emplace("Authorization", "Bearer " + api_key);
  return h;
}

void fill(HttpResult& out, const httplib::Result& res) {
  if (!res) {
    out.transport_error = httplib::to_string(res.error());
    return;
  }
  out.status = res->status;
  out.body = res->body;
  out.retry_after = res->get_header_value("Retry-After");
}

}  // namespace

OpenAIClient::OpenAIClient(std::string base_url, std::string api_key, double timeout_seconds)
    : base_url_(std::move(base_url)), api_key_(std::move(api_key)), timeout_(timeout_seconds) {
  DL_CHECK(base_url_.rfind("http://", 0) == 0, "server URL must start with http:// (got '%s')", base_url_.c_str());
  while (!base_url_.empty() && base_url_.back() == '/') base_url_.pop_back();
}

HttpResult OpenAIClient::get(const std::string& path) const {
  httplib::Client cli = make_client(base_url_, timeout_);
  HttpResult out;
  fill(out, cli.Get(path, headers_for(api_key_)));
  return out;
}

HttpResult OpenAIClient::post(const std::string& path, const std::string& json_body) const {
  httplib::Client cli = make_client(base_url_, timeout_);
  HttpResult out;
  fill(out, cli.Post(path, headers_for(api_key_), json_body, "application/json"));
  return out;
}

HttpResult OpenAIClient::post_stream(const std::string& path, const std::string& json_body,
                                     const std::function<bool(const std::string&)>& on_event) const {
  httplib::Client cli = make_client(base_url_, timeout_);
  HttpResult out;
  SseParser parser;
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.headers = headers_for(api_key_);
  req.headers.emplace("Content-Type", "application/json");
  req.headers.emplace("Accept", "text/event-stream");
  req.body = json_body;
  int status = 0;
  req.response_handler = [&](const httplib::Response& r) {
    status = r.status;
    out.retry_after = r.get_header_value("Retry-After");
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (status != 200) {  // an error response: keep its body
      out.body.append(data, n);
      return true;
    }
    bool keep = parser.feed(data, n, [&](const std::string& payload) {
      if (payload == "[DONE]") {
        out.done = true;
        return true;
      }
      return on_event(payload);
    });
    if (!keep) out.cancelled = true;
    return keep;
  };
  httplib::Result res = cli.send(req);
  if (!res && !out.cancelled) {
    out.transport_error = httplib::to_string(res.error());
    out.status = status;
    return out;
  }
  out.status = res ? res->status : status;
  return out;
}

bool SseParser::feed(const char* data, size_t n, const std::function<bool(const std::string&)>& on_data) {
  buffer_.append(data, n);
  while (true) {
    // An event ends at a blank line ("\n\n", or "\r\n\r\n").
    size_t end = buffer_.find("\n\n");
    size_t crlf = buffer_.find("\r\n\r\n");
    size_t sep_len = 2;
    if (crlf != std::string::npos && (end == std::string::npos || crlf < end)) {
      end = crlf;
      sep_len = 4;
    }
    if (end == std::string::npos) return true;
    std::string event = buffer_.substr(0, end);
    buffer_.erase(0, end + sep_len);
    std::string payload;
    bool has_data = false;
    size_t pos = 0;
    while (pos <= event.size()) {
      size_t nl = event.find('\n', pos);
      std::string line = event.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.rfind("data:", 0) == 0) {
        std::string v = line.substr(5);
        if (!v.empty() && v[0] == ' ') v.erase(0, 1);
        payload += (has_data ? "\n" : "") + v;
        has_data = true;
      }
      if (nl == std::string::npos) break;
      pos = nl + 1;
    }
    if (has_data && !on_data(payload)) return false;
  }
}

}  // namespace distllm::client
