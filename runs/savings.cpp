// Scheduler savings (see savings.h).
#include "runs/savings.h"

#include <nlohmann/json.hpp>

#include <set>

#include "db/costs.h"
#include "db/errors.h"
#include "db/node_power.h"
#include "db/queue.h"
#include "db/run_store.h"
#include "runs/figures.h"

namespace flotilla::runs {
namespace {

using nlohmann::json;

struct PlaceFigures {
  std::string key;
  bool fits = false;
  std::optional<double> usd;     // predicted; nullopt when unpriced
  double seconds = 0;            // wait + running
  std::optional<double> wait_s;  // nullopt: unknown (busy with runs whose end is not known)
};

std::optional<double> number_or_null(const json& o, const char* name) {
  const auto it = o.find(name);
  if (it == o.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

std::vector<PlaceFigures> decision_places(const std::string& text, std::string* chosen) {
  std::vector<PlaceFigures> out;
  const json j = json::parse(text, nullptr, false);
  if (!j.is_object()) return out;
  if (auto c = j.find("chosen"); c != j.end() && c->is_string()) *chosen = c->get<std::string>();
  const auto places = j.find("places");
  if (places == j.end() || !places->is_array()) return out;
  for (const json& p : *places) {
    if (!p.is_object()) continue;
    PlaceFigures f;
    if (auto k = p.find("key"); k != p.end() && k->is_string()) f.key = k->get<std::string>();
    if (auto fits = p.find("fits"); fits != p.end() && fits->is_boolean()) f.fits = fits->get<bool>();
    f.usd = number_or_null(p, "usd");
    f.seconds = number_or_null(p, "seconds").value_or(0);
    f.wait_s = number_or_null(p, "wait_s");
    out.push_back(std::move(f));
  }
  return out;
}

// The run's measured cost and running time, with the runs it resumed (a requeued entry's run
// resumes its earlier run: the work it kept was paid for there).
struct Measured {
  double usd = 0, running_s = 0;
  bool priced = false;
};
Measured measured_chain(const db::Database& db, int64_t run_id, double now) {
  Measured m;
  std::set<int64_t> seen;
  std::optional<int64_t> id = run_id;
  while (id && seen.insert(*id).second) {
    const db::Run run = db::get_run(db, *id);
    const auto accruals = db::run_accruals(db, run.id);
    m.usd += db::run_cost_usd(db, run.id, now);
    m.running_s += db::run_running_seconds(db, run.id, now);
    m.priced = m.priced || db::any_priced(accruals);
    id = run.parent_kind == "resume" ? run.parent_id : std::nullopt;
  }
  return m;
}

}  // namespace

Savings scheduler_savings(const db::Database& db, double now) {
  if (now <= 0) now = db::now_seconds();
  Savings s;
  for (const db::QueueEntry& e : db::list_queue(db, /*include_finished=*/true)) {
    s.preemption_usd += e.lost_usd;
    s.preemption_steps += e.lost_steps;
    s.restarts += e.starts > 1 ? e.starts - 1 : 0;
    if (!e.run_id) continue;
    if (!db::entry_finished(e.state)) {
      ++s.unfinished;
      continue;
    }
    std::optional<db::Run> run;
    try {
      run = db::get_run(db, *e.run_id);
    } catch (const db::DbError&) {
      continue;  // the run was deleted: nothing measured to compare
    }
    RunSavings r;
    r.entry_id = e.id;
    r.run_id = run->id;
    r.run = run->name;
    r.lost_usd = e.lost_usd;
    r.lost_steps = e.lost_steps;
    r.restarts = e.starts > 1 ? e.starts - 1 : 0;
    const std::vector<PlaceFigures> places = decision_places(e.decision_json, &r.chosen);
    if (r.chosen.empty()) r.chosen = e.place;
    const PlaceFigures* chosen = nullptr;
    const PlaceFigures* dearest = nullptr;
    const PlaceFigures* first_free = nullptr;
    for (const PlaceFigures& p : places) {
      if (p.key == r.chosen) chosen = &p;
      if (!p.fits) continue;
      if (p.usd && (!dearest || *p.usd > *dearest->usd)) dearest = &p;
      if (!first_free && p.wait_s && *p.wait_s <= 0) first_free = &p;  // an unknown wait is not free
    }
    const Measured m = measured_chain(db, run->id, now);
    if (chosen) r.predicted_usd = chosen->usd;
    // This machine with no price is predicted $0 (placement's rule): its measured $0 is known.
    if (m.priced || (r.predicted_usd && *r.predicted_usd == 0)) r.measured_usd = m.usd;
    r.measured_priced = m.priced;
    const double predicted_run_s = chosen ? chosen->seconds - chosen->wait_s.value_or(0) : 0;
    if (r.measured_usd && r.predicted_usd && *r.predicted_usd > 0) {
      r.scale = *r.measured_usd / *r.predicted_usd;
      r.scale_basis = "cost";
    } else if (predicted_run_s > 0 && m.running_s > 0) {
      r.scale = m.running_s / predicted_run_s;
      r.scale_basis = "time";
    } else {
      r.scale_basis = "none";
    }
    if (dearest) {
      r.most_expensive = dearest->key;
      r.most_expensive_usd = *dearest->usd * r.scale;
    }
    if (first_free) {
      r.first_free = first_free->key;
      if (first_free->usd) r.first_free_usd = *first_free->usd * r.scale;
    }
    if (r.measured_usd) {
      s.measured_usd += *r.measured_usd;
      if (r.most_expensive_usd) {
        r.saved_vs_most_expensive = *r.most_expensive_usd - *r.measured_usd;
        s.saved_vs_most_expensive += *r.saved_vs_most_expensive;
        ++s.counted_vs_most_expensive;
      }
      if (r.first_free_usd) {
        r.saved_vs_first_free = *r.first_free_usd - *r.measured_usd;
        s.saved_vs_first_free += *r.saved_vs_first_free;
        ++s.counted_vs_first_free;
      }
    }
    s.runs.push_back(std::move(r));
  }
  s.idle_usd = db::idle_cost_usd(db, 0, now);
  return s;
}

namespace {

std::string plural(int64_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

}  // namespace

std::string savings_summary(const Savings& s) {
  std::string out;
  if (s.runs.empty()) {
    out = "No run the scheduler started has finished yet";
    if (s.unfinished > 0) out += " (" + plural(s.unfinished, "run", "runs") + " still running)";
    out += ".";
  } else {
    out = "Scheduler savings on " + plural(static_cast<int64_t>(s.runs.size()), "run", "runs") +
          " (measured " + usd_text(s.measured_usd) + "): " + usd_text(s.saved_vs_most_expensive) +
          " against the most expensive place that fitted (" +
          plural(s.counted_vs_most_expensive, "run", "runs") + "), " + usd_text(s.saved_vs_first_free) +
          " against the first free place (" + plural(s.counted_vs_first_free, "run", "runs") + ").";
    if (s.unfinished > 0) out += " " + plural(s.unfinished, "run", "runs") + " still running, not counted.";
  }
  out += " Preemptions cost " + usd_text(s.preemption_usd) + " (" +
         plural(s.restarts, "restart", "restarts") + ", " + plural(s.preemption_steps, "step", "steps") +
         " lost); idle machines cost " + usd_text(s.idle_usd) + ".";
  return out;
}

std::vector<std::string> savings_columns() {
  return {"Run",         "Ran on",
          "Measured",    "Most expensive (scaled)",
          "Saved vs it", "First free (scaled)",
          "Saved vs it", "Lost to preemption"};
}

std::vector<std::string> savings_cells(const RunSavings& r) {
  auto place_usd = [](const std::string& key, std::optional<double> usd) {
    if (key.empty()) return std::string("-");
    return key + " " + usd_text(usd);
  };
  auto saved = [](std::optional<double> usd) { return usd ? usd_text(*usd) : std::string("-"); };
  return {r.run,
          r.chosen.empty() ? std::string("-") : r.chosen,
          r.measured_usd && !r.measured_priced ? std::string("$0 (no price set)") : usd_text(r.measured_usd),
          place_usd(r.most_expensive, r.most_expensive_usd),
          saved(r.saved_vs_most_expensive),
          place_usd(r.first_free, r.first_free_usd),
          saved(r.saved_vs_first_free),
          r.restarts > 0 || r.lost_usd > 0
              ? usd_text(r.lost_usd) + " (" + plural(r.restarts, "restart", "restarts") + ")"
              : std::string("-")};
}

std::string savings_json(const Savings& s) {
  auto opt = [](std::optional<double> v) { return v ? json(*v) : json(nullptr); };
  json runs = json::array();
  for (const RunSavings& r : s.runs)
    runs.push_back({{"entry", r.entry_id},
                    {"run", r.run},
                    {"run_id", r.run_id},
                    {"chosen", r.chosen},
                    {"predicted_usd", opt(r.predicted_usd)},
                    {"measured_usd", opt(r.measured_usd)},
                    {"scale", r.scale},
                    {"scale_basis", r.scale_basis},
                    {"most_expensive", r.most_expensive},
                    {"most_expensive_usd", opt(r.most_expensive_usd)},
                    {"first_free", r.first_free},
                    {"first_free_usd", opt(r.first_free_usd)},
                    {"saved_vs_most_expensive", opt(r.saved_vs_most_expensive)},
                    {"saved_vs_first_free", opt(r.saved_vs_first_free)},
                    {"lost_usd", r.lost_usd},
                    {"lost_steps", r.lost_steps},
                    {"restarts", r.restarts}});
  const json out{{"runs", runs},
                 {"measured_usd", s.measured_usd},
                 {"saved_vs_most_expensive", s.saved_vs_most_expensive},
                 {"counted_vs_most_expensive", s.counted_vs_most_expensive},
                 {"saved_vs_first_free", s.saved_vs_first_free},
                 {"counted_vs_first_free", s.counted_vs_first_free},
                 {"preemption_usd", s.preemption_usd},
                 {"preemption_steps", s.preemption_steps},
                 {"restarts", s.restarts},
                 {"idle_usd", s.idle_usd},
                 {"unfinished", s.unfinished},
                 {"summary", savings_summary(s)}};
  return out.dump(2);
}

}  // namespace flotilla::runs
