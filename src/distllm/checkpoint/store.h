// A directory of checkpoints: collective saves that appear atomically, a `latest`
// pointer, retention, and finding the newest good checkpoint to resume from.
//
//   D/step_00000100/{manifest.json, rank_00000-of-00004.safetensors, ...}
//   D/latest                        "step_00000100\n", replaced atomically
//   D/.partial-step_00000200/       a save in progress (never read)
//
// A save: rank 0 makes the partial directory; every rank writes its file into it
// (fsync'd) and reports its size and checksum; if all succeeded rank 0 writes the
// manifest, fsyncs the directory, renames it to step_NNNNNNNN, fsyncs D, then
// replaces `latest` and applies the retention policy. A crash at any moment leaves
// the previous checkpoint complete; partial directories are removed by the next save.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "distllm/base/error.h"
#include "distllm/checkpoint/manifest.h"
#include "distllm/checkpoint/shard_io.h"
#include "distllm/comm/process_group.h"

namespace distllm::checkpoint {

// Thrown, on every rank, when a save failed on any rank (disk full, I/O error).
class SaveError : public Error {
 public:
  explicit SaveError(const std::string& message) : Error(message) {}
};

struct Retention {
  int keep_last = 3;       // the newest K checkpoints
  int64_t keep_every = 0;  // also every checkpoint whose step is a multiple of M (0: none)
};

struct SaveRequest {
  int64_t step = 0;
  // Everything but files and slices (filled here). `header.tensors` lists the
  // whole model's tensors (names and shapes) when ranks write parts of it (tensor
  // or pipeline parallel); when empty, the first rank's layout's tensors are used.
  Manifest header;
  nlohmann::json rank_state = nlohmann::json::object();  // this rank's (gathered into "ranks")
};

class CheckpointStore {
 public:
  // `group`: the ranks that save together (null: one process); give it a
  // communicator of its own when saves run on a background thread (collectives must
  // not interleave with training's).
  CheckpointStore(std::string dir, comm::ProcessGroupPtr group, Retention retention);

  const std::string& dir() const { return dir_; }

  // Collective. Returns the new step directory. Throws SaveError on every rank if
  // any rank failed; `latest` then still names the previous checkpoint.
  std::string save(const SaveRequest& request, const std::vector<ParamSpan>& layout, const ShardData& shard);

  // Collective. `spec` is "auto" (the newest checkpoint in the directory that opens
  // and verifies; bad ones are reported on rank 0's stderr and skipped) or a step
  // directory (which must verify). Returns nullopt for "auto" when there is none.
  // Checksums are verified in parallel: rank r recomputes every r-th file.
  std::optional<std::string> find_resume(const std::string& spec);

  // Complete step directories, newest first (no validation).
  std::vector<std::string> list() const;

  // Test hook: DISTLLM_TEST_KILL_DURING_SAVE=<step> makes rank 0 die (SIGKILL) after
  // every file of that step's save is written, before it is published.

 private:
  std::string dir_;
  comm::ProcessGroupPtr group_;
  Retention retention_;

  void apply_retention(int64_t newest) const;
  std::string verify(const std::string& step_dir);  // collective; "" when good, else why
};

}  // namespace distllm::checkpoint
