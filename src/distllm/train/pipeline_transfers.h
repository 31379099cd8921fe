// How a stage's passes meet their point-to-point transfers, as data
// (pipeline_parallel.h executes it). The passes are cut into units; before each
// unit one batch_p2p completes the previous unit's sends together with the
// receives the unit needs (Megatron-LM's send_forward_recv_backward and friends),
// so a stage sends only when it must wait for data anyway, and two neighbours that
// exchange in both directions never wait on each other's send.
//
// A unit is one pass, except in the interleaved schedule's steady state with
// m >= 2p, where it is a forward and the backward after it (Megatron-LM's
// send_forward_backward_recv_forward_backward). With one-pass units the interleaved
// schedule deadlocks for m > p once sends need their receives posted (MPI's
// rendezvous for large messages): stage s's send to s+1 waits until s+1 needs that
// activation, while s+1 first needs a gradient that s sends only after its next
// pass. Pairing posts the receives of a forward and a backward together, as
// Megatron-LM does; for m = p (where pairs deadlock) every pass is a unit.
// check_transfers replays the plans under rendezvous semantics; the unit tests run
// it for every schedule they test.
#pragma once

#include <vector>

#include "distllm/train/pipeline_schedule.h"

namespace distllm {

struct PipelineTransfer {
  bool send = false;       // false: receive
  bool activation = true;  // false: the gradient of an activation
  int chunk = 0;           // this stage's chunk whose buffer is sent, or received into
  int micro_batch = 0;
  int peer = 0;  // stage
  int tag = 0;   // one per model chunk and direction, so transfers never mix
};

struct PipelineStep {
  std::vector<PipelineTransfer> transfers;  // one batch_p2p (none when empty)
  std::vector<int> passes;                  // then these actions, by index
};

// Whether units pair a forward with the backward after it (see above).
bool pairs_passes(PipelineScheduleKind kind, int stages, int micro_batches);

// The steps of stage `stage` for `actions` (its schedule, or forward_passes of
// it); the last step only completes the last sends.
std::vector<PipelineStep> pipeline_steps(const std::vector<PipelineAction>& actions, int stages, int stage,
                                         int virtual_stages, bool pair);

// How many activation sets (TrainGraphs) each of stage `stage`'s chunks needs at
// once when it runs `steps` (of `actions`; `training`: with backward passes). A
// chunk's set is taken when its input arrives (or its forward starts, on the model's
// first chunk) and freed after its last use: the input gradient's send, or the
// output's under forward only; the runner holds exactly these (pipeline_parallel.h)
// and `distllm plan` counts them.
std::vector<int> graphs_per_chunk(const std::vector<PipelineStep>& steps, const std::vector<PipelineAction>& actions,
                                  int stages, int stage, int virtual_stages, bool training);

// Replays every stage's steps, a batch completing only once each of its sends and
// receives has its match posted by the peer; throws naming the stuck stages on a
// deadlock.
void check_transfers(const std::vector<std::vector<PipelineStep>>& stages);

}  // namespace distllm
