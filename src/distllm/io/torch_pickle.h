// PyTorch checkpoints saved by torch.save (pytorch_model.bin): a zip archive holding
// `<name>/data.pkl` (the state dict, pickled) and `<name>/data/<key>` (raw tensor
// storages). The pickle is read by a restricted unpickler that only rebuilds a dict
// of tensors: it knows a fixed set of opcodes and accepts only the globals that
// torch.save emits for a state dict (collections.OrderedDict,
// torch._utils._rebuild_tensor_v2 / _rebuild_parameter, and the float32, float16
// and bfloat16 storage classes). Any other global (os.system, builtins.eval, ...) is
// refused by name the moment it is read, and nothing is ever called or imported:
// a pickle is a program, and a checkpoint downloaded from the internet must not
// be able to run one here.
//
// Contiguous tensors point into the mapped archive (no copy); tensors with other
// strides are gathered into contiguous copies owned by the file.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "distllm/io/safetensors.h"
#include "distllm/io/zip_reader.h"

namespace distllm {

class TorchCheckpointFile {
 public:
  // Limits on what a pickle may build before it is refused.
  static constexpr size_t kMaxStack = 1 << 16;
  static constexpr size_t kMaxMemo = 1 << 20;
  static constexpr size_t kMaxObjects = 1 << 22;
  static constexpr uint64_t kMaxString = 1 << 20;
  static constexpr int kMaxDims = 16;

  // Maps `path` and rebuilds its state dict; throws distllm::Error naming the file
  // and what is wrong (or the refused global).
  static TorchCheckpointFile open(const std::string& path);
  // The same for an in-memory archive (the bytes must outlive the object).
  static TorchCheckpointFile parse(std::span<const uint8_t> bytes, const std::string& origin);

  const std::string& origin() const { return archive_.origin(); }
  // Name, dtype and shape of each tensor in the state dict's order (begin/end are
  // unused: the bytes are per tensor, below).
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  // The i-th tensor's elements, row-major, little-endian.
  std::span<const uint8_t> bytes(size_t i) const { return bytes_[i]; }
  void check_unchanged() const { archive_.check_unchanged(); }

 private:
  ZipArchive archive_;
  std::vector<TensorInfo> tensors_;
  std::vector<std::span<const uint8_t>> bytes_;
  std::vector<std::unique_ptr<uint8_t[]>> copies_;  // gathered non-contiguous tensors

  void load();
};

}  // namespace distllm
