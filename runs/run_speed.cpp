// A run's speed over the whole run (see run_speed.h).
#include "runs/run_speed.h"

#include <cmath>
#include <optional>
#include <vector>

#include "db/queries.h"
#include "db/step_times.h"
#include "engine/train/metrics_reader.h"

namespace flotilla::runs {

void SpeedMean::add(int64_t step, double tokens_per_s, double mfu) {
  if (!std::isfinite(tokens_per_s)) tokens_per_s = 0;
  if (!std::isfinite(mfu)) mfu = 0;
  if (step <= 1 && !have_first_) {  // the warm-up step counts only when it is the only one
    have_first_ = true;
    first_tps_ = tokens_per_s;
    first_mfu_ = mfu;
    return;
  }
  tps_sum_ += tokens_per_s;
  mfu_sum_ += mfu;
  mfu_unknown_ = mfu_unknown_ || !(mfu > 0);
  ++count_;
}

RunSpeed SpeedMean::value() const {
  RunSpeed s;
  if (count_ > 0) {
    s.tokens_per_s = tps_sum_ / static_cast<double>(count_);
    s.mfu = mfu_unknown_ ? 0.0 : mfu_sum_ / static_cast<double>(count_);
    s.steps = count_;
  } else if (have_first_) {
    s.tokens_per_s = first_tps_;
    s.mfu = first_mfu_;
    s.steps = 1;
  }
  return s;
}

RunSpeed run_speed(const db::Database& db, const db::Run& run) {
  if (!run.summary_json.empty()) {
    MetricsRecord r;
    if (parse_metrics_line(run.summary_json, r) == ParseStatus::kRecord &&
        r.type == MetricsRecordType::kSummary && r.summary().mean_tokens_per_s > 0) {
      RunSpeed s;
      s.tokens_per_s = r.summary().mean_tokens_per_s;
      s.mfu = r.summary().mean_mfu;
      s.from_summary = true;
      return s;
    }
  }
  SpeedMean mean;
  for (const db::StepRow& row : db::step_rows(db, run.id, {"tokens_per_s", "mfu"}))
    if (!std::isnan(row.values[0]))
      mean.add(row.step, row.values[0], std::isnan(row.values[1]) ? 0 : row.values[1]);
  return mean.value();
}

db::RunSummary run_summary(const db::Database& db, int64_t run_id, double now) {
  db::RunSummary s = db::run_summary(db, run_id, now);
  const RunSpeed speed = run_speed(db, db::get_run(db, run_id));
  s.tokens_per_s = speed.tokens_per_s > 0 ? std::optional<double>(speed.tokens_per_s) : std::nullopt;
  // 0: not known (no ceiling, or a summary's null mean_mfu: the ceiling read below the run's speed).
  s.mfu = speed.tokens_per_s > 0 && speed.mfu > 0 ? std::optional<double>(speed.mfu) : std::nullopt;
  return s;
}

double measured_seconds_per_step(const db::Database& db, int64_t run_id, int window) {
  const std::vector<db::StepTime> rows = db::latest_step_times(db, run_id, window);  // newest first
  if (rows.size() < 2) return 0;
  const db::StepTime newest = rows.front();
  db::StepTime oldest = newest;
  for (size_t i = 1; i < rows.size(); ++i) {
    const double pace =
        oldest.step < newest.step ? (newest.time - oldest.time) / double(newest.step - oldest.step) : 0;
    const double gap = oldest.time - rows[i].time;
    if (gap > 30.0 && (pace <= 0 || gap > 10 * pace * double(oldest.step - rows[i].step))) break;  // a pause
    oldest = rows[i];
  }
  if (newest.step <= oldest.step || newest.time <= oldest.time) return 0;
  return (newest.time - oldest.time) / double(newest.step - oldest.step);
}

double remaining_seconds(int64_t planned, int64_t last, double seconds_per_step) {
  if (planned <= 0 || !(seconds_per_step > 0)) return -1;
  return last >= planned ? 0 : double(planned - last) * seconds_per_step;
}

}  // namespace flotilla::runs
