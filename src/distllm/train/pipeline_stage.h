// A rank's place in a pipeline: which layers it holds (StageChunks: one chunk, or
// v under the interleaved schedule) and the pp group that joins it to the other
// stages of its data-parallel replica (ranked by stage). DataParallel takes one to
// hold, reduce and update only the stage's parameter groups; PipelineParallel
// (pipeline_parallel.h) runs the schedule.
#pragma once

#include "distllm/comm/process_group.h"
#include "distllm/model/stage_chunks.h"

namespace distllm {

struct PipelineStage {
  StageChunks layers;           // default: the whole model
  comm::ProcessGroupPtr group;  // null: no pipeline
  bool active() const { return group != nullptr && group->size() > 1; }
};

}  // namespace distllm
