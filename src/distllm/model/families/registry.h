// The family definitions, one function per file in this folder (family.cpp lists
// them; nothing else includes this header).
#pragma once

#include "distllm/model/family.h"

namespace distllm {

const FamilyDef& gpt2_family();
const FamilyDef& llama_family();
const FamilyDef& qwen2_family();
const FamilyDef& qwen3_family();
const FamilyDef& phi3_family();
const FamilyDef& mistral_family();
const FamilyDef& gemma2_family();
const FamilyDef& gemma3_text_family();

}  // namespace distllm
