#include "distllm/train/gather_schedule.h"

namespace distllm {

GatherSchedule::GatherSchedule(const ParamLayout& layout, int n_layer, GatherScheduleOptions options,
                               ParamGathererSetup setup)
    : layout_(layout), n_layer_(n_layer), options_(options), gatherer_(std::move(setup)) {}

void GatherSchedule::before_forward(int g) {
  const bool tied = layout_.head_uses_embedding();
  if (g == head_group() && tied) gatherer_.prefetch(embed_group());
  gatherer_.prefetch(g);
  if (options_.prefetch && g < head_group() && layout_.has_group(g + 1)) {
    gatherer_.prefetch(g + 1);
    if (g + 1 == head_group() && tied) gatherer_.prefetch(embed_group());
  }
}

void GatherSchedule::after_forward(int g, bool compute_grad) {
  if (!compute_grad) {
    gatherer_.release(g);
    if (g == head_group()) gatherer_.release_all();
    return;
  }
  // The embedding's parameters are not needed in backward (only a tied head reads
  // them again, and it gathers them itself).
  if (options_.reshard_after_forward || g == embed_group()) gatherer_.release(g);
}

void GatherSchedule::before_backward(int g) {
  gatherer_.prefetch(g);
  if (options_.prefetch && g - 1 > embed_group() && layout_.has_group(g - 1)) gatherer_.prefetch(g - 1);
}

void GatherSchedule::after_backward(int g) {
  if (g == head_group()) {
    gatherer_.release(g);
    gatherer_.release(embed_group());
    if (options_.prefetch && n_layer_ > 0 && layout_.has_group(layout_.layer_group(n_layer_ - 1)))
      gatherer_.prefetch(layout_.layer_group(n_layer_ - 1));
  } else if (g != embed_group()) {
    gatherer_.release(g);
  }
}

}  // namespace distllm
