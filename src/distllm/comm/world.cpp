#include "distllm/comm/world.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "distllm/base/error.h"
#include "distllm/base/strings.h"
#include "distllm/comm/diag.h"
#include "distllm/comm/group_internal.h"
#include "distllm/comm/hier_backend.h"
#include "distllm/comm/mpi_backend.h"
#include "distllm/comm/mpi_util.h"
#include "distllm/comm/shm_backend.h"

namespace distllm::comm {
namespace {

constexpr size_t kDefaultChunk = 256 << 10;

struct WorldState {
  std::mutex mu;
  bool initialized = false;
  bool we_initialized_mpi = false;
  ProcessGroupPtr world;
  std::vector<std::weak_ptr<ProcessGroup>> groups;
};

WorldState& state() {
  static WorldState s;
  return s;
}

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && v[0] != '\0' ? v : nullptr;
}

// Counts this host's processes among the group (real locality, even when tests
// fake hosts) to decide whether waiting ranks may spin.
int spin_limit_for(MPI_Comm comm) {
  MPI_Comm node;
  int rank = 0, on_host = 1;
  DL_MPI(MPI_Comm_rank(comm, &rank));
  DL_MPI(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node));
  DL_MPI(MPI_Comm_size(node, &on_host));
  MPI_Comm_free(&node);
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  return on_host > cpus ? 16 : 4096;
}

}  // namespace

GroupOptions resolve_options(const GroupOptions& in) {
  GroupOptions o = in;
  if (o.backend.empty()) o.backend = env("DISTLLM_COMM_BACKEND") ? env("DISTLLM_COMM_BACKEND") : "auto";
  DL_CHECK(o.backend == "auto" || o.backend == "mpi" || o.backend == "shm" || o.backend == "hierarchical",
           "communication backend '%s' is not one of auto, mpi, shm, hierarchical%s", o.backend.c_str(),
           in.backend.empty() ? " (from DISTLLM_COMM_BACKEND)" : "");
  if (!o.timeout_s) {
    double t = 600;
    if (const char* v = env("DISTLLM_COMM_TIMEOUT")) {
      char* end = nullptr;
      t = std::strtod(v, &end);
      DL_CHECK(end != v && *end == '\0' && t > 0, "DISTLLM_COMM_TIMEOUT='%s' is not a positive number of seconds", v);
    }
    o.timeout_s = t;
  }
  DL_CHECK(*o.timeout_s > 0, "timeout_s must be positive, got %g", *o.timeout_s);
  if (!o.debug) {
    const char* v = env("DISTLLM_COMM_DEBUG");
    DL_CHECK(v == nullptr || std::string(v) == "0" || std::string(v) == "1", "DISTLLM_COMM_DEBUG='%s' must be 0 or 1",
             v ? v : "");
    o.debug = v != nullptr && std::string(v) == "1";
  }
  if (o.shm_chunk_bytes == 0) {
    o.shm_chunk_bytes = kDefaultChunk;
    if (const char* v = env("DISTLLM_COMM_SHM_CHUNK"))
      o.shm_chunk_bytes = static_cast<size_t>(parse_size(v, "DISTLLM_COMM_SHM_CHUNK"));
  }
  DL_CHECK(o.shm_chunk_bytes >= 4096 && o.shm_chunk_bytes <= (size_t{1} << 30),
           "shared-memory chunk %zu bytes is outside [4 KiB, 1 GiB]", o.shm_chunk_bytes);
  DL_CHECK(o.test_only_ranks_per_host >= 0, "test_only_ranks_per_host must be >= 0");
  return o;
}

std::shared_ptr<ProcessGroup> create_group(MPI_Comm comm, const GroupOptions& options, const std::string& name,
                                           uint64_t id) {
  auto impl = std::make_unique<ProcessGroup::Impl>();
  ProcessGroup::Impl& I = *impl;
  I.comm = comm;
  DL_MPI(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
  I.options = resolve_options(options);
  I.name = name;
  I.id = id;
  I.timeout_s = *I.options.timeout_s;
  I.debug = *I.options.debug;
  DL_MPI(MPI_Comm_rank(comm, &I.rank));
  DL_MPI(MPI_Comm_size(comm, &I.size));
  {
    MPI_Group mine, everyone;
    DL_MPI(MPI_Comm_group(comm, &mine));
    DL_MPI(MPI_Comm_group(MPI_COMM_WORLD, &everyone));
    std::vector<int> ranks(static_cast<size_t>(I.size));
    for (int r = 0; r < I.size; ++r) ranks[static_cast<size_t>(r)] = r;
    I.world_ranks.resize(ranks.size());
    DL_MPI(MPI_Group_translate_ranks(mine, I.size, ranks.data(), everyone, I.world_ranks.data()));
    MPI_Group_free(&mine);
    MPI_Group_free(&everyone);
  }
  I.spin_limit = spin_limit_for(comm);

  // Host locality, decided per member by MPI (or faked in blocks for tests).
  MPI_Comm local;
  const int fake = I.options.test_only_ranks_per_host;
  if (fake > 0)
    DL_MPI(MPI_Comm_split(comm, I.rank / fake, I.rank, &local));
  else
    DL_MPI(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, I.rank, MPI_INFO_NULL, &local));
  DL_MPI(MPI_Comm_set_errhandler(local, MPI_ERRORS_RETURN));
  int local_rank = 0, local_size = 1;
  DL_MPI(MPI_Comm_rank(local, &local_rank));
  DL_MPI(MPI_Comm_size(local, &local_size));
  int leader = local_rank == 0 ? 1 : 0, sizes[2] = {local_size, -local_size}, extremes[2];
  DL_MPI(MPI_Allreduce(&leader, &I.hosts, 1, MPI_INT, MPI_SUM, comm));
  DL_MPI(MPI_Allreduce(sizes, extremes, 2, MPI_INT, MPI_MAX, comm));
  const int max_local = extremes[0], min_local = -extremes[1];

  std::string kind = I.options.backend;
  if (kind == "auto") kind = I.hosts == 1 ? "shm" : (max_local > 1 ? "hierarchical" : "mpi");
  if (kind == "shm")
    DL_CHECK(I.hosts == 1, "backend 'shm' needs every member of group '%s' on one host, but it spans %d hosts",
             name.c_str(), I.hosts);
  try {
    if (kind == "shm") {
      auto shm = std::make_unique<ShmBackend>(comm, I.options.shm_chunk_bytes);
      I.shm_name = shm->segment_name();
      I.backend = std::move(shm);
      MPI_Comm_free(&local);
    } else if (kind == "mpi") {
      I.backend = std::make_unique<MpiBackend>(comm);
      MPI_Comm_free(&local);
    } else {
      MPI_Comm inter;
      DL_MPI(MPI_Comm_split(comm, local_rank, I.rank, &inter));
      DL_MPI(MPI_Comm_set_errhandler(inter, MPI_ERRORS_RETURN));
      I.extra_comms = {local, inter};
      auto hier = std::make_unique<HierBackend>(comm, local, inter, min_local == max_local, I.options.shm_chunk_bytes);
      I.shm_name = hier->segment_name();
      I.backend = std::move(hier);
    }
  } catch (...) {
    for (MPI_Comm& c : I.extra_comms) MPI_Comm_free(&c);
    I.extra_comms.clear();
    MPI_Comm_free(&I.comm);
    throw;
  }
  I.status = std::make_shared<GroupStatus>();
  I.status->id = id;
  diag::register_group(I.status);
  I.done_work = std::make_shared<Work>(OpKind::kBarrier, 0, name);
  I.done_work->finish(nullptr);
  auto group = std::make_shared<ProcessGroup>(std::move(impl));
  register_group(group);
  return group;
}

void register_group(const std::shared_ptr<ProcessGroup>& group) {
  WorldState& s = state();
  std::lock_guard lk(s.mu);
  s.groups.erase(std::remove_if(s.groups.begin(), s.groups.end(), [](auto& w) { return w.expired(); }),
                 s.groups.end());
  s.groups.push_back(group);
}

ProcessGroupPtr init_process_group(const GroupOptions& options) {
  WorldState& s = state();
  {
    std::lock_guard lk(s.mu);
    DL_CHECK(!s.initialized, "init_process_group was already called in this process");
    int initialized = 0, provided = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      DL_MPI(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided));
      s.we_initialized_mpi = true;
    } else {
      MPI_Query_thread(&provided);
    }
    DL_CHECK(provided == MPI_THREAD_MULTIPLE,
             "the MPI library provides thread level %d, distllm needs MPI_THREAD_MULTIPLE (%d)", provided,
             MPI_THREAD_MULTIPLE);
    s.initialized = true;
  }
  diag::start();
  MPI_Comm comm;
  DL_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &comm));
  ProcessGroupPtr w = create_group(comm, options, options.name.empty() ? "world" : options.name, 1);
  std::lock_guard lk(s.mu);
  s.world = w;
  return w;
}

bool started_by_mpi_launcher() {
  return env("OMPI_COMM_WORLD_SIZE") || env("PMIX_RANK") || env("PMI_RANK") || env("PMI_SIZE");
}

bool is_initialized() {
  WorldState& s = state();
  std::lock_guard lk(s.mu);
  return s.initialized;
}

ProcessGroupPtr world() {
  WorldState& s = state();
  std::lock_guard lk(s.mu);
  DL_CHECK(s.world != nullptr, "communication is not initialised: call comm::init_process_group() first");
  return s.world;
}

ProcessGroupPtr new_group(std::vector<int> ranks) {
  GroupOptions o = world()->options();
  o.name.clear();
  return new_group(std::move(ranks), o);
}

ProcessGroupPtr new_group(std::vector<int> ranks, const GroupOptions& options) {
  ProcessGroupPtr w = world();
  std::sort(ranks.begin(), ranks.end());
  DL_CHECK(std::adjacent_find(ranks.begin(), ranks.end()) == ranks.end(), "new_group: rank listed twice");
  DL_CHECK(!ranks.empty() && ranks.front() >= 0 && ranks.back() < w->size(),
           "new_group: ranks must be non-empty and within [0, %d)", w->size());
  auto it = std::find(ranks.begin(), ranks.end(), w->rank());
  GroupOptions o = options;
  if (o.name.empty()) {
    o.name = "group[";
    for (size_t i = 0; i < ranks.size(); ++i) o.name += strprintf(i ? ",%d" : "%d", ranks[i]);
    o.name += "]";
  }
  return w->split(it == ranks.end() ? -1 : 0, static_cast<int>(it - ranks.begin()), o);
}

void finalize() {
  WorldState& s = state();
  std::vector<std::shared_ptr<ProcessGroup>> live;
  {
    std::lock_guard lk(s.mu);
    if (!s.initialized) return;
    for (auto& w : s.groups)
      if (auto g = w.lock()) live.push_back(g);
    s.groups.clear();
  }
  // Children first (they were created after their parents).
  for (auto it = live.rbegin(); it != live.rend(); ++it) (*it)->shutdown();
  live.clear();
  diag::stop();
  std::lock_guard lk(s.mu);
  s.world.reset();
  s.initialized = false;
  if (s.we_initialized_mpi) MPI_Finalize();
}

void abort(int code, const std::string& why) {
  int rank = -1, initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::fflush(stdout);
  std::fprintf(stderr, "[rank %d] aborting the job: %s\n", rank, why.c_str());
  std::fflush(stderr);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

}  // namespace distllm::comm
