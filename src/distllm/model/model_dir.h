// Where a model directory is written (`train --out`, `convert`): which folders may
// receive one, and how a finished one replaces what was there.
//
// A model directory written by distllm holds a marker file listing the files it
// wrote. A folder may receive a model when it is absent, empty, or such a model
// directory; any other non-empty folder (a data folder, `.`) is refused unless the
// caller passes `overwrite`, and even then only files a model directory holds
// (config.json, *.safetensors, tokenizer files, ...) are ever replaced or removed.
//
// The swap is one atomic step: the new directory is built in a sibling
// `<dir>.partial-<pid>` and exchanged with the old one (renameat2 RENAME_EXCHANGE),
// so a kill at any moment leaves either the old model or the new one. Partial
// folders of processes that died are removed by the next save.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace distllm {

// The marker a distllm model directory holds (one file name per line).
inline constexpr const char* kModelDirMarker = ".distllm-model";

// True for the names a model directory holds: config.json, generation_config.json,
// model.safetensors[.index.json], model-NNNNN-of-NNNNN.safetensors, tokenizer files
// and the marker.
bool is_model_file_name(const std::string& name);

// Checks, before any work is done, that `dir` may receive a model of about
// `bytes_needed` bytes: it is not a file, it is absent, empty or a distllm model
// directory (or `overwrite`), its parent can be created and written, and the
// filesystem has room. Throws distllm::Error naming the folder and the problem.
void check_model_output(const std::string& dir, bool overwrite, int64_t bytes_needed);

// Builds a model directory and swaps it into place.
class ModelDirWriter {
 public:
  // Validates the target (as check_model_output without the space check), removes
  // stale partial folders of dead processes and creates this process's one.
  ModelDirWriter(const std::string& dir, bool overwrite);
  ~ModelDirWriter();  // removes the partial folder if commit() was not reached

  // The temporary folder to write files into (plain names only).
  const std::string& staging() const { return staging_; }
  // Records a file written into staging() (for the marker).
  void add_file(const std::string& name) { files_.push_back(name); }
  // Writes the marker and makes the new directory visible atomically.
  void commit();

 private:
  std::string target_;
  std::string staging_;
  bool overwrite_;
  std::vector<std::string> files_;
  bool committed_ = false;

  void replace_in_place();  // overwrite of a folder that is not a model directory
};

}  // namespace distllm
