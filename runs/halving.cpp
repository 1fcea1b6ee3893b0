#include "runs/halving.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "db/errors.h"
#include "db/queries.h"
#include "db/queue.h"
#include "db/run_records.h"
#include "db/run_store.h"
#include "engine/config/config_io.h"
#include "engine/config/config_validate.h"

namespace flotilla::runs {
namespace {

using nlohmann::json;

constexpr const char* kEventKind = "halving";

std::string ordinal(int n) {
  const int tens = n % 100, last = n % 10;
  const char* suffix = (tens >= 11 && tens <= 13) ? "th"
                       : last == 1                ? "st"
                       : last == 2                ? "nd"
                       : last == 3                ? "rd"
                                                  : "th";
  return std::to_string(n) + suffix;
}

std::string loss_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

// A run's validation losses with the tokens seen when each was measured.
struct ValPoint {
  double tokens = 0, loss = 0, time = 0;
};

std::vector<ValPoint> val_points(const db::Database& db, const db::Run& run, double now) {
  std::vector<ValPoint> out;
  const auto vals = db::metric_points(db, run.id, "val_loss");
  if (vals.empty()) return out;
  const auto toks = db::metric_points(db, run.id, "tokens");  // cumulative, per logged step
  int64_t per_step = 0;                                       // the fallback: step x tokens per step
  if (toks.empty()) {
    try {
      per_step = tokens_per_step(parse_config_toml(run.config_toml, run.name));
    } catch (const std::exception&) {
      return out;  // no way to tell how far it got
    }
  }
  for (const auto& v : vals) {
    if (now > 0 && v.time > now) continue;
    double tokens = 0;
    if (!toks.empty()) {
      auto it = std::upper_bound(toks.begin(), toks.end(), v.step,
                                 [](int64_t step, const db::Point& p) { return step < p.step; });
      if (it == toks.begin()) continue;  // an evaluation before any logged step
      --it;
      tokens = it->step == v.step || it->step <= 0
                   ? it->value
                   : it->value * static_cast<double>(v.step) / static_cast<double>(it->step);
    } else {
      tokens = static_cast<double>(v.step) * static_cast<double>(per_step);
    }
    out.push_back({tokens, v.value, v.time});
  }
  return out;
}

}  // namespace

std::string halving_json(const HalvingSettings& s) {
  if (!s.on()) return "{}";
  return json{{"eta", s.eta}, {"rungs", s.rungs}, {"auto", s.auto_rungs}}.dump();
}

HalvingSettings parse_halving_json(const std::string& text) {
  HalvingSettings s;
  const json j = json::parse(text, nullptr, false);
  if (!j.is_object()) return s;
  s.eta = std::max(2, j.value("eta", 2));
  s.auto_rungs = j.value("auto", false);
  if (j.contains("rungs") && j["rungs"].is_array())
    for (const auto& r : j["rungs"])
      if (r.is_number_integer() && r.get<int64_t>() > 0) s.rungs.push_back(r.get<int64_t>());
  std::sort(s.rungs.begin(), s.rungs.end());
  return s;
}

std::vector<int64_t> auto_rungs(int64_t total_tokens, int eta, int64_t min_tokens) {
  std::vector<int64_t> out;
  if (eta < 2 || total_tokens <= 0) return out;
  for (int k = 3; k >= 1; --k) {
    const int64_t r = static_cast<int64_t>(static_cast<double>(total_tokens) / std::pow(eta, k));
    if (r >= std::max<int64_t>(1, min_tokens) && r < total_tokens && (out.empty() || r > out.back()))
      out.push_back(r);
  }
  return out;
}

std::string tokens_words(double tokens) {
  char buf[48];
  if (tokens >= 1e9)
    std::snprintf(buf, sizeof buf, "%.3gG tokens", tokens / 1e9);
  else if (tokens >= 1e6)
    std::snprintf(buf, sizeof buf, "%.3gM tokens", tokens / 1e6);
  else if (tokens >= 1e3)
    std::snprintf(buf, sizeof buf, "%.3gk tokens", tokens / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.0f tokens", tokens);
  return buf;
}

std::vector<RunHalving> halving_standings(const db::Database& db, const std::string& group,
                                          const HalvingSettings& settings, double now) {
  std::vector<RunHalving> out;
  std::vector<std::vector<ValPoint>> series;
  for (const db::QueueEntry& e : db::list_queue_group(db, group)) {
    if (!e.run_id) continue;
    std::optional<db::Run> run;
    try {
      run = db::get_run(db, *e.run_id);
    } catch (const db::DbError&) {
      continue;  // deleted since
    }
    RunHalving h;
    h.run_id = run->id;
    out.push_back(std::move(h));
    series.push_back(val_points(db, *run, now));
  }
  for (const int64_t rung : settings.rungs) {
    // Who reached the rung, with its first loss at or after it, in the order they got there.
    struct Arrival {
      size_t run;
      ValPoint at;
    };
    std::vector<Arrival> arrivals;
    for (size_t i = 0; i < series.size(); ++i)
      for (const ValPoint& p : series[i])
        if (p.tokens >= static_cast<double>(rung)) {
          arrivals.push_back({i, p});
          break;
        }
    std::sort(arrivals.begin(), arrivals.end(), [&](const Arrival& a, const Arrival& b) {
      if (a.at.time != b.at.time) return a.at.time < b.at.time;
      return out[a.run].run_id < out[b.run].run_id;
    });
    for (size_t k = 0; k < arrivals.size(); ++k) {
      RungStanding s;
      s.rung = rung;
      s.tokens = arrivals[k].at.tokens;
      s.val_loss = arrivals[k].at.loss;
      s.time = arrivals[k].at.time;
      s.of = static_cast<int>(k + 1);
      s.place = 1;
      for (size_t m = 0; m < k; ++m)
        if (arrivals[m].at.loss < s.val_loss) ++s.place;  // ties share the better place
      if (s.of >= settings.eta) {
        s.keep = (s.of + settings.eta - 1) / settings.eta;
        s.continues = s.place <= s.keep;
      }
      RunHalving& h = out[arrivals[k].run];
      h.rungs.push_back(s);
      if (!s.continues && !h.stop_at) {
        h.stop_at = h.rungs.size() - 1;
        h.why = "stopped by successive halving at " + tokens_words(static_cast<double>(rung)) +
                ": val loss " + loss_text(s.val_loss) + ", " + ordinal(s.place) + " of " +
                std::to_string(s.of) + " at this rung (keeps the best " + std::to_string(s.keep) + ")";
      }
    }
  }
  return out;
}

std::vector<HalvingStop> halving_decisions(const db::Database& db, const std::string& group, double now) {
  std::vector<HalvingStop> out;
  const auto sweep = db::find_sweep(db, group);
  if (!sweep) return out;
  const HalvingSettings settings = parse_halving_json(sweep->halving_json);
  if (!settings.on()) return out;
  // Only a running run can be stopped: a sweep with none (all queued, or all ended) costs one
  // query per tick, not a read of every run's metrics.
  bool any_running = false;
  for (const db::QueueEntry& e : db::list_queue_group(db, group))
    any_running =
        any_running || ((e.state == db::EntryState::kRunning || e.state == db::EntryState::kStarting) &&
                        e.run_id && halving_reason(db, *e.run_id).empty());
  if (!any_running) return out;
  for (const RunHalving& h : halving_standings(db, group, settings, now)) {
    if (!h.stop_at) continue;
    const db::Run run = db::get_run(db, h.run_id);
    if (run.status != db::RunStatus::kRunning) continue;  // ended, or waiting to resume: nothing to stop
    if (!halving_reason(db, h.run_id).empty()) continue;  // stopped by halving once already
    out.push_back({h.run_id, h.why});
  }
  return out;
}

void halving_tick(const StopRunFn& stop, db::Database& db, double now) {
  for (const db::Sweep& sweep : db::list_sweeps(db)) {
    if (!parse_halving_json(sweep.halving_json).on()) continue;
    for (const HalvingStop& d : halving_decisions(db, sweep.name, now)) {
      // Recorded first: a run is stopped at most once, even if this process dies right after.
      db::add_event(db, d.run_id, now, kEventKind, "info", d.why, json{{"sweep", sweep.name}}.dump());
      try {
        stop(d.run_id, d.why);
      } catch (const std::exception& e) {
        db::add_event(db, d.run_id, now, kEventKind, "warning",
                      std::string("successive halving could not stop the run: ") + e.what());
      }
    }
  }
}

std::string halving_reason(const db::Database& db, int64_t run_id) {
  for (const db::EventInfo& e : db::list_events(db, run_id))
    if (e.kind == kEventKind && e.level == "info") return e.message;
  return "";
}

}  // namespace flotilla::runs
