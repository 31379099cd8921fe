// Communication errors. All derive from distllm::Error, so a CLI prints them as
// "error: <message>" like any other failure.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "distllm/base/error.h"

namespace distllm::comm {

// A collective or point-to-point operation failed, or was refused because its group
// failed earlier. After a failure other than CommMismatchError the group is
// unusable: every later call on it throws at once (see docs/comm.md, "Failures").
class CommError : public Error {
 public:
  explicit CommError(const std::string& message) : Error(message) {}
};

// An operation did not complete before its deadline. The message names the
// operation, the group, the sequence number and the ranks that did not arrive.
class CommTimeoutError : public CommError {
 public:
  CommTimeoutError(const std::string& message, std::string op, std::string group, uint64_t seq,
                   std::vector<int> not_arrived)
      : CommError(message), op_(std::move(op)), group_(std::move(group)), seq_(seq),
        not_arrived_(std::move(not_arrived)) {}
  const std::string& op() const { return op_; }
  const std::string& group() const { return group_; }
  uint64_t seq() const { return seq_; }
  // Group ranks known not to have entered this operation (empty when unknown).
  const std::vector<int>& not_arrived() const { return not_arrived_; }

 private:
  std::string op_, group_;
  uint64_t seq_;
  std::vector<int> not_arrived_;
};

// Debug mode (DISTLLM_COMM_DEBUG=1): ranks called different collectives, or the
// same collective with different arguments. Every rank gets the same message; the
// operation was not run and the group stays usable.
class CommMismatchError : public CommError {
 public:
  explicit CommMismatchError(const std::string& message) : CommError(message) {}
};

}  // namespace distllm::comm
