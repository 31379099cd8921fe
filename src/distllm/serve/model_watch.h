// Noticing that a model directory holds a new, completely written model (for
// `distllm serve --watch`, docs/serving.md "Hot reload").
//
// A directory's state is the identity (inode, size, modification time in ns) of the
// directory and of every file the model is made of: config.json,
// generation_config.json, the tokenizer files, the distllm marker, and the weights
// (model.safetensors, or the index and every shard it names). It is complete only
// when config.json is a JSON object, every weights file is exactly as long as its
// safetensors header says (a file cut short by a writer that is still running or
// died is not), every shard the index names exists, and every file the distllm
// marker lists exists. Only headers are read, never the weights.
//
// `distllm train --out` and `convert --to-hf` build the new directory beside the old
// one and exchange the two in one rename (model_dir.h), so a complete state appears
// at once; a writer that fills files in place is caught by the size check and by
// ModelChangeDetector's rule that a state must be seen unchanged at two
// consecutive polls before it is loaded.
#pragma once

#include <string>

namespace distllm::serve {

struct ModelDirState {
  bool complete = false;
  // The identity of every file of the model, comparable with ==; empty unless complete.
  std::string signature;
  std::string problem;  // why it is not complete
};

ModelDirState inspect_model_dir(const std::string& dir);

// A training checkpoint directory (`train --checkpoint-dir`, docs/fault-tolerance.md):
// its state is the step `latest` names and the identity of that step's manifest.
// Complete when `latest` names a step directory that holds its manifest: a step
// directory appears only once complete (renamed from .partial-step_N) and `latest` is
// replaced by write + rename after it, so nothing partial is ever named. (Checksums
// are verified when the step is loaded, not at every poll.)
ModelDirState inspect_checkpoint_dir(const std::string& dir);

enum class WatchedKind { kModelDir, kCheckpointDir };
ModelDirState inspect_watched(const std::string& dir, WatchedKind kind);

// Decides, one poll at a time, when a directory holds a model worth loading.
class ModelChangeDetector {
 public:
  // `loaded_signature`: the state of the model serving now (inspect_model_dir when
  // it was loaded).
  ModelChangeDetector(std::string dir, std::string loaded_signature, WatchedKind kind = WatchedKind::kModelDir);

  // True when the directory holds a complete model whose state differs from the
  // loaded one and was the same at the previous poll. The state it found is then
  // candidate(); call set_loaded() once it was loaded (or failed to load: the same
  // files are not tried again, only a later change is).
  bool poll();
  const std::string& candidate() const { return candidate_; }
  void set_loaded(std::string signature);
  const std::string& loaded() const { return loaded_; }
  // Why the last poll found the directory incomplete (empty when it was complete).
  const std::string& problem() const { return problem_; }

 private:
  std::string dir_;
  WatchedKind kind_;
  std::string loaded_;
  std::string previous_;  // the state at the previous poll (empty: incomplete)
  std::string candidate_;
  std::string problem_;
};

}  // namespace distllm::serve
