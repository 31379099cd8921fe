#include "distllm/base/error.h"

namespace distllm {

void throw_error(const std::string& message) { throw Error(message); }

}  // namespace distllm
