// The manifest of a training checkpoint (docs/fault-tolerance.md has the format).
//
// A checkpoint is a directory step_NNNNNNNN/ holding one safetensors file per
// writing rank and manifest.json. Every parameter is flattened; a file holds a
// contiguous slice [begin, end) of some tensors' elements, stored under
// "<state>/<Hugging Face name>" (state: param, exp_avg, exp_avg_sq) as 1-D F32
// tensors. A slice may instead index a region of the tensor (region.h: a
// tensor-parallel shard's rows or columns, flattened): the slices of each region
// then tile the region, and the regions tile the tensor along their axis. The
// manifest says which slices each file holds, the global shape of every tensor,
// each file's size and XXH64 checksum, and the training state needed to resume
// (step, sampler positions, schedule, strategy and mesh, model config), and the id
// of the run that wrote it.
//
// Regions are an addition to version 1 (the version did not change, so older
// checkpoints read as before); a build without them refuses a manifest that has
// them, since such slices do not tile the flattened tensor.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "distllm/checkpoint/region.h"

namespace distllm::checkpoint {

inline constexpr const char* kFormat = "distllm-checkpoint";
inline constexpr int kVersion = 1;
inline constexpr const char* kManifestName = "manifest.json";

struct Slice {
  std::string file;
  int64_t begin = 0, end = 0;  // elements of the flattened region (of the tensor when whole)
  Region region;
};

struct TensorEntry {
  std::string name;
  std::vector<int64_t> shape;
  // Sorted, tiling [0, numel) exactly; or grouped by region (in the order of their
  // first range), each region's tiling it, and the regions tiling the axis.
  std::vector<Slice> slices;
  int64_t numel() const;
};

struct FileEntry {
  std::string name;  // a plain file name inside the checkpoint directory
  int rank = 0;      // the world rank that wrote it
  uint64_t bytes = 0;
  uint64_t xxh64 = 0;
};

struct Manifest {
  int64_t step = 0;
  // The run that wrote it: a random id a training run takes when it starts at step 0
  // and keeps when it resumes (a resumed run is the same run). Retention removes only
  // the saving run's own checkpoints. Empty: written before runs had ids, or by
  // `distllm convert`.
  std::string run_id;
  int world_size = 1;
  std::string strategy;
  nlohmann::json mesh = nlohmann::json::object();
  nlohmann::json model_config = nlohmann::json::object();  // Hugging Face config.json
  nlohmann::json training = nlohmann::json::object();      // the flags of the run
  nlohmann::json trainer = nlohmann::json::object();       // step, sampler position, schedule...
  nlohmann::json ranks = nlohmann::json::array();          // per-rank state (RNG, sampler)
  std::vector<std::string> states;                         // "param", "exp_avg", "exp_avg_sq"
  std::vector<TensorEntry> tensors;
  std::vector<FileEntry> files;

  std::string to_json() const;
  // Parses and checks the structure (slices tile every tensor, files exist in the
  // list, names are plain); throws distllm::Error naming `origin` and the problem.
  static Manifest parse(std::string_view text, const std::string& origin);

  const TensorEntry* find(const std::string& name) const;
  const FileEntry* file(const std::string& name) const;
};

// "step_00000100"
std::string step_dir_name(int64_t step);
// The step of a directory name made by step_dir_name, or -1.
int64_t parse_step_dir_name(const std::string& name);
// "rank_00002-of-00004.safetensors"
std::string rank_file_name(int rank, int world);
// "param/transformer.wte.weight"
std::string state_key(const std::string& state, const std::string& tensor);

}  // namespace distllm::checkpoint
