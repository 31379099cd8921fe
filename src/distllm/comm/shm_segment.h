// Internal: one POSIX shared-memory segment mapped by every rank of a host-local
// communicator. The name is unlinked as soon as every rank has mapped it, so the
// memory disappears with the last process, whatever way the processes end.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace distllm::comm {

class ShmSegment {
 public:
  // Collective over `comm` (all ranks on this host). Throws distllm::Error on every
  // rank if any rank fails to create or map the segment.
  ShmSegment(MPI_Comm comm, size_t bytes);
  ~ShmSegment();
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  uint8_t* data() const { return data_; }
  size_t size() const { return bytes_; }
  // The /dev/shm name it had while ranks attached (already unlinked).
  const std::string& name() const { return name_; }

 private:
  uint8_t* data_ = nullptr;
  size_t bytes_ = 0;
  std::string name_;
};

}  // namespace distllm::comm
