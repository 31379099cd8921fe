// Collectives on strings (error messages, file lists, JSON): what c10d calls
// object collectives. A null group stands for one process on its own, so callers
// that run with and without a process group need no branches.
#pragma once

#include <string>
#include <vector>

#include "distllm/comm/process_group.h"

namespace distllm::comm {

// Every rank's text, in rank order (an all-gather of lengths, then allgatherv).
std::vector<std::string> allgather_text(ProcessGroup* group, const std::string& mine);

// Rank `root`'s text on every rank.
std::string broadcast_text(ProcessGroup* group, const std::string& text, int root = 0);

}  // namespace distllm::comm
