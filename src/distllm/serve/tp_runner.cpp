#include "distllm/serve/tp_runner.h"

#include "distllm/base/error.h"
#include "distllm/base/log.h"
#include "distllm/base/strings.h"
#include "distllm/comm/world.h"
#include "distllm/serve/tp_step.h"

namespace distllm::serve {

namespace {

// How long a worker waits for rank 0's next message: a server may idle for days.
// A dead rank 0 does not leave it waiting: the MPI launcher ends the job.
constexpr double kIdleTimeoutS = 365.0 * 24 * 3600;

}  // namespace

TpShard::TpShard(comm::ProcessGroupPtr group, const ModelConfig& full)
    : plan_(full, group->size(), group->rank()), comm_(std::move(group)) {}

TpLeaderRunner::TpLeaderRunner(std::shared_ptr<ModelRunner> local, comm::ProcessGroupPtr group)
    : local_(std::move(local)), group_(std::move(group)) {
  DL_CHECK(local_ != nullptr && group_ != nullptr && group_->rank() == 0,
           "the tensor-parallel leader runner runs on rank 0 with its own shard");
}

TpLeaderRunner::~TpLeaderRunner() {
  try {
    shutdown_workers();
  } catch (const std::exception& e) {
    LOG_ERROR("tp serve: could not stop the other ranks: %s", e.what());
  }
}

template <typename Fn>
void TpLeaderRunner::guarded(const char* what, Fn&& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    // A failed group never recovers, and the workers may be stuck in a collective:
    // end the whole job now rather than serve errors forever.
    if (group_->failed()) comm::abort(1, strprintf("tensor-parallel serving lost a rank during %s: %s", what, e.what()));
    throw;
  }
}

void TpLeaderRunner::allocate_kv(int num_blocks, int block_size) {
  guarded("allocate_kv", [&] {
    const int32_t payload[2] = {num_blocks, block_size};
    send_tp_message(*group_, TpMessageKind::kAllocateKv, payload);
    local_->allocate_kv(num_blocks, block_size);
  });
}

void TpLeaderRunner::execute(const std::vector<SequenceChunk>& batch, std::vector<float>& logits) {
  DL_CHECK(!stopped_, "model call after the tensor-parallel workers were stopped");
  guarded("a model step", [&] {
    send_tp_message(*group_, TpMessageKind::kStep, encode_tp_step(batch));
    local_->execute(batch, logits);
  });
}

void TpLeaderRunner::shutdown_workers() {
  if (stopped_ || group_->failed()) return;
  stopped_ = true;
  send_tp_message(*group_, TpMessageKind::kShutdown, {});
}

void run_tp_worker(ModelRunner& local, comm::ProcessGroup& group) {
  DL_CHECK(group.rank() != 0, "rank 0 leads tensor-parallel serving; it does not run the worker loop");
  std::vector<float> logits;
  for (;;) {
    TpMessage m = receive_tp_message(group, kIdleTimeoutS);
    switch (m.kind) {
      case TpMessageKind::kShutdown:
        return;
      case TpMessageKind::kAllocateKv:
        DL_CHECK(m.payload.size() == 2, "tensor-parallel allocate_kv message has %zu words", m.payload.size());
        local.allocate_kv(m.payload[0], m.payload[1]);
        break;
      case TpMessageKind::kStep: {
        std::vector<SequenceChunk> batch = decode_tp_step(m.payload);
        try {
          local.execute(batch, logits);
        } catch (const Error& e) {
          // A bad batch is refused by every rank's identical checks before the first
          // collective (rank 0 fails its requests); a communication failure is not.
          if (group.failed()) throw;
          LOG_WARN("tp serve: step refused on this rank as on rank 0: %s", e.what());
        }
        break;
      }
    }
  }
}

}  // namespace distllm::serve
