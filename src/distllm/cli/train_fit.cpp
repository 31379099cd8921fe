#include "distllm/cli/train_fit.h"

#include "distllm/base/error.h"
#include "distllm/base/strings.h"

namespace distllm {

void check_run_fits(const plan::PlanInput& input, double limit_bytes, int ranks_here, int64_t data_bytes) {
  plan::Estimate e;
  try {
    e = plan::estimate(input, plan::MachineRates{});
  } catch (const Error&) {
    return;  // a layout the plan cannot estimate is refused, with its reason, when it is built
  }
  const plan::MemoryPlan& m = e.memory;
  const double need = static_cast<double>(m.total() + data_bytes);
  if (need <= limit_bytes) return;
  auto gb = [](double bytes) { return bytes / 1e9; };
  throw_error(strprintf(
      "this run needs about %.1f GB per rank (parameters %.1f, gradients %.1f, optimizer %.1f, activations %.1f, "
      "gathered parameters and buffers %.1f, batches %.1f GB), but this host has %.1f GB for each of its %d rank%s: "
      "lower --batch (%d) or --seq (%d), add --activation-checkpointing all, or shard the model (--strategy zero3, "
      "--mesh tp=T); `distllm plan` with the same flags compares the options",
      gb(need), gb(static_cast<double>(m.params + m.master)), gb(static_cast<double>(m.grads)),
      gb(static_cast<double>(m.optimizer)), gb(static_cast<double>(m.activations)),
      gb(static_cast<double>(m.gathered + m.comm_buffers)), gb(static_cast<double>(data_bytes)), gb(limit_bytes),
      ranks_here, ranks_here == 1 ? "" : "s", input.batch, input.seq));
}

}  // namespace distllm
