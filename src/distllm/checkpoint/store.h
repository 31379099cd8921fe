// A directory of checkpoints: collective saves that appear atomically, a `latest`
// pointer, retention, and choosing the checkpoint to resume from.
//
//   D/step_00000100/{manifest.json, rank_00000-of-00004.safetensors, ...}
//   D/latest                        "step_00000100\n", replaced atomically
//   D/.partial-step_00000200/       a save in progress (never read)
//
// A save: rank 0 makes the partial directory; every rank writes its file into it
// (fsync'd) and reports its size and checksum; if all succeeded rank 0 writes the
// manifest, fsyncs the directory, renames it to step_NNNNNNNN, fsyncs D (from here
// the checkpoint is saved), then replaces `latest` and applies the retention policy.
// A crash at any moment leaves the previous checkpoint complete; partial
// directories are removed by the next save.
//
// `latest` is what `--resume auto` takes first (as DeepSpeed's `latest` and
// Megatron's tracker file); when it is absent, names no checkpoint, or names one the
// caller refuses, the newest checkpoint the caller accepts is taken instead. A save
// that cannot replace `latest` (no room for its temporary file) removes it, so it
// never names a checkpoint older than the newest.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "distllm/base/error.h"
#include "distllm/checkpoint/manifest.h"
#include "distllm/checkpoint/shard_io.h"
#include "distllm/comm/process_group.h"

namespace distllm::checkpoint {

// Thrown, on every rank, when a save failed on any rank (disk full, I/O error)
// before the checkpoint was published.
class SaveError : public Error {
 public:
  explicit SaveError(const std::string& message) : Error(message) {}
};

// Which of the saving run's own checkpoints stay (see set_own_runs); checkpoints of
// other runs, and those whose manifest cannot be read, are never removed.
struct Retention {
  int keep_last = 3;       // the run's newest K checkpoints
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

// A published checkpoint.
struct Published {
  std::string dir;  // the step directory
  // Set when the checkpoint is complete but `latest` could not be replaced (why);
  // `latest` was then removed (or, if even that failed, `latest_kept` says so).
  std::string latest_error;
  bool latest_kept = false;  // `latest` still names the previous checkpoint
};

// Whether a run may continue a checkpoint: throws distllm::Error saying why not
// (another model, another run). Called on every rank with the opened checkpoint,
// once its checksums are verified.
using ResumeCheck = std::function<void(const CheckpointReader&)>;

// What choose_resume found.
struct ResumeChoice {
  std::string dir;     // the checkpoint to resume from; "" when none
  std::string latest;  // the step directory `latest` names; "" without one
  // The checkpoints examined and passed over, in the order examined, with why.
  std::vector<std::pair<std::string, std::string>> passed_over;
};

class CheckpointStore {
 public:
  // `group`: the ranks that save together (null: one process); give it a
  // communicator of its own when saves run on a background thread (collectives must
  // not interleave with training's).
  CheckpointStore(std::string dir, comm::ProcessGroupPtr group, Retention retention);

  const std::string& dir() const { return dir_; }

  // Collective. Returns the new checkpoint (on every rank). Throws SaveError on
  // every rank if any rank failed before it was published; `latest` then still
  // names the previous checkpoint.
  Published save(const SaveRequest& request, const std::vector<ParamSpan>& layout, const ShardData& shard);

  // Collective. `spec` is "auto" or a step directory. "auto": the checkpoint
  // `latest` names, else the newest, that opens, passes `check` and verifies; those
  // passed over are listed with why (dir "" when none is left). A step directory
  // must open, pass `check` and verify, else distllm::Error names why. Checksums
  // are verified in parallel: rank r recomputes every r-th file.
  ResumeChoice choose_resume(const std::string& spec, const ResumeCheck& check = {});
  // choose_resume without a check, reporting checkpoints passed over on rank 0's
  // stderr; nullopt for "auto" when there is none.
  std::optional<std::string> find_resume(const std::string& spec);

  // Retention removes only checkpoints whose run_id is one of these: the saving
  // run's own (by default, the run_id of the checkpoint just saved), and "" for a
  // run that continues checkpoints written before runs had ids.
  void set_own_runs(std::vector<std::string> run_ids) { own_runs_ = std::move(run_ids); }

  // Complete step directories, newest first (no validation).
  std::vector<std::string> list() const;
  // The order "auto" examines them in: the one `latest` names first, then the
  // others newest first (no validation).
  std::vector<std::string> resume_order() const;
  // The step directory `latest` names, or "" (none, or it names no step directory).
  std::string latest_target() const;

  // Test hook: DISTLLM_TEST_KILL_DURING_SAVE=<step> makes rank 0 die (SIGKILL) after
  // every file of that step's save is written, before it is published.

 private:
  std::string dir_;
  comm::ProcessGroupPtr group_;
  Retention retention_;

  std::vector<std::string> own_runs_;

  void apply_retention(int64_t newest, const std::string& run_id) const;
  bool owned(const std::string& step_dir, const std::string& run_id) const;
  // Collective; "" when `step_dir` opens, passes `check` and verifies, else why.
  std::string verify(const std::string& step_dir, const ResumeCheck& check);
};

}  // namespace distllm::checkpoint
