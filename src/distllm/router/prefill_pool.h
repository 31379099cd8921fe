// Prefill replicas for prefill/decode disaggregation (`distllm route --prefill URL`).
//
// The router never sends a request to a prefill replica itself: it sends each
// completion or chat request to a decode replica (the ordinary replica set and
// policy) with the header `X-KV-Prefill-From: <prefill URL>`, and the decode
// replica pulls the prompt's KV blocks from there (docs/serving.md). The prefill
// replica named is the ready one with the fewest requests this router has in
// flight through it; prefill replicas are health-checked like the others. With no
// prefill replica ready the header is left out and the decode replica computes the
// prompt itself.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "distllm/router/replica_set.h"

namespace distllm::router {

inline constexpr const char* kPrefillFromHeader = "X-KV-Prefill-From";

class PrefillPool {
 public:
  PrefillPool(std::vector<std::string> urls, ReplicaOptions options);

  // One request's use of a prefill replica: counted outstanding while it lives.
  class Lease {
   public:
    Lease(ReplicaSet& set, int index) : set_(set), index_(index) { set_.on_start(index_); }
    ~Lease() { set_.on_release(index_); }
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    const std::string& url() const { return set_.url(index_); }

   private:
    ReplicaSet& set_;
    int index_;
  };

  // The least loaded ready prefill replica, or nullptr when none is ready.
  std::shared_ptr<Lease> acquire();

  void start() { set_.start(); }
  void stop() { set_.stop(); }
  ReplicaSet& replicas() { return set_; }

 private:
  ReplicaSet set_;
};

}  // namespace distllm::router
