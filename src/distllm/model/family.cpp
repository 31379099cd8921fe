#include "distllm/model/family.h"

#include "distllm/base/error.h"
#include "distllm/base/strings.h"
#include "distllm/model/families/registry.h"

namespace distllm {

std::vector<const FamilyDef*> all_families() {
  return {&gpt2_family(),    &llama_family(),   &qwen2_family(),  &qwen3_family(),
          &phi3_family(),    &mistral_family(), &gemma2_family(), &gemma3_text_family()};
}

const FamilyDef& family_def(ModelFamily family) {
  for (const FamilyDef* f : all_families())
    if (f->id() == family) return *f;
  throw_error(strprintf("internal error: model family %d has no definition", static_cast<int>(family)));
}

const FamilyDef* find_family(std::string_view model_type) {
  for (const FamilyDef* f : all_families())
    if (model_type == f->name()) return f;
  return nullptr;
}

std::string supported_model_types() {
  std::string s;
  for (const FamilyDef* f : all_families()) s += std::string(s.empty() ? "" : ", ") + f->name();
  return s;
}

bool FamilyDef::ignorable_tensor(const std::string& name, const ModelConfig& c) const {
  if (ends_with(name, "rotary_emb.inv_freq")) return true;  // a buffer, recomputed from rope_theta
  if (name == "lm_head.weight") return c.tie_embeddings;    // a tied head saved anyway
  return false;
}

}  // namespace distllm
