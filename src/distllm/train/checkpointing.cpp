#include "distllm/train/checkpointing.h"

#include <cstdio>
#include <filesystem>

#include "distllm/base/error.h"
#include "distllm/base/strings.h"
#include "distllm/base/timer.h"
#include "distllm/comm/text_collectives.h"
#include "distllm/train/run_identity.h"

namespace distllm {

using nlohmann::json;

namespace {

// Why a checkpoint was passed over, shown after its directory: without the
// directory again ("DIR: rank_0.safetensors: checksum mismatch", not "DIR: DIR/...").
std::string passed_over_line(const std::string& dir, const std::string& why) {
  std::string shown = why;
  for (const std::string& prefix : {dir + "/", dir + ": "})
    if (shown.rfind(prefix, 0) == 0) shown = shown.substr(prefix.size());
  return dir + ": " + shown;
}

}  // namespace

TrainCheckpointer::TrainCheckpointer(DataParallel& dp, CheckpointOptions options, json training_flags,
                                     comm::ProcessGroupPtr world)
    : dp_(dp), options_(std::move(options)), training_(std::move(training_flags)) {
  DL_CHECK(options_.every >= 0, "--checkpoint-every must be >= 0");
  DL_CHECK(options_.resume != "auto" || !options_.dir.empty(), "--resume auto needs --checkpoint-dir");
  if (!world) world = dp_.world();
  // Saves may run on a background thread: their collectives get a communicator of
  // their own so they never interleave with training's.
  if (world && world->size() > 1) {
    comm::GroupOptions o = world->options();
    o.name = "checkpoint";
    group_ = world->split(0, world->rank(), o);
  }
  const std::string dir = options_.dir.empty() ? std::string(".") : options_.dir;
  store_ = std::make_unique<checkpoint::CheckpointStore>(dir, group_, options_.retention);
  saver_ = std::make_unique<checkpoint::AsyncSaver>(*store_);
  // A new run until resume() says it continues one; every rank records rank 0's id.
  run_id_ = comm::broadcast_text(group_.get(), lead() ? new_run_id() : std::string());
  store_->set_own_runs({run_id_});
}

TrainCheckpointer::~TrainCheckpointer() {
  if (saver_) saver_->wait();
}

checkpoint::SaveRequest TrainCheckpointer::request(const Trainer& trainer) const {
  checkpoint::SaveRequest r;
  r.step = trainer.steps_done();
  checkpoint::Manifest& m = r.header;
  m.run_id = run_id_;
  m.strategy = strategy_name(dp_.parallel().strategy);
  m.mesh = dp_.mesh_json();
  m.model_config = dp_.config().to_hf_json();
  m.training = training_;
  const TrainOptions& o = trainer.options();
  m.trainer = {{"step", trainer.steps_done()},
               {"optimizer_steps", dp_.optimizer().steps_taken()},
               {"sampler_position", const_cast<Trainer&>(trainer).sampler().position()},
               {"sequences_drawn", trainer.sequences_drawn()},
               {"seed", o.seed},
               {"global_batch", trainer.global_batch()},
               {"seq", o.seq_len},
               {"grad_accum", o.grad_accum},
               {"lr_schedule",
                {{"kind", o.schedule.kind},
                 {"max_lr", o.schedule.max_lr},
                 {"min_lr", o.schedule.min_lr},
                 {"warmup_steps", o.schedule.warmup_steps},
                 {"total_steps", o.schedule.total_steps},
                 {"next_lr", o.schedule.at(trainer.steps_done())}}}};
  m.states = {"param", "exp_avg", "exp_avg_sq"};
  m.tensors = dp_.manifest_tensors();  // ranks may hold parts of them (tp, pp)
  // Randomness is counter-based: a rank's generator state is (seed, stream, position).
  r.rank_state = {{"rank", group_ ? group_->rank() : 0},
                  {"sampler", {{"seed", o.seed}, {"position", const_cast<Trainer&>(trainer).sampler().position()}}}};
  return r;
}

std::string TrainCheckpointer::describe(const checkpoint::SaveResult& r) {
  if (r.step < 0) return "";
  // Every save's outcome passes through here: remember the last one.
  last_save_failed_ = !r.error.empty();
  if (!last_save_failed_) newest_saved_step_ = r.step;
  if (!r.error.empty())
    return strprintf("checkpoint FAILED at step %lld (training goes on; the previous checkpoint is kept): %s",
                     (long long)r.step, r.error.c_str());
  std::string line =
      strprintf("checkpoint saved: %s (copy %.1f ms, write %.2f s)", r.dir.c_str(), r.copy_s * 1e3, r.write_s);
  if (!r.latest_error.empty()) {
    // The checkpoint is complete and resumable; only the pointer to it is not.
    line += strprintf("; only the `latest` pointer could not be updated (%s): ", r.latest_error.c_str());
    line += r.latest_kept ? strprintf("it still names the previous checkpoint, so resume this one with --resume %s",
                                      r.dir.c_str())
                          : "it was removed, so --resume auto takes the newest checkpoint of this run, this one";
  }
  return line;
}

void TrainCheckpointer::check_fresh_start() const {
  std::string newest;
  if (lead()) {
    std::vector<std::string> found = store_->list();
    if (!found.empty()) newest = found.front();
  }
  newest = comm::broadcast_text(group_.get(), newest);
  if (newest.empty()) return;
  DL_CHECK(options_.start_over,
           "%s already holds checkpoints (the newest: %s), and this run would start at step 0 over them. To "
           "continue from it, pass --resume auto; to start a new run, use a new or empty --checkpoint-dir, or pass "
           "--start-over to start at step 0 in this folder (retention never removes the checkpoints there; this "
           "run's saves replace those of the same steps)",
           options_.dir.c_str(), newest.c_str());
  if (lead())
    std::fprintf(stderr, "warning: starting at step 0 in %s, which holds checkpoints (the newest: %s), as "
                         "--start-over asks; retention never removes them\n",
                 options_.dir.c_str(), newest.c_str());
}

void TrainCheckpointer::check_continuable(const checkpoint::CheckpointReader& r, bool explicitly_named) const {
  r.check_compatible(dp_.config().to_hf_json(), dp_.param_spans());
  if (options_.resume_other_run) return;
  const std::string difference = run_identity_difference(r.manifest().training, training_);
  DL_CHECK(difference.empty(), "written by another run: %s%s", difference.c_str(),
           explicitly_named ? " (pass --resume-other-run to continue it with this run's settings)" : "");
}

int64_t TrainCheckpointer::resume(Trainer& trainer) {
  DL_CHECK(!options_.start_over || options_.resume.empty() || options_.resume == "auto",
           "--start-over goes with --resume auto or no --resume, not with a named checkpoint");
  DL_CHECK(!options_.resume_other_run || !options_.resume.empty(), "--resume-other-run goes with --resume");
  resumed_how_.clear();
  if (options_.resume.empty()) {
    if (enabled()) check_fresh_start();
    return -1;
  }
  const bool automatic = options_.resume == "auto";
  checkpoint::ResumeChoice choice = store_->choose_resume(
      options_.resume, [&](const checkpoint::CheckpointReader& r) { check_continuable(r, !automatic); });
  // Those passed over are named: in the refusal when none is left, else as warnings.
  if (lead() && (!choice.dir.empty() || options_.start_over))
    for (const auto& [d, why] : choice.passed_over)
      std::fprintf(stderr, "warning: skipping checkpoint %s\n", passed_over_line(d, why).c_str());
  if (choice.dir.empty()) {
    if (choice.passed_over.empty()) {
      if (lead()) std::printf("resume auto: %s holds no checkpoint yet; starting at step 0\n", options_.dir.c_str());
      return -1;
    }
    std::string refused;
    for (const auto& [d, why] : choice.passed_over) refused += "\n  " + passed_over_line(d, why);
    DL_CHECK(options_.start_over,
             "--resume auto: no checkpoint in %s can be continued by this run:%s\nNothing was trained. To start "
             "this run at step 0 in this folder anyway, pass --start-over (retention never removes these "
             "checkpoints); to continue another run's checkpoint with this run's settings, --resume-other-run; or "
             "use another --checkpoint-dir",
             options_.dir.c_str(), refused.c_str());
    if (lead())
      std::fprintf(stderr, "warning: no checkpoint in %s can be continued by this run; starting at step 0 as "
                           "--start-over asks (retention never removes them)\n",
                   options_.dir.c_str());
    return -1;
  }
  const std::string* dir = &choice.dir;
  if (automatic) {
    const std::string latest_name =
        choice.latest.empty() ? "" : std::filesystem::path(choice.latest).filename().string();
    if (choice.dir == choice.latest) {
      resumed_how_ = "named by `latest`";
    } else if (choice.latest.empty()) {
      resumed_how_ = "the newest checkpoint this run can continue; there is no `latest`";
    } else {
      bool passed = false;
      for (const auto& p : choice.passed_over) passed |= p.first == choice.latest;
      resumed_how_ = strprintf("the newest checkpoint this run can continue; `latest` names %s, %s",
                               latest_name.c_str(), passed ? "which was skipped (see above)" : "which does not exist");
    }
  }
  checkpoint::CheckpointReader reader = checkpoint::CheckpointReader::open(*dir);
  if (options_.resume_other_run) {
    const std::string difference = run_identity_difference(reader.manifest().training, training_);
    if (!difference.empty()) {
      resumed_how_ += std::string(resumed_how_.empty() ? "" : "; ") + "a checkpoint of another run (" + difference +
                      "), continued with this run's settings as --resume-other-run asks";
    }
  }
  // The run goes on: its id is the checkpoint's, and retention may remove that
  // run's older checkpoints. One written before runs had ids has none: this run
  // keeps its new id and owns those too.
  if (!reader.manifest().run_id.empty()) {
    run_id_ = reader.manifest().run_id;
    store_->set_own_runs({run_id_});
  } else {
    store_->set_own_runs({run_id_, ""});
  }
  const json& t = reader.manifest().trainer;
  DL_CHECK(t.contains("step") && t["step"].is_number_integer() && t.contains("optimizer_steps") &&
               t.contains("sampler_position") && t["sampler_position"].is_number_integer(),
           "%s: the manifest's \"trainer\" lacks step, optimizer_steps or sampler_position", dir->c_str());
  const int64_t step = t["step"].get<int64_t>();
  // The sampler numbers sequences globally: a run that splits the same global
  // batch differently (dp size, micro-batches, accumulation) continues from the
  // same sequence. Older manifests have only this rank's draw count.
  const int64_t global_batch = trainer.global_batch();
  if (t.contains("global_batch") && t["global_batch"].get<int64_t>() != global_batch && lead())
    std::fprintf(stderr,
                 "warning: %s was written with a global batch of %lld sequences, this run uses %lld: the data "
                 "order continues from the same position but batches differ\n",
                 dir->c_str(), (long long)t["global_batch"].get<int64_t>(), (long long)global_batch);
  const uint64_t position = t.contains("sequences_drawn") && t["sequences_drawn"].is_number_unsigned()
                                ? trainer.sampler_position_at(t["sequences_drawn"].get<uint64_t>())
                                : t["sampler_position"].get<uint64_t>();
  dp_.load_checkpoint(reader, t["optimizer_steps"].get<int64_t>());
  trainer.restore(step, position);
  last_saved_ = step;
  return step;
}

std::string TrainCheckpointer::after_step(Trainer& trainer, bool force) {
  if (!enabled()) return "";
  std::string log = describe(saver_->poll());
  const int64_t step = trainer.steps_done();
  const bool due = force || (options_.every > 0 && step % options_.every == 0);
  if (!due || step == last_saved_) return log;
  last_saved_ = step;
  checkpoint::SaveRequest req = request(trainer);
  checkpoint::ShardData shard = dp_.checkpoint_shard();
  const std::vector<checkpoint::ParamSpan> spans = dp_.param_spans();
  if (options_.async && !force) {
    Timer stall;
    saver_->save(req, spans, shard);
    last_stall_s_ = stall.seconds();
    std::string started = strprintf("checkpoint step %lld: saving in the background (stall %.1f ms)", (long long)step,
                                    last_stall_s_ * 1e3);
    return log.empty() ? started : log + "\n" + started;
  }
  std::string previous = describe(saver_->wait());
  Timer t;
  checkpoint::SaveResult r;
  r.step = step;
  try {
    checkpoint::Published p = store_->save(req, spans, shard);
    r.dir = p.dir;
    r.latest_error = p.latest_error;
    r.latest_kept = p.latest_kept;
  } catch (const checkpoint::SaveError& e) {
    r.error = e.what();
  }
  r.write_s = last_stall_s_ = t.seconds();
  std::string now = describe(r);
  if (!log.empty()) now = log + "\n" + now;
  if (!previous.empty()) now = previous + "\n" + now;
  return now;
}

std::string TrainCheckpointer::finish() { return describe(saver_->wait()); }

}  // namespace distllm
