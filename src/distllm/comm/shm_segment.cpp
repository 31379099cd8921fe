#include "distllm/comm/shm_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "distllm/base/error.h"
#include "distllm/base/strings.h"
#include "distllm/comm/mpi_util.h"

namespace distllm::comm {
namespace {

uint8_t* map_fd(int fd, size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  return p == MAP_FAILED ? nullptr : static_cast<uint8_t*>(p);
}

}  // namespace

ShmSegment::ShmSegment(MPI_Comm comm, size_t bytes) : bytes_(bytes) {
  int rank = 0;
  DL_MPI(MPI_Comm_rank(comm, &rank));
  char name[96] = {0};
  char error[256] = {0};
  if (rank == 0) {
    static std::atomic<unsigned> counter{0};
    for (int attempt = 0; attempt < 16 && name[0] == 0; ++attempt) {
      std::snprintf(name, sizeof(name), "/distllm-comm-%d-%u", static_cast<int>(getpid()), counter++);
      int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
      if (fd < 0 && errno == EEXIST) {
        name[0] = 0;
        continue;
      }
      if (fd < 0) {
        std::snprintf(error, sizeof(error), "shm_open(%s) failed: %s", name, std::strerror(errno));
        break;
      }
      if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
        std::snprintf(error, sizeof(error), "ftruncate(%s, %zu) failed: %s (is /dev/shm large enough?)", name, bytes,
                      std::strerror(errno));
      } else if ((data_ = map_fd(fd, bytes)) == nullptr) {
        std::snprintf(error, sizeof(error), "mmap(%s, %zu) failed: %s", name, bytes, std::strerror(errno));
      }
      close(fd);
      if (error[0]) shm_unlink(name);
    }
    if (name[0] == 0 && error[0] == 0) std::snprintf(error, sizeof(error), "no free shared-memory name");
  }
  DL_MPI(MPI_Bcast(name, sizeof(name), MPI_CHAR, 0, comm));
  DL_MPI(MPI_Bcast(error, sizeof(error), MPI_CHAR, 0, comm));
  if (error[0]) throw_error(strprintf("shared-memory segment: %s", error));
  name_ = name;
  if (rank != 0) {
    int fd = shm_open(name, O_RDWR, 0600);
    if (fd < 0) {
      std::snprintf(error, sizeof(error), "rank %d: shm_open(%s) failed: %s", rank, name, std::strerror(errno));
    } else {
      data_ = map_fd(fd, bytes);
      if (data_ == nullptr)
        std::snprintf(error, sizeof(error), "rank %d: mmap(%s) failed: %s", rank, name, std::strerror(errno));
      close(fd);
    }
  }
  // Everyone has mapped it (or failed): remove the name now so nothing can outlive
  // the processes, then agree on success.
  int ok = error[0] == 0 ? 1 : 0, all_ok = 0;
  DL_MPI(MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, comm));
  if (rank == 0) shm_unlink(name);
  if (!all_ok) {
    char first[256] = {0};
    // Share one rank's message so every rank reports the same cause.
    int root_candidate = ok ? INT32_MAX : rank, root = 0;
    DL_MPI(MPI_Allreduce(&root_candidate, &root, 1, MPI_INT, MPI_MIN, comm));
    if (rank == root) std::memcpy(first, error, sizeof(first));
    DL_MPI(MPI_Bcast(first, sizeof(first), MPI_CHAR, root, comm));
    if (data_) munmap(data_, bytes_);
    data_ = nullptr;
    throw_error(strprintf("shared-memory segment: %s", first));
  }
}

ShmSegment::~ShmSegment() {
  if (data_) munmap(data_, bytes_);
}

}  // namespace distllm::comm
