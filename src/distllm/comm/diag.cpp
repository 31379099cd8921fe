#include "distllm/comm/diag.h"

#include <mpi.h>
#include <time.h>

#include <atomic>
#include <map>
#include <mutex>
#include <thread>

#include "distllm/base/timer.h"

namespace distllm::comm::diag {
namespace {

constexpr int kQueryTag = 1;
constexpr int kReplyTagBase = 100;

struct Service {
  std::mutex mu;
  std::map<uint64_t, std::weak_ptr<GroupStatus>> groups;
  MPI_Comm control = MPI_COMM_NULL;
  std::thread thread;
  std::atomic<bool> stop{false};
  std::atomic<int> next_tag{0};
};

// Never destroyed: a program that exits without finalize() must not trip over a
// joinable std::thread in a static destructor.
Service& service() {
  static Service* s = new Service;
  return *s;
}

void nap_ms(long ms) {
  timespec ts{0, ms * 1'000'000};
  nanosleep(&ts, nullptr);
}

void answer(Service& s, const uint64_t query[2], int source) {
  // Heap buffer: if the send cannot finish it is abandoned (leaked), never freed
  // under MPI's feet.
  auto* reply = new uint64_t[5]{0, 0, 0, 0, 0};
  {
    std::lock_guard lk(s.mu);
    auto it = s.groups.find(query[0]);
    if (it != s.groups.end()) {
      if (auto st = it->second.lock()) {
        reply[0] = 1;
        reply[1] = st->entered.load();
        reply[2] = st->completed.load();
        reply[3] = static_cast<uint64_t>(static_cast<int64_t>(st->kind.load()));
      }
    }
  }
  MPI_Request req;
  if (MPI_Isend(reply, 5, MPI_UINT64_T, source, static_cast<int>(query[1]), s.control, &req) != MPI_SUCCESS) {
    delete[] reply;
    return;
  }
  // The asker has its receive posted; give up after a second rather than hang.
  double until = now_seconds() + 1.0;
  int done = 0;
  while (!done && now_seconds() < until) {
    MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    if (!done) nap_ms(1);
  }
  if (!done) {
    MPI_Request_free(&req);
  } else {
    delete[] reply;
  }
}

void loop(Service& s) {
  uint64_t query[2];
  MPI_Request req;
  MPI_Status st;
  while (true) {
    if (MPI_Irecv(query, 2, MPI_UINT64_T, MPI_ANY_SOURCE, kQueryTag, s.control, &req) != MPI_SUCCESS) return;
    int done = 0;
    while (!done && !s.stop.load()) {
      MPI_Test(&req, &done, &st);
      if (!done) nap_ms(2);
    }
    if (!done) {
      MPI_Cancel(&req);
      MPI_Wait(&req, MPI_STATUS_IGNORE);
      return;
    }
    answer(s, query, st.MPI_SOURCE);
  }
}

}  // namespace

void start() {
  Service& s = service();
  std::lock_guard lk(s.mu);
  if (s.thread.joinable()) return;
  MPI_Comm_dup(MPI_COMM_WORLD, &s.control);
  MPI_Comm_set_errhandler(s.control, MPI_ERRORS_RETURN);
  s.stop = false;
  s.thread = std::thread([&s] { loop(s); });
}

void stop() {
  Service& s = service();
  if (!s.thread.joinable()) return;
  s.stop = true;
  s.thread.join();
  std::lock_guard lk(s.mu);
  MPI_Comm_free(&s.control);
  s.groups.clear();
}

void register_group(const std::shared_ptr<GroupStatus>& status) {
  Service& s = service();
  std::lock_guard lk(s.mu);
  s.groups[status->id] = status;
}

void unregister_group(uint64_t id) {
  Service& s = service();
  std::lock_guard lk(s.mu);
  s.groups.erase(id);
}

std::vector<Answer> query(uint64_t id, const std::vector<int>& world_ranks, double max_wait_s) {
  Service& s = service();
  std::vector<Answer> answers(world_ranks.size());
  if (s.control == MPI_COMM_NULL || world_ranks.empty()) return answers;
  const int tag = kReplyTagBase + (s.next_tag.fetch_add(1) % 20000);
  auto* q = new uint64_t[2]{id, static_cast<uint64_t>(tag)};  // freed once every send completed
  std::vector<uint64_t> replies(world_ranks.size() * 5, 0);
  std::vector<MPI_Request> sends(world_ranks.size(), MPI_REQUEST_NULL), recvs(world_ranks.size(), MPI_REQUEST_NULL);
  for (size_t i = 0; i < world_ranks.size(); ++i) {
    MPI_Irecv(&replies[i * 5], 5, MPI_UINT64_T, world_ranks[i], tag, s.control, &recvs[i]);
    MPI_Isend(q, 2, MPI_UINT64_T, world_ranks[i], kQueryTag, s.control, &sends[i]);
  }
  double until = now_seconds() + max_wait_s;
  size_t pending = world_ranks.size();
  while (pending > 0 && now_seconds() < until) {
    pending = 0;
    for (size_t i = 0; i < world_ranks.size(); ++i) {
      if (recvs[i] == MPI_REQUEST_NULL) continue;
      int done = 0;
      MPI_Test(&recvs[i], &done, MPI_STATUS_IGNORE);
      if (done) {
        answers[i].replied = true;
        answers[i].knows_group = replies[i * 5] != 0;
        answers[i].entered = replies[i * 5 + 1];
        answers[i].completed = replies[i * 5 + 2];
        answers[i].kind = static_cast<int>(static_cast<int64_t>(replies[i * 5 + 3]));
      } else {
        ++pending;
      }
    }
    if (pending) nap_ms(1);
  }
  bool all_sent = true;
  for (size_t i = 0; i < world_ranks.size(); ++i) {
    if (recvs[i] != MPI_REQUEST_NULL) {
      MPI_Cancel(&recvs[i]);
      MPI_Wait(&recvs[i], MPI_STATUS_IGNORE);
    }
    int done = 0;
    MPI_Test(&sends[i], &done, MPI_STATUS_IGNORE);
    if (!done) {
      MPI_Request_free(&sends[i]);
      all_sent = false;
    }
  }
  if (all_sent) delete[] q;
  return answers;
}

}  // namespace distllm::comm::diag
