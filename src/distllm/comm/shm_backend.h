// Internal: collectives among ranks of one host through one shared segment.
//
// Synchronisation is a per-rank epoch counter: a rank publishes "I reached epoch e"
// and waits until every rank has. Data written to parity slot e%2 before epoch e is
// read by the others after it, and is not overwritten before epoch e+2, which no
// rank can reach before everybody has finished reading (each rank passes e+1 only
// after its reads). So every pipeline step costs exactly one barrier, and tiny
// messages ride inside the same cache line as the epoch.
//
// Segment: header | per-rank control (two epoch lines with 56-byte inline payloads,
// one arrival-board line) | per-rank staging S[r][2] | shared result R[2].
#pragma once

#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "distllm/comm/backend.h"
#include "distllm/comm/shm_segment.h"

namespace distllm::comm {

class ShmBackend : public Backend {
 public:
  // Collective over `comm`, whose ranks must all be on this host. Does not own comm
  // (used for bootstrap and point-to-point only).
  ShmBackend(MPI_Comm comm, size_t chunk_bytes);
  ~ShmBackend() override;
  const char* name() const override { return "shm"; }
  void run(const Op& op, const OpContext& ctx) override;

  const std::string& segment_name() const { return segment_->name(); }
  size_t chunk_bytes() const { return chunk_; }

  struct Ctl;  // per-rank control block (shm_backend.cpp)

 private:
  MPI_Comm comm_;
  int rank_, n_;
  size_t chunk_;            // bytes per staging slot
  size_t piece_;            // chunk_ / n rounded down to a cache line
  size_t stream_threshold_; // outputs at least this large use non-temporal stores
  int algo_ = 0;            // all-reduce schedule: 0 auto, 1 one-shot, 2 two-phase
  std::unique_ptr<ShmSegment> segment_;
  Ctl* ctl_ = nullptr;
  uint8_t* data_ = nullptr;
  uint64_t epoch_ = 0;
  std::vector<const void*> srcs_;

  Ctl& ctl(int r) const;
  uint8_t* staging(int r, uint64_t e) const;
  uint8_t* result(uint64_t e) const;
  uint8_t* inline_payload(int r, uint64_t e) const;
  // Copies piece k (pe elements of es bytes) of every block bound for another rank
  // into this rank's staging slot for that rank in epoch e; block d starts at
  // element displs[d] and holds counts[d] elements.
  void stage_pieces(uint64_t e, const uint8_t* in, const size_t* counts, const size_t* displs, size_t k, size_t pe,
                    size_t es) const;
  void arrive(uint64_t e);
  void wait_all(uint64_t e, const OpContext& ctx);
  void barrier(uint64_t e, const OpContext& ctx) {
    arrive(e);
    wait_all(e, ctx);
  }
  [[noreturn]] void timeout(uint64_t e, const OpContext& ctx);

  void allreduce(const Op& op, const OpContext& ctx);
  void allreduce_one_shot(const Op& op, const OpContext& ctx);
  void allreduce_two_phase(const Op& op, const OpContext& ctx);
  void reduce(const Op& op, const OpContext& ctx);
  void broadcast(const Op& op, const OpContext& ctx);
  void allgather(const Op& op, const OpContext& ctx, bool only_root);
  void scatter(const Op& op, const OpContext& ctx);
  void reduce_scatter(const Op& op, const OpContext& ctx);
  void alltoall(const Op& op, const OpContext& ctx);
  uint64_t allreduce_max(uint64_t value, const OpContext& ctx);
};

}  // namespace distllm::comm
