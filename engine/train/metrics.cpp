// Metrics protocol v1 records (see docs/metrics-protocol.md for every field).
#include "engine/train/metrics.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>

#include <nlohmann/json.hpp>

#include "engine/core/clock.h"
#include "engine/core/error.h"

namespace flotilla {
namespace {
using json = nlohmann::ordered_json;

json base(const char* type, int rank) {
  return json{{"v", 1}, {"type", type}, {"time", unix_time_now()}, {"rank", rank}};
}

// float -> double is exact and nlohmann prints doubles round-trip exactly, so the float32 bits
// survive the text form.
double exact(float f) { return static_cast<double>(f); }

// An MFU that is not known (NaN: the ceiling read below the run's speed) is null, not a number.
json mfu_value(double mfu) { return std::isfinite(mfu) ? json(mfu) : json(nullptr); }
}  // namespace

// The clock seam's process time: record times of one worker differ by true durations even when the
// wall clock steps mid-run (durations shown from them stay right).
double unix_time_now() { return clk::process_wall_now(); }

MetricsWriter::MetricsWriter(const std::string& file_path, bool to_stdout, int rank)
    : path_(file_path), to_stdout_(to_stdout), rank_(rank) {
  if (!file_path.empty()) {
    fd_ = ::open(file_path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) throw_io("cannot open metrics file " + file_path + ": " + errno_string(errno));
    struct stat st {};
    if (::fstat(fd_, &st) == 0) whole_bytes_ = static_cast<uint64_t>(st.st_size);
  }
}

MetricsWriter::~MetricsWriter() {
  if (fd_ >= 0) {
    if (!failed_) ::fsync(fd_);  // best effort here: the run's end already called sync()
    ::close(fd_);
  }
}

void MetricsWriter::fail(int err, const std::string& doing) {
  failed_ = true;
  // A record cut short by the failure is removed, so the file still ends with a whole line (a
  // resume appends after it; ftruncate needs no free space).
  struct stat st {};
  if (::fstat(fd_, &st) == 0 && static_cast<uint64_t>(st.st_size) > whole_bytes_)
    (void)::ftruncate(fd_, static_cast<off_t>(whole_bytes_));
  throw Error(ExitCode::kIo,
              doing + " the run's record " + path_ + " failed at step " + std::to_string(step_) + ": " +
                  errno_string(err) +
                  "; the run stops here, its metrics so far are kept (free space on that disk, "
                  "then resume the run from its last checkpoint)");
}

void MetricsWriter::emit(const std::string& line) {
  if (fd_ >= 0) {
    if (failed_) throw Error(ExitCode::kIo, "the run's record " + path_ + " can no longer be written");
    const std::string text = line + "\n";
    size_t done = 0;
    while (done < text.size()) {
      const ssize_t n = ::write(fd_, text.data() + done, text.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) fail(n < 0 ? errno : ENOSPC, "writing");
      done += static_cast<size_t>(n);
    }
    whole_bytes_ += text.size();
  }
  if (to_stdout_) {
    std::fputs(line.c_str(), stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);
  }
}

void MetricsWriter::sync() {
  if (fd_ < 0 || failed_) return;
  if (::fsync(fd_) != 0 && errno != EINVAL) fail(errno, "syncing");
}

void MetricsWriter::run_start(const std::string& run_name, const std::string& config_json, int world_size,
                              uint64_t parameters, double flops_per_token, int64_t start_step,
                              const std::string& resumed_from, uint64_t baseline_rss_bytes) {
  step_ = start_step;
  json j = base("run_start", rank_);
  j["run"] = run_name;
  j["config"] = json::parse(config_json, nullptr, false);
  j["world_size"] = world_size;
  j["parameters"] = parameters;
  j["flops_per_token"] = flops_per_token;
  j["start_step"] = start_step;
  j["resumed_from"] = resumed_from.empty() ? json(nullptr) : json(resumed_from);
  j["pid"] = static_cast<int64_t>(getpid());
  j["baseline_rss_bytes"] = baseline_rss_bytes;
  emit(j.dump());
}

void MetricsWriter::step(const StepRecord& r) {
  step_ = r.step;
  json j = base("step", rank_);
  j["step"] = r.step;
  j["tokens"] = r.tokens;
  j["loss"] = exact(r.loss);
  j["lr"] = r.lr;
  j["grad_norm"] = exact(r.grad_norm);
  j["tokens_per_s"] = r.tokens_per_s;
  j["mfu"] = mfu_value(r.mfu);
  j["step_ms"] = r.step_ms;
  j["time_ms"] = {{"data", r.data_ms},           {"forward", r.forward_ms}, {"backward", r.backward_ms},
                  {"optimizer", r.optimizer_ms}, {"comm", r.comm_ms},       {"bubble", r.bubble_ms}};
  j["peak_rss_bytes"] = r.peak_rss_bytes;
  if (r.skipped) j["skipped"] = true;
  if (!r.gpus.empty()) {
    json gpus = json::array();
    for (const GpuRecord& g : r.gpus)
      gpus.push_back(
          {{"device", g.device}, {"mem_bytes", g.mem_bytes}, {"mem_total_bytes", g.mem_total_bytes}});
    j["gpus"] = gpus;
  }
  if (!r.ranks.empty()) {
    json ranks = json::array();
    size_t slowest = 0;
    for (size_t q = 0; q < r.ranks.size(); ++q) {
      const auto& f = r.ranks[q];
      ranks.push_back({{"rank", q},
                       {"data", f[0]},
                       {"forward", f[1]},
                       {"backward", f[2]},
                       {"optimizer", f[3]},
                       {"comm", f[4]},
                       {"step", f[5]},
                       {"bubble", f.size() > 6 ? f[6] : 0.0f}});
      if (f[5] > r.ranks[slowest][5]) slowest = q;
    }
    j["ranks"] = ranks;
    j["slowest_rank"] = slowest;
  }
  emit(j.dump());
}

void MetricsWriter::eval(const EvalRecord& r) {
  step_ = std::max(step_, r.step);
  json j = base("eval", rank_);
  j["step"] = r.step;
  j["tokens"] = r.tokens;
  j["val_loss"] = exact(r.val_loss);
  j["batches"] = r.batches;
  emit(j.dump());
}

void MetricsWriter::task(const TaskRecord& r) {
  step_ = std::max(step_, r.step);
  json j = base("task", rank_);
  j["step"] = r.step;
  j["tokens"] = r.tokens;
  j["task"] = r.task;
  j["kind"] = r.kind;
  json scores = json::object();
  for (const auto& [name, value] : r.scores)
    scores[name] = std::isfinite(value) ? json(value) : json(nullptr);
  j["scores"] = scores;
  j["seconds"] = r.seconds;
  emit(j.dump(-1, ' ', false, json::error_handler_t::replace));
}

void MetricsWriter::checkpoint(const CheckpointRecord& r) {
  step_ = std::max(step_, r.step);
  json j = base("checkpoint", rank_);
  j["step"] = r.step;
  j["dir"] = r.dir;
  j["bytes"] = r.bytes;
  j["seconds"] = r.seconds;
  j["reason"] = r.reason;
  emit(j.dump());
}

void MetricsWriter::comm(const CommRecord& r) {
  json j = base("comm", rank_);
  j["step"] = r.step;
  j["steps"] = r.steps;
  j["step_ms"] = r.step_ms;
  json groups = json::object();
  for (const CommGroupRecord& g : r.groups) {
    json ops = json::object();
    for (const CommOpRecord& o : g.ops)
      ops[o.op] = {{"count", o.count}, {"bytes", o.bytes}, {"ms", o.ms}, {"wait_ms", o.wait_ms}};
    groups[g.group] = {{"size", g.size}, {"ops", ops}};
  }
  j["groups"] = groups;
  emit(j.dump());
}

void MetricsWriter::sample(int64_t step, const std::vector<int32_t>& tokens, const std::string& text) {
  json j = base("sample", rank_);
  j["step"] = step;
  j["tokens"] = tokens;
  j["text"] = text;
  emit(j.dump(-1, ' ', false, json::error_handler_t::replace));
}

void MetricsWriter::event(const std::string& level, const std::string& message,
                          const std::map<std::string, std::string>& fields) {
  json j = base("event", rank_);
  j["level"] = level;
  j["message"] = message;
  for (const auto& [k, v] : fields) j[k] = v;
  emit(j.dump(-1, ' ', false, json::error_handler_t::replace));
}

void MetricsWriter::summary(int64_t steps, int64_t tokens, float final_loss, float best_val_loss,
                            double wall_s, double mean_tokens_per_s, double mean_mfu,
                            const std::string& exit_reason, const std::string& stop_reason) {
  step_ = std::max(step_, steps);
  json j = base("summary", rank_);
  j["steps"] = steps;
  j["tokens"] = tokens;
  j["final_loss"] = exact(final_loss);
  j["best_val_loss"] = best_val_loss > 0 ? json(exact(best_val_loss)) : json(nullptr);
  j["wall_s"] = wall_s;
  j["mean_tokens_per_s"] = mean_tokens_per_s;
  j["mean_mfu"] = mfu_value(mean_mfu);
  j["exit"] = exit_reason;
  if (!stop_reason.empty()) j["stop_reason"] = stop_reason;
  emit(j.dump());
}

}  // namespace flotilla
