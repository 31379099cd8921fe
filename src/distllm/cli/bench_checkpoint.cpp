// `distllm bench checkpoint`: what a checkpoint costs training, per rank (any
// strategy, under mpirun): the time to copy the rank's state in memory (the floor
// of an async save's stall), the async stall, a synchronous save, the background
// write of an async save, and a load (checksums verified, then every rank reads
// only its slices), each the slowest rank's time (MB/s of that rank's bytes for the
// copy and the stall, of the whole checkpoint for the rest).
// With --torch-bin DIR it instead compares loading one model's weights from
// pytorch_model.bin (the restricted unpickler) and from a safetensors twin.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "distllm/base/aligned_buffer.h"
#include "distllm/base/error.h"
#include "distllm/base/timer.h"
#include "distllm/checkpoint/async_saver.h"
#include "distllm/checkpoint/store.h"
#include "distllm/cli/command.h"
#include "distllm/cli/world_command.h"
#include "distllm/cli/model_flags.h"
#include "distllm/comm/world.h"
#include "distllm/io/file_util.h"
#include "distllm/model/hf_checkpoint.h"
#include "distllm/train/data_parallel.h"

namespace distllm {
namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// The slowest rank's figure: a collective save or load ends when the last one does.
double slowest(comm::ProcessGroup* g, double seconds) {
  if (g) g->allreduce(&seconds, 1, comm::DType::kF64, comm::ReduceOp::kMax);
  return seconds;
}

// Load time of DIR's pytorch_model.bin (or shards) against the same weights written
// as safetensors (in their own dtype) to a temporary folder; medians of `repeats`.
int bench_torch_bin(const std::string& dir, int repeats) {
  namespace fs = std::filesystem;
  // The .bin files alone (symlinked), so a directory shipping both formats is measured as pickle.
  std::vector<fs::path> linked;
  int bins = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    const bool bin = name.rfind("pytorch_model", 0) == 0;
    if (bin || name == "config.json") linked.push_back(fs::absolute(e.path()));
    bins += bin;
  }
  DL_CHECK(bins > 0, "%s: no pytorch_model.bin (or pytorch_model.bin.index.json) to measure", dir.c_str());
  char tmpl[] = "/var/tmp/distllm-bench-bin.XXXXXX";
  DL_CHECK(mkdtemp(tmpl) != nullptr, "cannot create a folder in /var/tmp");
  const std::string root = tmpl, pt = join_path(root, "bin"), st = join_path(root, "safetensors");
  make_directories(pt);
  for (const fs::path& p : linked) fs::create_symlink(p, join_path(pt, p.filename().string()));
  SaveOptions save;
  save.dtype = map_hf_model(pt)->storage_dtype();
  if (save.dtype != DType::kF16 && save.dtype != DType::kBF16) save.dtype = DType::kF32;
  save_hf_model(*load_hf_model(pt), st, save);
  std::vector<double> pt_s, st_s;
  int64_t bytes = 0;
  for (int rep = 0; rep < repeats; ++rep) {
    for (auto [from, times] : {std::pair{&pt, &pt_s}, std::pair{&st, &st_s}}) {
      Timer t;
      auto model = load_hf_model(*from);
      times->push_back(t.seconds());
      bytes = model->size() * static_cast<int64_t>(dtype_size(save.dtype));
    }
  }
  std::printf("load of %s (%.1f MB of %s weights into f32), medians of %d:\n", dir.c_str(), bytes / 1e6,
              dtype_short_name(save.dtype), repeats);
  std::printf("  %-34s %9.1f ms\n", "safetensors", median(st_s) * 1e3);
  std::printf("  %-34s %9.1f ms\n", "pytorch_model.bin", median(pt_s) * 1e3);
  std::printf("  pytorch_model.bin / safetensors = %.2f\n", median(pt_s) / median(st_s));
  fs::remove_all(root);
  return 0;
}

int run_bench_checkpoint_impl(Args& args, const comm::ProcessGroupPtr& world) {
  const int rank = world ? world->rank() : 0, n = world ? world->size() : 1;
  std::string dir = args.get_string("dir", "", "where to write checkpoints (default: a new folder in /var/tmp); "
                                               "removed at the end");
  const int repeats = static_cast<int>(args.get_int("repeats", 3, "saves and loads of each kind (medians)"));
  ParallelConfig pc;
  pc.strategy = parse_strategy(args.get_string("strategy", n > 1 ? "zero3" : "none", "none | ddp | zero1 | zero2 | "
                                                                                      "zero3 | hsdp"));
  ModelConfig cfg = model_config_from_flags(args, "gpt2-124M", 0);
  auto torch_bin = args.get_optional("torch-bin", "instead: a model directory with pytorch_model.bin; compare its "
                                                  "load time with the same weights as safetensors");
  if (args.help_or_finish()) return 0;
  DL_CHECK(repeats >= 1, "--repeats must be >= 1");
  if (torch_bin) {
    DL_CHECK(n == 1, "--torch-bin measures one process; run it without mpirun");
    return bench_torch_bin(*torch_bin, repeats);
  }
  if (dir.empty()) {
    std::string made;
    if (rank == 0) {
      char tmpl[] = "/var/tmp/distllm-bench-ckpt.XXXXXX";
      DL_CHECK(mkdtemp(tmpl) != nullptr, "cannot create a folder in /var/tmp");
      made = tmpl;
    }
    std::vector<char> buf(256, 0);
    std::memcpy(buf.data(), made.c_str(), std::min<size_t>(made.size(), 255));
    if (world) world->broadcast(buf.data(), buf.size(), comm::DType::kU8, 0);
    dir = buf.data();
  }

  DataParallel dp(cfg, pc, AdamWConfig{}, world);
  dp.init_weights(1);
  dp.sync_parameters();
  // Saves run on a communicator of their own, as in training.
  comm::ProcessGroupPtr group;
  if (world && n > 1) {
    comm::GroupOptions o = world->options();
    o.name = "checkpoint";
    group = world->split(0, rank, o);
  }
  checkpoint::CheckpointStore store(dir, group, checkpoint::Retention{1, 0});
  checkpoint::AsyncSaver saver(store);
  const std::vector<checkpoint::ParamSpan> spans = dp.param_spans();
  const checkpoint::ShardData shard = dp.checkpoint_shard();
  const int64_t elems = shard.end - shard.begin;
  const double my_bytes = static_cast<double>(elems) * sizeof(float) * shard.states.size();
  double total_bytes = my_bytes;
  if (world) world->allreduce(&total_bytes, 1, comm::DType::kF64, comm::ReduceOp::kSum);

  auto request = [&](int64_t step) {
    checkpoint::SaveRequest r;
    r.step = step;
    r.header.strategy = strategy_name(pc.strategy);
    r.header.mesh = dp.mesh_json();
    r.header.model_config = cfg.to_hf_json();
    r.header.trainer = {{"step", step}, {"optimizer_steps", step}, {"sampler_position", 0}};
    r.header.states = {"param", "exp_avg", "exp_avg_sq"};
    r.rank_state = {{"rank", rank}};
    return r;
  };

  std::vector<double> copy_s, stall_s, sync_s, async_write_s, load_s;
  std::vector<AlignedBuffer<float>> copies(shard.states.size());
  for (auto& c : copies) c.resize_uninitialized(static_cast<size_t>(elems));
  int64_t step = 1;
  for (int rep = 0; rep < repeats; ++rep) {
    // The floor: copying this rank's state once in memory.
    if (world) world->barrier();
    Timer t;
    for (size_t i = 0; i < shard.states.size(); ++i)
      std::memcpy(copies[i].data(), shard.states[i].second, static_cast<size_t>(elems) * sizeof(float));
    copy_s.push_back(slowest(world.get(), t.seconds()));

    if (world) world->barrier();
    t.reset();
    store.save(request(step++), spans, shard);
    sync_s.push_back(slowest(world.get(), t.seconds()));

    if (world) world->barrier();
    t.reset();
    saver.save(request(step++), spans, shard);
    stall_s.push_back(slowest(world.get(), t.seconds()));
    checkpoint::SaveResult r = saver.wait();
    DL_CHECK(r.error.empty(), "async save failed: %s", r.error.c_str());
    async_write_s.push_back(slowest(world.get(), r.write_s));

    // Load the newest: verify every checksum (in parallel across ranks), then each
    // rank reads the slices it owns, as a resume does.
    if (world) world->barrier();
    t.reset();
    std::optional<std::string> found = store.find_resume("auto");
    DL_CHECK(found.has_value(), "no checkpoint to load in %s", dir.c_str());
    checkpoint::CheckpointReader reader = checkpoint::CheckpointReader::open(*found);
    dp.load_checkpoint(reader, 0);
    load_s.push_back(slowest(world.get(), t.seconds()));
  }
  if (world) world->barrier();
  if (rank == 0) {
    const double mb = total_bytes / 1e6;
    std::printf("checkpoint of %s: %.1f MB in all (%s, %d rank%s; this rank %.1f MB), %s, medians of %d\n",
                cfg.describe().c_str(), mb, strategy_name(pc.strategy), n, n == 1 ? "" : "s", my_bytes / 1e6,
                dir.c_str(), repeats);
    auto row = [&](const char* what, double s, double bytes) {
      std::printf("  %-34s %9.1f ms  %8.0f MB/s\n", what, s * 1e3, bytes / 1e6 / s);
    };
    row("copy of the state in memory", median(copy_s), my_bytes);
    row("async save: training stall", median(stall_s), my_bytes);
    row("async save: background write", median(async_write_s), total_bytes);
    row("sync save (stall = whole write)", median(sync_s), total_bytes);
    row("load (verify + read own slices)", median(load_s), total_bytes);
    std::printf("  stall / copy = %.2f (target <= 1.5)\n", median(stall_s) / median(copy_s));
  }
  if (world) world->barrier();
  if (rank == 0) std::filesystem::remove_all(dir);
  return 0;
}

int run_bench_checkpoint(Args& args) { return run_on_world(args, run_bench_checkpoint_impl); }

DISTLLM_REGISTER_COMMAND("bench checkpoint",
                         "checkpoint save (sync, async stall), load and copy times per strategy, under mpirun",
                         run_bench_checkpoint);

}  // namespace
}  // namespace distllm
