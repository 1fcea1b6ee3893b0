#include "runs/sweep.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>

#include <nlohmann/json.hpp>

#include "db/errors.h"
#include "db/queue.h"
#include "db/run_store.h"
#include "engine/config/config_io.h"
#include "engine/config/config_schema.h"
#include "engine/config/config_validate.h"
#include "engine/core/error.h"
#include "runs/run_setup.h"

namespace flotilla::runs {
namespace {

using nlohmann::json;

constexpr size_t kMaxGridPoints = 1000;

[[noreturn]] void refuse(const std::string& message) { throw_config(message); }

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  const auto e = s.find_last_not_of(" \t");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

// Splits a list on ',' and '|' outside double quotes; a quoted value keeps its quotes (TOML).
std::vector<std::string> split_values(const std::string& text) {
  std::vector<std::string> out;
  std::string cur;
  bool quoted = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '"' && (i == 0 || text[i - 1] != '\\')) quoted = !quoted;
    if (!quoted && (c == ',' || c == '|')) {
      out.push_back(trim(cur));
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(trim(cur));
  return out;
}

std::optional<double> parse_double(const std::string& text) {
  if (text.empty()) return std::nullopt;
  try {
    size_t used = 0;
    const double v = std::stod(text, &used);
    if (used != text.size() || !std::isfinite(v)) return std::nullopt;
    return v;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// A double in [0, 1) from 53 bits of the generator: the same on every standard library.
double unit(std::mt19937_64& gen) { return static_cast<double>(gen() >> 11) * 0x1.0p-53; }

std::vector<std::string> point_overrides(const SweepPoint& p) {
  std::vector<std::string> out;
  for (const auto& [k, v] : p.values) out.push_back(k + "=" + v);
  return out;
}

int ranks_of(const RunConfig& c) { return c.parallel.dp * c.parallel.tp * c.parallel.pp; }

std::string point_label(size_t i, size_t n, const SweepPoint& p) {
  return "point " + std::to_string(i + 1) + " of " + std::to_string(n) + " (" + p.words() + ")";
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The step of the first evaluation at or after `rung` tokens, with `every` steps between them.
int64_t eval_step_for(int64_t rung, int64_t tokens_per_step, int64_t every) {
  return ceil_div(ceil_div(rung, tokens_per_step), every) * every;
}

// Whether each rung of `rungs` gets its own validation loss before the run's last step.
std::string rung_eval_problem(const PlannedPoint& p, const std::vector<int64_t>& rungs) {
  const int64_t tps = tokens_per_step(p.config), every = p.config.eval.every, steps = p.config.train.steps;
  for (size_t r = 0; r < rungs.size(); ++r) {
    const int64_t at = eval_step_for(rungs[r], tps, every);
    if (at >= steps)
      return "the rung at " + tokens_words(static_cast<double>(rungs[r])) +
             " would get its validation loss at step " + std::to_string(at) +
             ", not before the run's last step " + std::to_string(steps) + " (eval.every " +
             std::to_string(every) + " x " + std::to_string(tps) + " tokens per step)";
    if (r + 1 < rungs.size() && at * tps >= rungs[r + 1])
      return "the rungs at " + tokens_words(static_cast<double>(rungs[r])) + " and " +
             tokens_words(static_cast<double>(rungs[r + 1])) + " would share one validation loss (step " +
             std::to_string(at) + ", eval.every " + std::to_string(every) + " x " + std::to_string(tps) +
             " tokens per step)";
  }
  return "";
}

}  // namespace

std::string SweepPoint::words() const {
  std::string out;
  for (const auto& [k, v] : values) out += (out.empty() ? "" : " ") + k + "=" + v;
  return out;
}

std::string sweep_number_text(double v) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  std::string s = buf;
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";  // a TOML float, not an integer
  return s;
}

SweepAxis parse_sweep_axis(const std::string& text) {
  const auto eq = text.find('=');
  if (eq == std::string::npos)
    refuse("--set '" + text + "': expected KEY=V1,V2,... or KEY=LO:HI[:log], e.g. --set optim.lr=1e-4,3e-4");
  SweepAxis axis;
  axis.key = trim(text.substr(0, eq));
  const std::string value = trim(text.substr(eq + 1));
  const ConfigKey* row = find_config_key(axis.key);
  if (!row) {
    RunConfig probe;
    apply_override(probe, axis.key + "=0");  // throws the reader's "unknown key ... (did you mean ...)"
    refuse("--set " + axis.key + ": unknown key");
  }
  if (axis.key == "run.name" || axis.key == "run.out_dir")
    refuse("--set " + axis.key +
           ": a sweep names its runs <sweep>-1, <sweep>-2, ... and gives each its own "
           "folder; it cannot be swept");
  if (value.empty()) refuse("--set " + axis.key + ": no value (KEY=V1,V2,... or KEY=LO:HI[:log])");
  const KeyType type = row->type();
  axis.integer = type == KeyType::kInteger;
  if (type == KeyType::kInteger || type == KeyType::kFloat) {
    std::vector<std::string> parts;
    size_t start = 0;
    for (size_t c; (c = value.find(':', start)) != std::string::npos; start = c + 1)
      parts.push_back(trim(value.substr(start, c - start)));
    parts.push_back(trim(value.substr(start)));
    if (parts.size() == 2 || parts.size() == 3) {
      const auto lo = parse_double(parts[0]), hi = parse_double(parts[1]);
      if (!lo || !hi || (parts.size() == 3 && parts[2] != "log"))
        refuse("--set " + text + ": a range is LO:HI or LO:HI:log with numbers, e.g. " + axis.key +
               (axis.integer ? "=4:64:log" : "=1e-4:1e-2:log"));
      if (!(*lo < *hi)) refuse("--set " + text + ": the range's low end must be below its high end");
      axis.kind = parts.size() == 3 ? SweepAxis::Kind::kLogRange : SweepAxis::Kind::kRange;
      if (axis.kind == SweepAxis::Kind::kLogRange && !(*lo > 0))
        refuse("--set " + text + ": a log range needs a low end above 0");
      axis.lo = *lo;
      axis.hi = *hi;
      // Both ends must be values the key takes (its type; its range is validate()'s, per point).
      RunConfig probe;
      apply_override(probe, axis.key + "=" +
                                (axis.integer ? std::to_string(std::llround(*lo)) : sweep_number_text(*lo)));
      return axis;
    }
  }
  axis.values = split_values(value);
  for (const auto& v : axis.values) {
    if (v.empty()) refuse("--set " + text + ": an empty value in the list");
    RunConfig probe;
    apply_override(probe, axis.key + "=" + v);  // the value's type, as `flotilla run --set` checks it
  }
  return axis;
}

std::vector<SweepPoint> expand_sweep(const SweepSpec& spec) {
  if (spec.axes.empty()) refuse("a sweep needs at least one --set KEY=V1,V2,...");
  std::vector<SweepPoint> points;
  if (spec.random <= 0) {
    size_t count = 1;
    for (const auto& a : spec.axes) {
      if (a.kind != SweepAxis::Kind::kList)
        refuse("--set " + a.key + "=" + sweep_number_text(a.lo) + ":" + sweep_number_text(a.hi) +
               " is a range: ranges need --random N (a grid takes lists: --set " + a.key + "=V1,V2,...)");
      count *= a.values.size();
      if (count > kMaxGridPoints)
        refuse("the grid has more than " + std::to_string(kMaxGridPoints) +
               " points: sweep fewer values, or sample them with --random N");
    }
    std::vector<size_t> index(spec.axes.size(), 0);
    for (size_t n = 0; n < count; ++n) {
      SweepPoint p;
      for (size_t a = 0; a < spec.axes.size(); ++a)
        p.values.emplace_back(spec.axes[a].key, spec.axes[a].values[index[a]]);
      points.push_back(std::move(p));
      for (size_t a = spec.axes.size(); a-- > 0;) {  // the last axis fastest
        if (++index[a] < spec.axes[a].values.size()) break;
        index[a] = 0;
      }
    }
    return points;
  }
  if (static_cast<size_t>(spec.random) > kMaxGridPoints)
    refuse("--random " + std::to_string(spec.random) + ": at most " + std::to_string(kMaxGridPoints) +
           " points");
  std::mt19937_64 gen(spec.seed);
  for (int n = 0; n < spec.random; ++n) {
    SweepPoint p;
    for (const auto& a : spec.axes) {
      const double u = unit(gen);
      std::string text;
      if (a.kind == SweepAxis::Kind::kList) {
        text = a.values[std::min(a.values.size() - 1,
                                 static_cast<size_t>(u * static_cast<double>(a.values.size())))];
      } else {
        const double v = a.kind == SweepAxis::Kind::kRange
                             ? a.lo + u * (a.hi - a.lo)
                             : std::exp(std::log(a.lo) + u * (std::log(a.hi) - std::log(a.lo)));
        text = a.integer ? std::to_string(std::llround(v)) : sweep_number_text(v);
      }
      p.values.emplace_back(a.key, text);
    }
    points.push_back(std::move(p));
  }
  return points;
}

SweepPlan plan_sweep(const std::string& config_path, const std::string& name, const SweepSpec& spec,
                     const std::optional<HalvingRequest>& halving) {
  check_new_run_name(name);  // the sweep's name starts every run's name
  SweepPlan plan;
  plan.name = name;
  plan.config_path = config_path;
  plan.spec = spec;
  const RunConfig base = load_config_file(config_path);
  if (!base.run.out_dir.empty())
    refuse(config_path + ": run.out_dir is set (" + base.run.out_dir +
           "): every point of the sweep would write to that one folder; remove it (each run gets "
           "<runs root>/<its name>)");
  const std::vector<SweepPoint> points = expand_sweep(spec);
  for (size_t i = 0; i < points.size(); ++i) {
    PlannedPoint pp;
    pp.name = name + "-" + std::to_string(i + 1);
    pp.point = points[i];
    pp.config = base;
    try {
      apply_overrides(pp.config, point_overrides(points[i]));
      pp.config.run.name = pp.name;
      check_new_run_name(pp.name);
      validate_run_config(pp.config, ranks_of(pp.config));
    } catch (const Error& e) {
      refuse(point_label(i, points.size(), points[i]) + ": " + e.what());
    }
    pp.total_tokens = pp.config.train.steps * tokens_per_step(pp.config);
    plan.points.push_back(std::move(pp));
  }

  if (halving) {
    HalvingSettings& h = plan.halving;
    if (halving->eta < 2) refuse("--eta " + std::to_string(halving->eta) + ": needs 2 or more");
    h.eta = halving->eta;
    h.auto_rungs = halving->auto_rungs;
    int64_t shortest = INT64_MAX, step_tokens = 1;
    for (const auto& p : plan.points) {
      shortest = std::min(shortest, p.total_tokens);
      step_tokens = std::max(step_tokens, tokens_per_step(p.config));
    }
    if (h.auto_rungs) {
      h.rungs = auto_rungs(shortest, h.eta, step_tokens);
      if (h.rungs.empty())
        refuse("--halving auto: the runs are too short for a rung (" +
               tokens_words(static_cast<double>(shortest)) +
               " each); give the rungs in tokens: --halving 4096,16384");
    } else {
      h.rungs = halving->rungs;
      std::sort(h.rungs.begin(), h.rungs.end());
      h.rungs.erase(std::unique(h.rungs.begin(), h.rungs.end()), h.rungs.end());
      if (h.rungs.empty() || h.rungs.front() <= 0) refuse("--halving: rungs are positive token counts");
      if (h.rungs.back() >= shortest)
        refuse("--halving: the rung at " + tokens_words(static_cast<double>(h.rungs.back())) +
               " is not before the end of the shortest run (" + tokens_words(static_cast<double>(shortest)) +
               ")");
    }
    // Every rung needs a validation loss of its own. eval.every 0 (only at the end) is set; a
    // given interval too coarse for the rungs is refused with the figures.
    bool set_every = false;
    int64_t every_set = 0;
    for (size_t i = 0; i < plan.points.size(); ++i) {
      PlannedPoint& p = plan.points[i];
      if (p.config.eval.every == 0) {
        const int64_t tps = tokens_per_step(p.config);
        int64_t g = 0;
        for (int64_t r : h.rungs) g = std::gcd(g, ceil_div(r, tps));
        const int64_t first = ceil_div(h.rungs.front(), tps);
        p.config.eval.every = std::max<int64_t>(1, g * 4 >= first ? g : first);
        set_every = true;
        every_set = std::max(every_set, p.config.eval.every);
        try {
          validate_run_config(p.config, ranks_of(p.config));
        } catch (const Error& e) {
          refuse(point_label(i, plan.points.size(), p.point) +
                 ": successive halving needs a validation loss at "
                 "each rung: " +
                 e.what());
        }
      }
      if (const std::string why = rung_eval_problem(p, h.rungs); !why.empty())
        refuse(point_label(i, plan.points.size(), p.point) +
               ": successive halving needs a validation loss at "
               "each rung, but " +
               why + ": set a smaller eval.every or other rungs");
    }
    if (set_every)
      plan.notes.push_back("eval.every was 0 (validation only at the end): set to " +
                           std::to_string(every_set) +
                           " steps so that each rung has its own validation loss");
  }
  for (auto& p : plan.points) p.config_toml = config_to_toml(p.config);
  return plan;
}

std::string sweep_spec_json(const SweepPlan& plan) {
  json axes = json::array();
  for (const auto& a : plan.spec.axes) {
    json j{{"key", a.key}};
    if (a.kind == SweepAxis::Kind::kList) {
      j["values"] = a.values;
    } else {
      j["lo"] = a.lo;
      j["hi"] = a.hi;
      j["scale"] = a.kind == SweepAxis::Kind::kLogRange ? "log" : "linear";
    }
    axes.push_back(j);
  }
  json points = json::array();
  for (const auto& p : plan.points) points.push_back({{"name", p.name}, {"values", p.point.words()}});
  json j{{"axes", axes}, {"points", points}, {"notes", plan.notes}};
  if (plan.spec.random > 0) {
    j["random"] = plan.spec.random;
    j["seed"] = plan.spec.seed;
  }
  return j.dump();
}

std::vector<std::pair<std::string, std::string>> sweep_points_of(const std::string& spec_json) {
  std::vector<std::pair<std::string, std::string>> out;
  const json j = json::parse(spec_json, nullptr, false);
  if (!j.is_object() || !j.contains("points") || !j["points"].is_array()) return out;
  for (const auto& p : j["points"])
    if (p.is_object()) out.emplace_back(p.value("name", ""), p.value("values", ""));
  return out;
}

std::string free_sweep_name(const db::Database& db, const std::string& base) {
  for (int i = 1;; ++i) {
    const std::string name = i == 1 ? base : base + "-" + std::to_string(i);
    if (db::find_sweep(db, name) || db::find_run(db, name + "-1")) continue;
    try {
      db::get_queue_entry(db, name + "-1");
      continue;  // an entry holds the first point's name
    } catch (const db::DbError&) {
      return name;
    }
  }
}

std::vector<int64_t> queue_sweep(db::Database& db, const SweepPlan& plan, const SweepQueueOptions& options,
                                 double now) {
  std::vector<int64_t> ids;
  db::write_tx(db, [&] {
    db::Sweep row;
    row.name = plan.name;
    row.config_path = plan.config_path;
    row.spec_json = sweep_spec_json(plan);
    row.halving_json = halving_json(plan.halving);
    row.created_at = now;
    db::add_sweep(db, row);
    for (const auto& p : plan.points) {
      db::NewQueueEntry e;
      e.name = p.name;
      e.explicit_name = true;  // a taken name refuses the whole sweep (rolled back)
      e.config_toml = p.config_toml;
      e.config_path = plan.config_path;
      e.places = options.places;
      e.priority = options.priority;
      e.deadline = options.deadline;
      e.max_usd = options.max_usd;
      e.group = plan.name;
      e.max_restarts = options.max_restarts;
      ids.push_back(db::add_queue_entry(db, e, now));
    }
  });
  return ids;
}

}  // namespace flotilla::runs
