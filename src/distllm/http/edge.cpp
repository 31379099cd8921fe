#include "distllm/http/edge.h"

#include <sys/resource.h>

#include <algorithm>
#include <limits>

#include "distllm/base/log.h"
#include "distllm/base/strings.h"
#include "distllm/http/openai_error.h"

namespace distllm::http {

// cpp-httplib as a request processor only: the front owns the sockets and hands
// each complete request to process_request.
class HttpEdge::Processor : public httplib::Server {
 public:
  using httplib::Server::process_request;
  // httplib ends a streamed response once its listening socket is invalid (its
  // sign of stop()); the front owns the listener, so the value only says "serving"
  // (it is never used as a descriptor: httplib closes it only in stop(), never called).
  void set_serving(bool on) { svr_sock_ = on ? std::numeric_limits<int>::max() : INVALID_SOCKET; }
};

void send_openai_error(httplib::Response& res, int status, std::string_view message, std::string_view param,
                       std::string_view code) {
  res.status = status;
  res.set_content(openai_error_text(status, message, param, code), "application/json");
}

HttpEdge::HttpEdge(FrontLimits limits, std::string api_key)
    : limits_(limits), key_(std::move(api_key)), routes_(std::make_unique<Processor>()) {
  front_ = std::make_unique<HttpFront>(
      limits_,
      [this](httplib::Stream& strm, bool close, bool& closed) {
        return routes_->process_request(strm, close, closed, [](httplib::Request&) {});
      },
      [this](const RequestHead& head) -> std::optional<FramingError> {
        if (key_.allows(head.path(), head.header("Authorization"))) return std::nullopt;
        return FramingError{401, kBadKeyMessage, "invalid_api_key"};
      },
      [](const FramingError& err) { return openai_error_text(err.status, err.message, "", err.code); });
  routes_->set_payload_max_length(limits_.max_body_bytes);  // the front enforces it first
  routes_->set_serving(true);
  routes_->set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 413) {
      send_openai_error(res, 413,
                        strprintf("The request body is larger than the limit of %zu bytes.", limits_.max_body_bytes), "",
                        "request_too_large");
    } else if (res.status == 404) {
      send_openai_error(res, 404, "No route for " + req.method + " " + req.path, "", "not_found");
    } else {
      send_openai_error(res, res.status, strprintf("HTTP error %d", res.status));
    }
  });
  routes_->set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown exception";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    LOG_ERROR("http: unhandled exception: %s", what.c_str());
    send_openai_error(res, 500, "internal error: " + what);
  });
}

HttpEdge::~HttpEdge() = default;

httplib::Server& HttpEdge::routes() { return *routes_; }

int HttpEdge::bind(const std::string& host, int port) { return front_->bind(host, port); }

void HttpEdge::run() { front_->run(); }

void HttpEdge::stop() {
  routes_->set_serving(false);  // streams in progress end
  front_->stop();
}

void HttpEdge::set_draining() { front_->set_draining(); }

int HttpEdge::open_connections() const { return front_->open_connections(); }

int HttpEdge::busy_requests() const { return front_->busy_requests(); }

int fit_connections_to_fd_limit(int wanted, const char* flag) {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return wanted;
  rlim_t need = static_cast<rlim_t>(wanted) + 256;
  if (rl.rlim_cur < need) {
    rl.rlim_cur = std::min(need, rl.rlim_max);
    setrlimit(RLIMIT_NOFILE, &rl);
    getrlimit(RLIMIT_NOFILE, &rl);
  }
  int fit = static_cast<int>(std::min<rlim_t>(static_cast<rlim_t>(wanted), rl.rlim_cur > 256 ? rl.rlim_cur - 256 : 1));
  if (fit < wanted)
    LOG_WARN("%s lowered to %d to fit the open-file limit (%llu)", flag, fit, static_cast<unsigned long long>(rl.rlim_cur));
  return fit;
}

}  // namespace distllm::http
