#include "distllm/model/model_weights.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "distllm/base/error.h"
#include "distllm/base/parallel.h"

namespace distllm {

ModelWeights::ModelWeights(const ModelConfig& config, std::vector<TensorRef> tensors,
                           std::shared_ptr<const void> keep_alive, std::function<void()> source_check)
    : config_(config),
      layout_(config),
      tensors_(std::move(tensors)),
      keep_alive_(std::move(keep_alive)),
      source_check_(std::move(source_check)) {
  DL_CHECK(tensors_.size() == layout_.tensors().size(), "model weights: %zu tensors given, the layout has %zu",
           tensors_.size(), layout_.tensors().size());
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const TensorRef& t = tensors_[i];
    DL_CHECK(t.data != nullptr && dtype_is_float(t.dtype), "model weights: tensor '%s' has no float data",
             layout_.tensors()[i].name.c_str());
    DL_CHECK(reinterpret_cast<uintptr_t>(t.data) % dtype_size(t.dtype) == 0,
             "model weights: tensor '%s' is not aligned to its dtype", layout_.tensors()[i].name.c_str());
  }
}

ModelWeights::ModelWeights(const ModelConfig& config, const ParamLayout& layout, const float* params,
                           std::shared_ptr<const void> keep_alive)
    : config_(config), layout_(layout), flat_(params), keep_alive_(std::move(keep_alive)) {
  tensors_.reserve(layout_.tensors().size());
  for (const ParamTensor& t : layout_.tensors()) tensors_.push_back({params + t.offset, DType::kF32});
}

std::shared_ptr<const ModelWeights> ModelWeights::of(std::shared_ptr<const Transformer> model) {
  const Transformer& m = *model;
  return std::make_shared<const ModelWeights>(m.config(), m.layout(), m.params(), std::move(model));
}

DType ModelWeights::storage_dtype() const {
  size_t largest = 0;
  for (size_t i = 1; i < tensors_.size(); ++i)
    if (layout_.tensors()[i].numel > layout_.tensors()[largest].numel) largest = i;
  return tensors_.empty() ? DType::kF32 : tensors_[largest].dtype;
}

int64_t ModelWeights::bytes() const {
  int64_t total = 0;
  for (size_t i = 0; i < tensors_.size(); ++i)
    total += layout_.tensors()[i].numel * static_cast<int64_t>(dtype_size(tensors_[i].dtype));
  return total;
}

void ModelWeights::read_f32(int64_t offset, int64_t count, float* out) const {
  DL_CHECK(offset >= 0 && count >= 0 && offset + count <= layout_.total_size(),
           "model weights: span [%lld, %lld) outside the layout's %lld floats", (long long)offset,
           (long long)(offset + count), (long long)layout_.total_size());
  if (flat_ != nullptr) {
    std::memcpy(out, flat_ + offset, sizeof(float) * static_cast<size_t>(count));
    return;
  }
  const std::vector<ParamTensor>& ts = layout_.tensors();
  // The first tensor ending after `offset` (tensors are in offset order).
  auto it = std::upper_bound(ts.begin(), ts.end(), offset,
                             [](int64_t off, const ParamTensor& t) { return off < t.offset + t.numel; });
  int64_t at = offset;
  const int64_t end = offset + count;
  for (; at < end; ++it) {
    const int64_t next = it == ts.end() ? end : std::min(end, it->offset);
    if (at < next) {  // alignment padding before the tensor
      std::memset(out + (at - offset), 0, sizeof(float) * static_cast<size_t>(next - at));
      at = next;
    }
    if (it == ts.end() || at >= end) break;
    const int64_t stop = std::min(end, it->offset + it->numel);
    const TensorRef& ref = tensors_[static_cast<size_t>(it - ts.begin())];
    const auto* src = static_cast<const uint8_t*>(ref.data) + (at - it->offset) * dtype_size(ref.dtype);
    convert_to_f32(ref.dtype, src, out + (at - offset), static_cast<size_t>(stop - at));
    at = stop;
  }
}

std::unique_ptr<Transformer> ModelWeights::to_transformer() const {
  auto model = std::make_unique<Transformer>(config_);
  DL_CHECK(model->layout().total_size() == layout_.total_size(), "model weights: the layout is not the whole model's");
  const std::vector<ParamTensor>& ts = layout_.tensors();
  parallel_for(0, static_cast<int64_t>(ts.size()), [&](int64_t i) {
    const ParamTensor& t = ts[static_cast<size_t>(i)];
    read_f32(t.offset, t.numel, model->params() + t.offset);
  });
  check_source();
  return model;
}

void ModelWeights::check_finite(const std::string& origin) const {
  const std::vector<ParamTensor>& ts = layout_.tensors();
  for (size_t i = 0; i < ts.size(); ++i) {
    const int64_t at = first_non_finite(tensors_[i].dtype, tensors_[i].data, static_cast<size_t>(ts[i].numel));
    if (at < 0) continue;
    float value = 0;
    convert_to_f32(tensors_[i].dtype, static_cast<const uint8_t*>(tensors_[i].data) + at * dtype_size(tensors_[i].dtype),
                   &value, 1);
    throw_error(strprintf("%s: tensor '%s' holds %s at element %lld: the model's weights must be finite (a diverged "
                          "or corrupted checkpoint?)",
                          origin.c_str(), ts[i].name.c_str(), std::isnan(value) ? "NaN" : "an infinity",
                          (long long)at));
  }
}

}  // namespace distllm
