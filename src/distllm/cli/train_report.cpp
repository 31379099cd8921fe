#include "distllm/cli/train_report.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "distllm/base/error.h"
#include "distllm/base/strings.h"
#include "distllm/base/timer.h"
#include "distllm/io/file_util.h"

namespace distllm {
namespace {

std::string human_time(double s) {
  if (s < 0 || !std::isfinite(s)) return "?";
  int64_t t = static_cast<int64_t>(s + 0.5);
  if (t >= 3600) return strprintf("%lldh%02lldm", (long long)(t / 3600), (long long)(t / 60 % 60));
  if (t >= 60) return strprintf("%lldm%02llds", (long long)(t / 60), (long long)(t % 60));
  return strprintf("%llds", (long long)t);
}

nlohmann::json rank_json(const std::vector<RankFigures>& ranks) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& r : ranks)
    a.push_back({{"comm_ms", r.comm_busy_ms},
                 {"comm_exposed_ms", r.comm_exposed_ms},
                 {"peak_mem_bytes", r.peak_bytes},
                 {"peak_rss_bytes", r.peak_rss_bytes}});
  return a;
}

// Whether the output finally lands on a terminal. Open MPI hands its ranks a pty
// even when `mpirun ... > log` writes to a file, so under a launcher (mpirun, srun)
// the launcher's own stdout decides; when that cannot be read, no live line.
bool output_reaches_a_terminal() {
  if (!isatty(STDOUT_FILENO)) return false;
  const bool launched = std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMIX_RANK") ||
                        std::getenv("PMI_RANK") || std::getenv("SLURM_PROCID");
  if (!launched) return true;
  // The nearest ancestor that is the launcher.
  for (pid_t pid = getppid(); pid > 1;) {
    const std::string dir = strprintf("/proc/%d", static_cast<int>(pid));
    std::string comm = file_exists(dir + "/comm") ? read_file(dir + "/comm") : "";
    while (!comm.empty() && comm.back() == '\n') comm.pop_back();
    if (comm == "mpirun" || comm == "mpiexec" || comm == "orterun" || comm == "prterun" || comm == "srun") {
      char target[256] = {};
      const ssize_t n = ::readlink((dir + "/fd/1").c_str(), target, sizeof target - 1);
      if (n <= 0) return false;
      const std::string sink(target, static_cast<size_t>(n));
      return starts_with(sink, "/dev/pts/") || starts_with(sink, "/dev/tty");
    }
    const std::string stat = file_exists(dir + "/stat") ? read_file(dir + "/stat") : "";
    const size_t close = stat.rfind(')');
    int ppid = 0;
    if (close == std::string::npos || std::sscanf(stat.c_str() + close + 1, " %*c %d", &ppid) != 1) return false;
    pid = ppid;
  }
  return false;
}

}  // namespace

TrainReport::TrainReport(bool active, int64_t total_steps, int64_t log_every, const std::string& progress,
                         const std::string& metrics_file, double tokens_per_step)
    : active_(active), total_(total_steps), log_every_(log_every), tokens_per_step_(tokens_per_step),
      started_(now_seconds()) {
  DL_CHECK(progress == "auto" || progress == "on" || progress == "off", "--progress must be auto, on or off, got '%s'",
           progress.c_str());
  live_ = active_ && (progress == "on" || (progress == "auto" && output_reaches_a_terminal()));
  if (active_ && !metrics_file.empty()) {
    metrics_ = std::fopen(metrics_file.c_str(), "a");
    DL_CHECK(metrics_ != nullptr, "cannot open --metrics-file %s for appending", metrics_file.c_str());
  }
}

TrainReport::~TrainReport() {
  end_live_line();
  if (metrics_) std::fclose(metrics_);
}

void TrainReport::end_live_line() {
  if (line_open_) {
    std::printf("\n");
    std::fflush(stdout);
    line_open_ = false;
  }
}

void TrainReport::run_info(const std::string& title, const std::string& details) {
  curve_.title = title;
  if (metrics_) {
    std::fprintf(metrics_, "%s\n",
                 nlohmann::json({{"type", "run"}, {"title", title}, {"details", details}}).dump().c_str());
    std::fflush(metrics_);
  }
}

void TrainReport::step(const StepStats& s, const std::vector<RankFigures>& ranks) {
  if (!active_) return;
  const double tokens = tokens_per_step_ * static_cast<double>(s.step);
  curve_.train.push_back({s.step, tokens, s.loss});
  std::string bubble;
  if (!s.stage_bubbles.empty()) {
    ideal_bubble_ = s.ideal_bubble;
    if (s.step > 1) {
      bubble_sums_.resize(s.stage_bubbles.size());
      for (size_t k = 0; k < s.stage_bubbles.size(); ++k) bubble_sums_[k] += s.stage_bubbles[k];
      ++bubble_steps_;
    }
    for (double b : s.stage_bubbles) bubble += strprintf("%s%.0f%%", bubble.empty() ? "" : " ", 100 * b);
    bubble = strprintf(" | bubble %s (ideal %.0f%%)", bubble.c_str(), 100 * s.ideal_bubble);
  }
  if (metrics_) {
    nlohmann::json j = {{"type", "step"},
                        {"step", s.step},
                        {"tokens", tokens},
                        {"loss", s.loss},
                        {"lr", s.lr},
                        {"grad_norm", s.grad_norm},
                        {"ms", s.millis},
                        {"tokens_per_s", s.tokens_per_second},
                        {"comm_ms", s.comm.busy_s * 1e3},
                        {"comm_exposed_ms", s.comm.exposed_s * 1e3},
                        {"comm_hidden", s.comm.hidden_fraction()},
                        {"elapsed_s", now_seconds() - started_}};
    if (!ranks.empty()) j["ranks"] = rank_json(ranks);
    if (!s.stage_bubbles.empty()) j["bubble"] = s.stage_bubbles, j["bubble_ideal"] = s.ideal_bubble;
    std::fprintf(metrics_, "%s\n", j.dump().c_str());
    std::fflush(metrics_);
  }
  const double elapsed = now_seconds() - started_;
  const double eta = elapsed / static_cast<double>(s.step) * static_cast<double>(total_ - s.step);
  if (live_) {
    std::printf("\r\033[Kstep %lld/%lld | loss %.4f | lr %.2e | %.0f tok/s | elapsed %s | ETA %s", (long long)s.step,
                (long long)total_, s.loss, s.lr, s.tokens_per_second, human_time(elapsed).c_str(),
                human_time(eta).c_str());
    std::fflush(stdout);
    line_open_ = true;
    return;
  }
  if (s.step % log_every_ != 0 && s.step != total_) return;
  std::string comm;
  if (s.comm.busy_s > 0)
    comm = strprintf(" | comm %.1f ms (%.0f%% hidden)", s.comm.busy_s * 1e3, 100.0 * s.comm.hidden_fraction());
  std::printf("step %5lld/%lld | loss %.4f | lr %.3e | grad norm %.4f | %.1f ms | %.0f tok/s%s%s\n", (long long)s.step,
              (long long)total_, s.loss, s.lr, s.grad_norm, s.millis, s.tokens_per_second, comm.c_str(),
              bubble.c_str());
  std::fflush(stdout);
}

std::string TrainReport::bubble_summary() const {
  if (bubble_steps_ == 0) return "";
  std::string line = "pipeline bubble (mean of steps 2..):";
  for (size_t k = 0; k < bubble_sums_.size(); ++k)
    line += strprintf(" stage %zu %.1f%%", k, 100 * bubble_sums_[k] / static_cast<double>(bubble_steps_));
  return line + strprintf(" | ideal (p-1)/(v*m+p-1) = %.1f%%", 100 * ideal_bubble_);
}

void TrainReport::note(const std::string& line) {
  if (!active_) return;
  end_live_line();
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

void TrainReport::set_bits_per_byte(std::function<double(double)> train, std::function<double(double)> val) {
  train_bpb_ = std::move(train);
  val_bpb_ = std::move(val);
}

namespace {
// " (1.2345 bits/byte)", or "" when the split's text size is unknown.
std::string bpb_text(const std::function<double(double)>& bpb, double loss) {
  const double b = bpb ? bpb(loss) : 0.0;
  return b > 0 ? strprintf(" (%.4f bits/byte)", b) : std::string();
}
}  // namespace

void TrainReport::eval(int64_t step, double val_loss, const std::vector<RankFigures>& ranks) {
  if (!active_) return;
  end_live_line();
  const double tokens = tokens_per_step_ * static_cast<double>(step);
  curve_.val.push_back({step, tokens, val_loss});
  std::string mem;
  for (size_t r = 0; r < ranks.size(); ++r)
    mem += strprintf("%s%.1f", r ? " " : "", static_cast<double>(ranks[r].peak_bytes) / (1 << 20));
  std::printf("eval  %5lld | val loss %.4f%s%s%s%s\n", (long long)step, val_loss, bpb_text(val_bpb_, val_loss).c_str(),
              mem.empty() ? "" : " | peak MiB/rank [", mem.c_str(), mem.empty() ? "" : "]");
  std::fflush(stdout);
  if (metrics_) {
    nlohmann::json j = {{"type", "eval"}, {"step", step}, {"tokens", tokens}, {"val_loss", val_loss}};
    if (const double b = val_bpb_ ? val_bpb_(val_loss) : 0.0; b > 0) j["val_bpb"] = b;
    if (!ranks.empty()) j["ranks"] = rank_json(ranks);
    std::fprintf(metrics_, "%s\n", j.dump().c_str());
    std::fflush(metrics_);
  }
}

void TrainReport::finish(int64_t steps_done, const std::string& why, const std::string& outputs) {
  if (!active_) return;
  end_live_line();
  const double elapsed = now_seconds() - started_;
  const double tokens = tokens_per_step_ * static_cast<double>(steps_done);
  std::string losses;
  if (!curve_.train.empty())
    losses += strprintf("; train loss %.4f%s", curve_.train.back().loss,
                        bpb_text(train_bpb_, curve_.train.back().loss).c_str());
  if (!curve_.val.empty()) {
    const LossPoint* best = &curve_.val.front();
    for (const LossPoint& p : curve_.val)
      if (p.loss < best->loss) best = &p;
    losses += strprintf("; validation loss %.4f%s at step %lld (best %.4f at step %lld)", curve_.val.back().loss,
                        bpb_text(val_bpb_, curve_.val.back().loss).c_str(), (long long)curve_.val.back().step,
                        best->loss, (long long)best->step);
  }
  std::printf("done: %s: %lld step%s, %.0f tokens in %s (%.0f tok/s)%s\n", why.c_str(), (long long)steps_done,
              steps_done == 1 ? "" : "s", tokens, human_time(elapsed).c_str(),
              elapsed > 0 ? tokens / elapsed : 0.0, losses.c_str());
  if (!outputs.empty()) std::printf("%s\n", outputs.c_str());
  std::fflush(stdout);
}

std::string TrainReport::write_plot(const std::string& path) {
  if (!active_ || (curve_.train.empty() && curve_.val.empty())) return "";
  write_file_atomic(path, loss_curve_svg(curve_));
  return path;
}

}  // namespace distllm
