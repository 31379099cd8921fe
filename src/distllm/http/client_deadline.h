// Deadlines for one request of a cpp-httplib client, which only has per-read
// timeouts: the response head must arrive within `head_s` of the start, and the
// whole exchange end within `whole_s`; past either, a watchdog thread stops the
// client (httplib's stop() shuts its socket, so the blocked read returns at once).
//
// Why: a server that accepts the connection but never answers (a SIGSTOPped or
// hung process: the kernel still completes the handshake) would otherwise hold the
// caller for the whole read timeout, and a trickling one for far longer.
//
//   ClientDeadline deadline(cli, 2, 60);
//   req.response_handler = [&](const httplib::Response&) { deadline.got_head(); ... };
//   auto result = cli.send(req);
//   if (deadline.finish() != ClientDeadline::Missed::kNone) ...   // the reason it failed
#pragma once

#include <condition_variable>
#include <mutex>
#include <thread>

#include <httplib.h>

namespace distllm::http {

class ClientDeadline {
 public:
  enum class Missed { kNone, kHead, kWhole };

  ClientDeadline(httplib::Client& client, double head_s, double whole_s);
  ~ClientDeadline();  // finish()es
  ClientDeadline(const ClientDeadline&) = delete;
  ClientDeadline& operator=(const ClientDeadline&) = delete;

  // From the response handler: the head arrived.
  void got_head();
  // After the request returned: stops the watchdog; says which deadline (if any)
  // ended the request.
  Missed finish();

 private:
  void watch(double head_s, double whole_s);

  httplib::Client& client_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool head_ = false, done_ = false;
  Missed missed_ = Missed::kNone;
  std::thread watchdog_;
};

}  // namespace distllm::http
