// Where a `--model` argument points: a model directory, a Hugging Face hub cache
// folder, or a hub id already in the local cache.
//
// `huggingface-cli download ORG/NAME` (and transformers' from_pretrained) store a
// model as HF_HUB_CACHE/models--ORG--NAME/{refs/main, snapshots/<commit>/...}, the
// snapshot's files being links into blobs/. Users point vLLM and llama.cpp at any of
// the three spellings; this resolves each to the snapshot directory that holds
// config.json, so every command that takes a model directory takes them all. Nothing
// is downloaded: an id that is not in the cache is an error naming where it looked.
#pragma once

#include <string>

namespace distllm {

// The hub cache folder, as huggingface_hub decides it: $HF_HUB_CACHE, else
// $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub.
std::string hf_hub_cache_dir();

// `spec` resolved to a model directory:
//   - a directory holding config.json: itself;
//   - a cache folder (`.../models--ORG--NAME`): the snapshot refs/main names, or its
//     only snapshot when refs/main is absent;
//   - `ORG/NAME` that is not a local path: models--ORG--NAME in hf_hub_cache_dir().
// Anything else is returned unchanged, so the loader's own error names it. Throws
// distllm::Error when a cache folder is found but cannot be resolved (refs/main
// naming a missing snapshot, several snapshots and no refs/main).
std::string resolve_model_dir(const std::string& spec);

// The name a server answers to by default for `spec` (vLLM's: what the user typed):
// "ORG/NAME" for a hub id or a models--ORG--NAME cache folder, else the directory's
// own name.
std::string default_served_model_name(const std::string& spec);

}  // namespace distllm
