// checkpoint.every = "auto" (checkpoint_interval.h says what is decided and why).
#include "engine/train/checkpoint_interval.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace flotilla {

double young_interval_s(double write_s, double mtbi_s) {
  if (!(write_s > 0) || !(mtbi_s > 0)) return 0;
  return std::sqrt(2.0 * write_s * mtbi_s);
}

double daly_interval_s(double write_s, double mtbi_s) {
  if (!(write_s > 0) || !(mtbi_s > 0)) return 0;
  if (write_s >= 2.0 * mtbi_s) return mtbi_s;
  const double x = write_s / (2.0 * mtbi_s);
  return std::sqrt(2.0 * write_s * mtbi_s) * (1.0 + std::sqrt(x) / 3.0 + x / 9.0) - write_s;
}

double daly_expected_wall_s(double solve_s, double tau_s, double write_s, double restart_s, double mtbi_s) {
  return mtbi_s * std::exp(restart_s / mtbi_s) * std::expm1((tau_s + write_s) / mtbi_s) * solve_s / tau_s;
}

std::string format_mtbi_line(const MtbiNote& note) {
  char num[64];
  std::snprintf(num, sizeof num, "%.17g", note.mtbi_s);
  std::string source = note.source;
  std::replace(source.begin(), source.end(), '\n', ' ');
  std::replace(source.begin(), source.end(), '\r', ' ');
  return std::string("mtbi_s=") + num + " source=" + source + "\n";
}

std::optional<MtbiNote> parse_mtbi_line(const std::string& text) {
  std::string line = text.substr(0, text.find('\n'));
  MtbiNote note;
  bool have = false;
  size_t pos = 0;
  while (pos < line.size()) {
    while (pos < line.size() && line[pos] == ' ') ++pos;
    if (line.compare(pos, 7, "source=") == 0) {
      note.source = line.substr(pos + 7);
      break;
    }
    const size_t end = std::min(line.find(' ', pos), line.size());
    const std::string word = line.substr(pos, end - pos);
    if (word.rfind("mtbi_s=", 0) == 0) {
      const std::string value = word.substr(7);
      char* stop = nullptr;
      const double v = std::strtod(value.c_str(), &stop);
      if (value.empty() || stop != value.c_str() + value.size()) return std::nullopt;
      note.mtbi_s = v;
      have = true;
    }
    pos = end;
  }
  if (!have || !std::isfinite(note.mtbi_s) || note.mtbi_s <= 0) return std::nullopt;
  return note;
}

bool write_mtbi_file(const std::string& run_dir, const MtbiNote& note) {
  if (run_dir.empty() || !(note.mtbi_s > 0)) return false;
  const std::string path = run_dir + "/" + kMtbiFile, tmp = path + ".tmp-" + std::to_string(getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out) return false;
    out << format_mtbi_line(note);
    if (!out.flush()) {
      std::remove(tmp.c_str());
      return false;
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return false;
  }
  return true;
}

std::optional<MtbiNote> read_mtbi_file(const std::string& run_dir) {
  std::ifstream in(run_dir + "/" + kMtbiFile);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return parse_mtbi_line(text.str());
}

std::string duration_words(double s) {
  char b[48];
  if (!std::isfinite(s)) return "unknown";
  if (s < 0.1)
    std::snprintf(b, sizeof b, "%.0f ms", s * 1000);
  else if (s < 1)
    std::snprintf(b, sizeof b, "%.2f s", s);
  else if (s < 60)
    std::snprintf(b, sizeof b, "%.1f s", s);
  else if (s < 3600)
    std::snprintf(b, sizeof b, "%.1f min", s / 60);
  else if (s < 2 * 86400)
    std::snprintf(b, sizeof b, "%.3g h", s / 3600);
  else if (s < 100 * 86400)
    std::snprintf(b, sizeof b, "%.3g d", s / 86400);
  else
    std::snprintf(b, sizeof b, "%.0f d", s / 86400);
  return b;
}

std::string IntervalChoice::text() const {
  return "checkpoint interval: every " + std::to_string(steps) + (steps == 1 ? " step (" : " steps (") +
         duration_words(static_cast<double>(steps) * step_s) + "; write " + duration_words(write_s) +
         (write_basis == "measured" ? "" : " (" + write_basis + ")") + ", MTBI " + duration_words(mtbi_s) +
         " (" + mtbi_basis + "), step " + duration_words(step_s) + "; " + basis + ")";
}

std::map<std::string, std::string> IntervalChoice::fields() const {
  const auto num = [](double v) {
    char b[40];
    std::snprintf(b, sizeof b, "%.6g", v);
    return std::string(b);
  };
  return {{"ckpt_interval_steps", std::to_string(steps)},
          {"interval_s", num(interval_s)},
          {"write_s", num(write_s)},
          {"mtbi_s", num(mtbi_s)},
          {"step_s", num(step_s)},
          {"basis", basis},
          {"write_basis", write_basis},
          {"mtbi_basis", mtbi_basis}};
}

CheckpointInterval::CheckpointInterval(const Options& options) : opt_(options) {
  last_save_step_ = opt_.start_step;
  if (opt_.last_save_s > 0) {
    write_s_ = opt_.last_save_s;
    write_basis_ = "previous start";
  } else {
    write_s_ = std::max(0.01, static_cast<double>(opt_.checkpoint_bytes) / kAssumedWriteBytesPerSecond);
    char b[96];
    std::snprintf(b, sizeof b, "estimated: %.1f MB at %.0f MB/s",
                  static_cast<double>(opt_.checkpoint_bytes) / 1e6, kAssumedWriteBytesPerSecond / 1e6);
    write_basis_ = b;
  }
  if (opt_.config_mtbi_s > 0) {
    mtbi_s_ = opt_.config_mtbi_s;
    mtbi_basis_ = "checkpoint.mtbi_s";
  } else {
    mtbi_s_ = kPriorMtbiSeconds;
    mtbi_basis_ = "prior";
  }
}

bool CheckpointInterval::poll_file(double now_s) {
  if (opt_.run_dir.empty() || now_s < next_file_check_) return false;
  next_file_check_ = now_s + opt_.file_check_s;
  struct stat st {};
  const std::string path = opt_.run_dir + "/" + kMtbiFile;
  if (::stat(path.c_str(), &st) != 0) return false;  // none (a removed file keeps the last figure)
  if (file_seen_ && st.st_mtim.tv_sec == file_mtime_ && st.st_mtim.tv_nsec == file_mtime_ns_ &&
      static_cast<long long>(st.st_size) == file_size_)
    return false;
  file_seen_ = true;
  file_mtime_ = st.st_mtim.tv_sec;
  file_mtime_ns_ = st.st_mtim.tv_nsec;
  file_size_ = static_cast<long long>(st.st_size);
  const std::optional<MtbiNote> note = read_mtbi_file(opt_.run_dir);
  if (!note) return false;  // unreadable or torn: the figure stays (the next rewrite is looked at)
  const std::string basis = note->source.empty() ? std::string(kMtbiFile) : note->source;
  if (note->mtbi_s == mtbi_s_ && basis == mtbi_basis_) return false;
  mtbi_s_ = note->mtbi_s;
  mtbi_basis_ = basis;
  return true;
}

std::optional<IntervalChoice> CheckpointInterval::choose(bool mtbi_changed, std::optional<double> now_s) {
  if (step_ema_s_ <= 0) return std::nullopt;
  IntervalChoice c;
  c.write_s = write_s_;
  c.write_basis = write_basis_;
  c.mtbi_s = mtbi_s_;
  c.mtbi_basis = mtbi_basis_;
  c.step_s = step_ema_s_;
  c.interval_s = daly_interval_s(write_s_, mtbi_s_);
  c.basis = write_s_ >= 2 * mtbi_s_ ? "Daly 2006, write >= 2 MTBI: interval = MTBI" : "Daly 2006";
  const double steps = std::floor(c.interval_s / step_ema_s_ + 0.5);
  c.steps = static_cast<int64_t>(std::clamp(steps, 1.0, 1e15));
  if (current_ && !mtbi_changed) {
    // A moved save or step time changes the steps only past the dead band: more than a quarter
    // and more than one step. Near the optimum the expected overhead is flat, (k + 1/k) / 2 of the
    // least at k times tau: at most 4 % more for k in [0.75, 1.25], so noise need not log a new one.
    const double old = static_cast<double>(current_->steps);
    if (std::abs(static_cast<double>(c.steps) - old) <= std::max(1.0, 0.25 * old)) {
      c.steps = current_->steps;
      c.interval_s = current_->interval_s;
      current_ = c;  // the inputs still update what current() reports
      return std::nullopt;
    }
    if (now_s && last_step_record_s_ && *now_s - *last_step_record_s_ < kStepRelogS) {
      c.steps = current_->steps;  // a step-time swing: kept until kStepRelogS has passed
      c.interval_s = current_->interval_s;
      current_ = c;
      return std::nullopt;
    }
  }
  if (current_ && c.steps == current_->steps && c.mtbi_s == current_->mtbi_s &&
      c.mtbi_basis == current_->mtbi_basis)
    return std::nullopt;
  current_ = c;
  if (now_s) last_step_record_s_ = *now_s;
  return c;
}

std::optional<IntervalChoice> CheckpointInterval::after_step(int64_t step, double now_s) {
  (void)step;
  if (prev_now_) {
    const double measured = now_s - *prev_now_;
    if (measured > 0) step_ema_s_ = step_ema_s_ <= 0 ? measured : 0.8 * step_ema_s_ + 0.2 * measured;
  }
  prev_now_ = now_s;
  const bool changed = poll_file(now_s);
  return choose(changed, now_s);
}

bool CheckpointInterval::due(int64_t step) const {
  return current_ && current_->steps > 0 && step - last_save_step_ >= current_->steps;
}

std::optional<IntervalChoice> CheckpointInterval::after_save(int64_t step, double write_s) {
  last_save_step_ = step;
  prev_now_.reset();  // the next step's wall time would include the save
  if (write_s > 0) {
    write_s_ = write_basis_ == "measured" ? 0.5 * write_s_ + 0.5 * write_s : write_s;
    write_basis_ = "measured";
  }
  return choose(false);
}

}  // namespace flotilla
