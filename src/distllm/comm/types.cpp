#include "distllm/comm/types.h"

#include <string>

#include "distllm/base/error.h"
#include "distllm/base/strings.h"

namespace distllm::comm {

bool is_collective_dtype(DType t) {
  for (DType c : kCollectiveDTypes)
    if (c == t) return true;
  return false;
}

void check_collective_dtype(DType t) {
  DL_CHECK(is_collective_dtype(t), "collectives do not support dtype %s (they move f32, f64, bf16, f16, i32, i64 and u8)",
           dtype_short_name(t));
}

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAvg: return "avg";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kProd: return "prod";
  }
  return "?";
}

ReduceOp parse_reduce_op(std::string_view text) {
  for (ReduceOp op : kAllReduceOps)
    if (text == reduce_op_name(op)) return op;
  throw_error(strprintf("unknown reduce op '%s' (expected sum, avg, max, min or prod)",
                        std::string(text).c_str()));
}

}  // namespace distllm::comm
