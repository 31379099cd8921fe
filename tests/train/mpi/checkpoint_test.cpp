// Checkpoints under mpirun: resuming is bit-exact for every strategy, and a
// checkpoint written by N ranks with one strategy continues on M ranks with
// another (every pair of strategies, world sizes 1..4) with the single-process
// losses, within the fp32 reduction-order tolerance.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "distllm/train/checkpointing.h"
#include "train_test_util.h"

namespace distllm {
namespace {

using namespace train_test;
namespace fs = std::filesystem;

// The first n ranks of the world (fake hosts of 2 ranks for hsdp); null elsewhere.
comm::ProcessGroupPtr first_ranks(int n, Strategy st) {
  std::vector<int> ranks;
  for (int r = 0; r < n; ++r) ranks.push_back(r);
  comm::GroupOptions o = comm::world()->options();
  o.name = strprintf("first%d", n);
  if (st == Strategy::kHsdp) o.test_only_ranks_per_host = 2;
  return comm::new_group(ranks, o);
}

struct Leg {
  int ranks;
  Strategy strategy;
  int batch;  // per rank
};

// Trains on the leg's ranks until `until` steps are done (resuming first when
// `resume`), saving every `every` steps (synchronously when !async). Returns the
// losses of the steps it ran and (on members) the final parameters.
Result run_leg(const Job& job, const Leg& leg, const std::string& dir, int64_t until, int64_t every, bool resume,
               bool async) {
  Result r;
  comm::ProcessGroupPtr g = first_ranks(leg.ranks, leg.strategy);
  if (!g) return r;
  TrainOptions o = options(job, leg.batch);
  DataParallel dp(job.config(), config(leg.strategy), o.adamw, g);
  dp.init_weights(job.seed);
  dp.sync_parameters();
  Trainer t(dp, dataset(), nullptr, o);
  CheckpointOptions ck;
  ck.dir = dir;
  ck.every = every;
  ck.resume = resume ? "auto" : "";
  ck.async = async;
  ck.retention.keep_last = 10;
  TrainCheckpointer c(dp, ck, nlohmann::json::object());
  c.resume(t);
  while (t.steps_done() < until) {
    r.losses.push_back(t.step().loss);
    std::string line = c.after_step(t, false);
    EXPECT_EQ(line.find("FAILED"), std::string::npos) << line;
  }
  std::string line = c.finish();
  EXPECT_EQ(line.find("FAILED"), std::string::npos) << line;
  r.params.resize(static_cast<size_t>(dp.layout().total_size()));
  dp.gather_full(r.params.data());
  return r;
}

TEST(Checkpoint, ResumeIsBitExactForEveryStrategy) {
  const int n = comm::world()->size();
  for (ModelFamily family : {ModelFamily::kGpt2, ModelFamily::kLlama}) {
    for (Strategy st : kStrategies) {
      for (bool async : {true, false}) {
        Job job;
        job.family = family;
        job.steps = 7;
        SharedDir dir;
        Leg leg{n, st, kBatch};
        Result whole = run_leg(job, leg, dir.path() + "/whole", 7, 0, false, async);
        // Saves at 2 and 4; "crashes" after step 5; resumes from 4.
        Result first = run_leg(job, leg, dir.path() + "/run", 5, 2, false, async);
        Result rest = run_leg(job, leg, dir.path() + "/run", 7, 2, true, async);
        const std::string what = strprintf("%s %s async %d", family == ModelFamily::kGpt2 ? "gpt2" : "llama",
                                           strategy_name(st), async);
        ASSERT_EQ(rest.losses.size(), 3u) << what << ": should resume at step 4";
        for (size_t i = 0; i < 3; ++i) EXPECT_EQ(rest.losses[i], whole.losses[4 + i]) << what << " step " << 5 + i;
        EXPECT_EQ(rest.params, whole.params) << what << ": final parameters";
      }
    }
  }
}

TEST(Checkpoint, ReshardsAcrossWorldSizesAndStrategies) {
  const int world = comm::world()->size();
  const int kGlobal = 12;  // divisible by 1, 2, 3 and 4 ranks
  Job job;
  job.steps = 5;
  Result ref = [&] {
    Transformer model(job.config());
    model.init_weights(job.seed);
    Trainer t(model, dataset(), nullptr, options(job, kGlobal));
    Result r;
    for (int i = 0; i < job.steps; ++i) r.losses.push_back(t.step().loss);
    r.params.assign(model.params(), model.params() + model.size());
    return r;
  }();
  int pair = 0;
  for (Strategy from : kStrategies) {
    for (Strategy to : kStrategies) {
      // Spread the (N, M) pairs over the pairs of strategies.
      const int n = 1 + pair % world;
      const int m = 1 + (pair / world + pair + 1) % world;
      ++pair;
      SharedDir dir;
      run_leg(job, Leg{n, from, kGlobal / n}, dir.path(), 3, 3, false, false);
      Result got = run_leg(job, Leg{m, to, kGlobal / m}, dir.path(), 5, 0, true, false);
      if (comm::world()->rank() >= m) continue;
      Result expected = ref;
      expected.losses.erase(expected.losses.begin(), expected.losses.begin() + 3);
      expect_close(expected, got,
                   strprintf("%s on %d rank%s -> %s on %d", strategy_name(from), n, n == 1 ? "" : "s",
                             strategy_name(to), m));
    }
  }
}

TEST(Checkpoint, AnotherModelIsRefusedNamingTheField) {
  SharedDir dir;
  Job job;
  job.steps = 2;
  const int n = comm::world()->size();
  run_leg(job, Leg{n, Strategy::kZero2, kBatch}, dir.path(), 2, 2, false, false);
  Job other = job;
  other.model = tiny(ModelFamily::kGpt2);
  other.model.n_layer = 4;
  TrainOptions o = options(other, kBatch);
  DataParallel dp(other.config(), config(Strategy::kZero2), o.adamw, comm::world());
  Trainer t(dp, dataset(), nullptr, o);
  CheckpointOptions ck;
  ck.dir = dir.path();
  ck.resume = "auto";
  TrainCheckpointer c(dp, ck, nlohmann::json::object());
  try {
    c.resume(t);
    FAIL() << "a checkpoint of another model was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("n_layer is 3 in the checkpoint but 4 here"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace distllm
