// Writing one rank's slice of the flat training state into a checkpoint file, and
// reading any flat range back from whichever files hold it (resharding). A flat
// buffer may hold parts of the whole tensors (a tensor-parallel shard: each
// ParamSpan's region), on either side: the reader maps both to the whole tensors'
// elements, so a checkpoint written at one tp size reads at any other, or whole.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "distllm/checkpoint/manifest.h"
#include "distllm/io/safetensors.h"

namespace distllm::checkpoint {

// Where a parameter lives in the flat buffer (ParamLayout's tensors): the whole
// tensor, or the region of it the buffer holds (numel is then the region's).
struct ParamSpan {
  std::string name;
  std::vector<int64_t> shape;  // the whole tensor's
  int64_t offset = 0;          // flat element offset
  int64_t numel = 0;
  Region region;

  ParamSpan() = default;
  ParamSpan(std::string name, std::vector<int64_t> shape, int64_t offset, int64_t numel, Region region = {})
      : name(std::move(name)), shape(std::move(shape)), offset(offset), numel(numel), region(std::move(region)) {}
};

// What a rank writes: flat elements [begin, end) of each named state. Every
// pointer addresses element `begin`.
struct ShardData {
  int64_t begin = 0, end = 0;
  std::vector<std::pair<std::string, const float*>> states;
};

struct WrittenFile {
  FileEntry file;
  // (tensor name, slice) for every tensor the file holds part of.
  std::vector<std::pair<std::string, Slice>> slices;
};

// Writes `path` (atomically, fsync'd) and returns what the manifest needs: the
// part of [shard.begin, shard.end) that falls in `layout`'s spans (tensors another
// rank writes are left out of `layout`).
WrittenFile write_shard_file(const std::string& path, int rank, const std::vector<ParamSpan>& layout,
                             const ShardData& shard);

// A checkpoint directory opened for reading.
class CheckpointReader {
 public:
  // Parses the manifest and checks that every file exists with its recorded size;
  // throws naming the file otherwise.
  static CheckpointReader open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  const Manifest& manifest() const { return manifest_; }
  // Recomputes the XXH64 of the named files (all when empty); throws naming the
  // first that does not match.
  void verify_checksums(const std::vector<std::string>& files = {}) const;
  // Refuses a checkpoint of another model: `model_config` (Hugging Face JSON) must
  // equal the manifest's, and every parameter must be present with its (whole)
  // shape. The error names the first differing field or tensor.
  void check_compatible(const nlohmann::json& model_config, const std::vector<ParamSpan>& layout) const;
  // Fills out[0, end - begin) with `state` for flat elements [begin, end) of
  // `layout` (alignment padding reads as 0), reading only the slices needed, from
  // whichever regions hold each element.
  void read(const std::string& state, const std::vector<ParamSpan>& layout, int64_t begin, int64_t end,
            float* out) const;

 private:
  std::string dir_;
  Manifest manifest_;
  mutable std::map<std::string, std::shared_ptr<SafetensorsFile>> open_;
  const SafetensorsFile& file(const std::string& name) const;
};

}  // namespace distllm::checkpoint
