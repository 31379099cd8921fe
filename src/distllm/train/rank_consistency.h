// Start-up check that every rank of a data-parallel job was given the same job.
//
// Ranks started with different flags, configs or data would train different models
// and usually deadlock or diverge much later; instead every rank lists the fields
// that must agree (name, value as text), the lists are compared through their
// hashes, and every rank throws the same error naming the first differing field
// and both values.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "distllm/comm/process_group.h"

namespace distllm {

using ConfigFields = std::vector<std::pair<std::string, std::string>>;

// Collective over `group`. Throws distllm::Error on a difference.
void check_same_on_all_ranks(comm::ProcessGroup& group, const ConfigFields& fields);

}  // namespace distllm
