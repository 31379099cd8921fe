// Model families (DESIGN.md, model/): what makes GPT-2 GPT-2 and Llama Llama.
//
// A family is one small file under model/families/ that says three things:
//   - how Hugging Face configures it: config.json fields <-> ModelConfig, with
//     every field the code does not implement refused by name;
//   - which blocks its decoder is made of (BlockSpec: the norm, the MLP, the
//     positions, how its block matrices are stored);
//   - its tensors, with Hugging Face names and shapes, each tagged with the role it
//     plays in a block (TensorRole) and how tensor parallelism splits it (TpSplit).
// Everything else (the flat parameter layout, training and inference graphs,
// tensor-parallel slicing, checkpoint loading) reads the block description and the
// roles, never the family: adding a family is adding a file here and registering
// it in family.cpp, not a new branch in the graphs.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "distllm/model/config.h"

namespace distllm {

// Where a tensor goes in a block (LayerFields, param_layout.h) or around it. A
// fused matrix spread over adjacent Hugging Face tensors (Llama's q|k|v, gate|up)
// names its first tensor by the role and the others as kFusedPart: the graphs read
// the adjacent tensors as one [rows, in] matrix.
enum class TensorRole {
  kTokenEmbedding,
  kPositionEmbedding,
  kAttnNormWeight,
  kAttnNormBias,
  kQkvWeight,
  kQkvBias,
  kAttnOutWeight,
  kAttnOutBias,
  kMlpNormWeight,
  kMlpNormBias,
  kMlpInWeight,
  kMlpInBias,
  kMlpOutWeight,
  kMlpOutBias,
  kQNormWeight,
  kKNormWeight,
  kAttnPostNormWeight,  // the sandwich norms (BlockSpec::post_norms) on each branch's output
  kMlpPostNormWeight,
  kFinalNormWeight,
  kFinalNormBias,
  kLmHead,
  kFusedPart,
};

// How tensor parallelism (tensor_parallel.h) splits a tensor along `axis`: by the
// rank's query heads, key/value heads, all three of a fused [q | k | v] axis, MLP
// hidden units, both halves of a fused [gate | up] axis, or vocabulary rows; or not
// at all (norms, row-parallel biases, learned positions).
enum class TpSplit { kReplicated, kQueryHeads, kKvHeads, kQkvFused, kMlpHidden, kGateUpFused, kVocab };

struct TensorSpec {
  std::string name;            // Hugging Face name
  std::vector<int64_t> shape;  // Hugging Face shape
  bool weight_decay = false;   // matrices and embeddings decay; norms and biases do not
  TensorRole role = TensorRole::kFusedPart;
  TpSplit split = TpSplit::kReplicated;
  int split_axis = 0;
};

class FamilyDef {
 public:
  virtual ~FamilyDef() = default;
  virtual ModelFamily id() const = 0;
  // The Hugging Face model_type ("gpt2", "llama") and architecture class.
  virtual const char* name() const = 0;
  virtual const char* hf_architecture() const = 0;
  virtual BlockSpec block(const ModelConfig& c) const = 0;

  // Fills the family's derived defaults (head_dim and intermediate_size when 0, ...)
  // and checks what only this family requires; ModelConfig::normalize calls it.
  virtual void normalize(ModelConfig& c) const = 0;
  virtual void validate(const ModelConfig& c) const = 0;
  // config.json <-> ModelConfig; `origin` names the file in errors.
  virtual void from_hf_json(const nlohmann::json& j, ModelConfig& c, const std::string& origin) const = 0;
  virtual nlohmann::json to_hf_json(const ModelConfig& c) const = 0;

  // The tensors of each layout group, in their order inside the group.
  virtual std::vector<TensorSpec> embed_tensors(const ModelConfig& c) const = 0;
  virtual std::vector<TensorSpec> layer_tensors(const ModelConfig& c, int layer) const = 0;
  virtual std::vector<TensorSpec> head_tensors(const ModelConfig& c) const = 0;

  // Checkpoint files: a tensor name as this code names it (transformers writes
  // some families in more than one form), and tensors a file may hold that are not
  // parameters (buffers such as causal masks and rotary tables).
  virtual std::string canonical_tensor_name(const std::string& name) const { return name; }
  virtual bool ignorable_tensor(const std::string& name, const ModelConfig& c) const;
};

// The definition of a family (every ModelFamily value has one).
const FamilyDef& family_def(ModelFamily family);
// The family whose Hugging Face model_type is `model_type`; nullptr when none.
const FamilyDef* find_family(std::string_view model_type);
// Every registered family, in ModelFamily order (help texts, `version`).
std::vector<const FamilyDef*> all_families();
// "gpt2, llama": the supported model_types, for messages.
std::string supported_model_types();

}  // namespace distllm
