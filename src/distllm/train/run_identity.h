// Whether a checkpoint belongs to this training run. A checkpoint folder may hold
// another run's checkpoints (another seed, learning rate or data); continuing one of
// them silently would mix two experiments. A run is identified by the settings
// that decide its trajectory, as the manifest's `training` records them (the flags,
// named as on the command line, and a fingerprint of the training data):
//
//   training data, --seed, --init-from, --lr, --min-lr, --warmup, --schedule,
//   --steps (only for a cosine schedule, whose shape it sets), --beta1, --beta2,
//   --adam-eps, --weight-decay, --clip
//
// The model is checked apart (a checkpoint of another model cannot be loaded at
// all). What may change between the legs of one run: the strategy, mesh and world
// size (resharding), how the global batch is split, threads, evaluation, logging
// and checkpoint settings, and --steps of a constant schedule (to extend a run).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace distllm {

// "" when `saved` (a checkpoint's `training`) and `current` (this run's) agree on
// every identity field both record; a field either lacks (a checkpoint of an older
// build, or of `distllm convert`) is not compared. Else the first difference, e.g.
// "--seed is 5 in the checkpoint but 6 here".
std::string run_identity_difference(const nlohmann::json& saved, const nlohmann::json& current);

// A new run's id: 16 random hex digits.
std::string new_run_id();

}  // namespace distllm
