// `flotilla sweep CONFIG --set KEY=V1,V2 ...`: one queued run per point of a grid (or of N random
// points over ranges) in one named group, with optional successive halving; `sweep list`,
// `sweep show NAME` and `sweep compare NAME` (docs/cli.md, docs/scheduling.md).
//
// Decision: this file parses and prints; expanding, validating and queueing are runs/sweep.h's,
// deciding who halving stops is runs/halving.h's (the scheduler applies it). Everything is checked
// before the store is written, so a refused sweep leaves nothing queued.
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <random>

#include <nlohmann/json.hpp>

#include "app/cli/cli.h"
#include "db/errors.h"
#include "db/queue.h"
#include "db/run_store.h"
#include "engine/config/config_io.h"
#include "engine/core/error.h"
#include "runs/halving.h"
#include "runs/queue_place.h"
#include "runs/run_speed.h"
#include "runs/sweep.h"

namespace flotilla::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// "4096", "4k", "16.4k", "1.5M" -> tokens.
int64_t parse_tokens(const std::string& text) {
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  const std::string unit = end ? std::string(end) : "";
  if (unit == "k" || unit == "K")
    v *= 1e3;
  else if (unit == "M" || unit == "m")
    v *= 1e6;
  else if (unit == "G" || unit == "g")
    v *= 1e9;
  else if (!unit.empty())
    v = -1;
  if (text.empty() || !std::isfinite(v) || v < 1)
    throw UsageError("--halving: '" + text + "' is not a token count (e.g. 4096, 16k, 1.5M)");
  return static_cast<int64_t>(std::llround(v));
}

// The place key as `flotilla queue add --on` takes it (runs/queue_place.h), normalised.
std::string check_place(const std::string& key) {
  try {
    return runs::parse_place_key(key).key();
  } catch (const Error& e) {
    throw UsageError(std::string("--on: ") + e.what());
  }
}

int sweep_list(const Context& ctx, ArgReader& args) {
  const bool as_json = args.flag("--json");
  if (!args.positionals().empty()) throw UsageError("sweep list takes no arguments");
  const db::Database db = open_store(ctx, "flotilla sweep list");
  json out = json::array();
  const auto sweeps = db::list_sweeps(db);
  if (!as_json && sweeps.empty()) std::printf("no sweeps (flotilla sweep CONFIG --set KEY=V1,V2 ...)\n");
  if (!as_json && !sweeps.empty())
    std::printf("%-20s %-16s %6s %6s %8s %7s  %s\n", "NAME", "CREATED", "POINTS", "DONE", "RUNNING", "HALVED",
                "HALVING");
  for (const db::Sweep& s : sweeps) {
    const auto entries = db::list_queue_group(db, s.name);
    int done = 0, running = 0, halved = 0;
    for (const auto& e : entries) {
      if (db::entry_finished(e.state)) ++done;
      if (e.state == db::EntryState::kRunning || e.state == db::EntryState::kStarting) ++running;
      if (e.run_id && !runs::halving_reason(db, *e.run_id).empty()) ++halved;
    }
    const runs::HalvingSettings h = runs::parse_halving_json(s.halving_json);
    std::string hw = "off";
    if (h.on()) {
      hw = "eta " + std::to_string(h.eta) + " at";
      for (size_t i = 0; i < h.rungs.size(); ++i)
        hw += (i ? ", " : " ") + runs::tokens_words(static_cast<double>(h.rungs[i]));
    }
    if (as_json) {
      out.push_back({{"name", s.name},
                     {"config_path", s.config_path},
                     {"created_at", s.created_at},
                     {"points", entries.size()},
                     {"finished", done},
                     {"running", running},
                     {"stopped_by_halving", halved},
                     {"halving", json::parse(s.halving_json, nullptr, false)}});
    } else {
      std::printf("%-20s %-16s %6zu %6d %8d %7d  %s\n", s.name.c_str(), format_time(s.created_at).c_str(),
                  entries.size(), done, running, halved, hw.c_str());
    }
  }
  if (as_json) std::printf("%s\n", out.dump(2).c_str());
  return kExitOk;
}

int sweep_show(const Context& ctx, ArgReader& args) {
  const bool as_json = args.flag("--json");
  const auto pos = args.positionals();
  if (pos.size() != 1) throw UsageError("sweep show needs the sweep's NAME (flotilla sweep list)");
  const db::Database db = open_store(ctx, "flotilla sweep show");
  const auto sweep = db::find_sweep(db, pos[0]);
  if (!sweep)
    throw db::DbError(db::DbErrorKind::kNotFound, "no sweep named '" + pos[0] + "' (flotilla sweep list)");
  const runs::HalvingSettings h = runs::parse_halving_json(sweep->halving_json);
  const auto entries = db::list_queue_group(db, sweep->name);
  const auto points = runs::sweep_points_of(sweep->spec_json);
  std::vector<runs::RunHalving> standings;
  if (h.on()) standings = runs::halving_standings(db, sweep->name, h, 0);

  json jpoints = json::array();
  struct Line {
    std::string name, values, entry, state, run, status, best, halving;
  };
  std::vector<Line> lines;
  for (const db::QueueEntry& e : entries) {
    Line l;
    l.name = e.name;
    for (const auto& [n, w] : points)
      if (n == e.name) l.values = w;
    l.entry = std::to_string(e.id);
    l.state = db::entry_state_name(e.state);
    std::optional<double> best;
    json jp{{"name", e.name}, {"values", l.values}, {"entry", e.id}, {"state", l.state}};
    if (e.run_id) {
      const db::Run run = db::get_run(db, *e.run_id);
      const db::RunSummary sum = runs::run_summary(db, run.id);
      best = sum.best_val_loss;
      l.run = run.name;
      l.status = db::to_string(run.status);
      l.halving = runs::halving_reason(db, run.id);
      if (l.halving.empty())
        for (const auto& s : standings)
          if (s.run_id == run.id && !s.rungs.empty())
            l.halving = "reached " + runs::tokens_words(static_cast<double>(s.rungs.back().rung)) + ": " +
                        std::to_string(s.rungs.back().place) + " of " + std::to_string(s.rungs.back().of);
      jp["run"] = run.name;
      jp["run_id"] = run.id;
      jp["status"] = l.status;
    } else {
      jp["run"] = nullptr;
    }
    if (best) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.4f", *best);
      l.best = buf;
    }
    jp["best_val_loss"] = best ? json(*best) : json(nullptr);
    jp["stopped_by_halving"] = runs::halving_reason(db, e.run_id.value_or(0));
    jpoints.push_back(jp);
    lines.push_back(l);
  }
  if (as_json) {
    json j{{"name", sweep->name},
           {"config_path", sweep->config_path},
           {"created_at", sweep->created_at},
           {"spec", json::parse(sweep->spec_json, nullptr, false)},
           {"halving", json::parse(sweep->halving_json, nullptr, false)},
           {"points", jpoints},
           {"compare", "flotilla compare --group " + sweep->name}};
    std::printf("%s\n", j.dump(2).c_str());
    return kExitOk;
  }
  std::printf("sweep %s: %zu points from %s, created %s\n", sweep->name.c_str(), entries.size(),
              sweep->config_path.c_str(), format_time(sweep->created_at).c_str());
  if (h.on()) {
    std::printf("successive halving: keeps the best 1/%d at", h.eta);
    for (size_t i = 0; i < h.rungs.size(); ++i)
      std::printf("%s%s", i ? ", " : " ", runs::tokens_words(static_cast<double>(h.rungs[i])).c_str());
    std::printf("%s\n", h.auto_rungs ? " (auto)" : "");
  } else {
    std::printf("successive halving: off\n");
  }
  std::printf("%-20s %-32s %5s %-9s %-10s %10s  %s\n", "POINT", "VALUES", "ENTRY", "STATE", "RUN STATUS",
              "BEST VAL", "HALVING");
  for (const Line& l : lines)
    std::printf("%-20s %-32s %5s %-9s %-10s %10s  %s\n", l.name.c_str(), l.values.c_str(), l.entry.c_str(),
                l.state.c_str(), l.status.empty() ? "-" : l.status.c_str(),
                l.best.empty() ? "-" : l.best.c_str(), l.halving.empty() ? "-" : l.halving.c_str());
  std::printf("compare: flotilla sweep compare %s (or flotilla compare --group %s)\n", sweep->name.c_str(),
              sweep->name.c_str());
  return kExitOk;
}

int sweep_add(const Context& ctx, ArgReader& args) {
  const std::vector<std::string> sets = args.values("--set");
  const std::optional<double> random = args.number("--random");
  const std::optional<double> seed = args.number("--seed");
  const std::optional<std::string> name_arg = args.value("--name");
  const std::optional<std::string> halving_arg = args.value("--halving");
  const std::optional<double> eta = args.number("--eta");
  std::vector<std::string> places = args.values("--on");
  const std::optional<double> priority = args.number("--priority");
  const std::optional<std::string> deadline_arg = args.value("--deadline");
  const std::optional<double> max_usd = args.number("--max-usd");
  const std::optional<double> max_restarts = args.number("--max-restarts");
  const auto pos = args.positionals();
  if (pos.size() != 1) throw UsageError("sweep needs exactly one CONFIG.toml (flotilla sweep --help)");
  if (sets.empty())
    throw UsageError("sweep needs at least one --set KEY=V1,V2,... (or KEY=LO:HI with --random N)");
  if (random && (*random < 1 || *random != std::floor(*random)))
    throw UsageError("--random needs a whole number of points");
  if (seed && !random) throw UsageError("--seed only with --random N");
  if (seed && (*seed < 0 || *seed != std::floor(*seed) || *seed > 9007199254740992.0))
    throw UsageError("--seed needs a whole number from 0 to 2^53");
  if (eta && !halving_arg) throw UsageError("--eta only with --halving");
  if (eta && (*eta < 2 || *eta != std::floor(*eta)))
    throw UsageError("--eta needs a whole number, 2 or more");
  if (priority && *priority != std::floor(*priority)) throw UsageError("--priority needs a whole number");
  if (max_usd && !(*max_usd > 0)) throw UsageError("--max-usd needs a positive number of dollars");
  if (max_restarts &&
      (*max_restarts < 0 || *max_restarts > 100 || *max_restarts != std::floor(*max_restarts)))
    throw UsageError("--max-restarts needs a whole number from 0 to 100");
  for (auto& p : places) p = check_place(p);
  const double now = db::now_seconds();
  const std::optional<double> deadline =
      deadline_arg ? std::optional<double>(parse_deadline(*deadline_arg, now)) : std::nullopt;
  if (deadline && *deadline <= now) throw UsageError("--deadline '" + *deadline_arg + "' is already past");
  const std::string config_path = fs::absolute(pos[0]).string();

  runs::SweepSpec spec;
  std::optional<runs::HalvingRequest> halving;
  if (halving_arg) {
    halving = runs::HalvingRequest{};
    if (*halving_arg == "auto") {
      halving->auto_rungs = true;
    } else {
      size_t start = 0;
      for (size_t c;; start = c + 1) {
        c = halving_arg->find(',', start);
        halving->rungs.push_back(parse_tokens(halving_arg->substr(start, c - start)));
        if (c == std::string::npos) break;
      }
    }
    if (eta) halving->eta = static_cast<int>(*eta);
  }
  try {
    for (const auto& s : sets) spec.axes.push_back(runs::parse_sweep_axis(s));
    if (random) {
      spec.random = static_cast<int>(*random);
      spec.seed = seed ? static_cast<uint64_t>(*seed) : std::random_device{}() & 0xffffffffu;
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "flotilla: %s\nnothing was queued\n", e.what());
    return static_cast<int>(e.code());
  }

  db::Database db = open_store(ctx, "flotilla sweep");
  std::string name;
  runs::SweepPlan plan;
  try {
    if (name_arg) {
      name = *name_arg;
    } else {
      // The config's run.name, made free: <run.name>, <run.name>-2, ...
      name = runs::free_sweep_name(db, load_config_file(config_path).run.name);
    }
    plan = runs::plan_sweep(config_path, name, spec, halving);
  } catch (const Error& e) {
    std::fprintf(stderr, "flotilla: %s\nnothing was queued\n", e.what());
    return static_cast<int>(e.code());
  }
  runs::SweepQueueOptions options;
  options.places = places;
  options.priority = priority ? static_cast<int64_t>(*priority) : 0;
  options.deadline = deadline;
  options.max_usd = max_usd;
  if (max_restarts) options.max_restarts = static_cast<int64_t>(*max_restarts);
  std::vector<int64_t> ids;
  try {
    ids = runs::queue_sweep(db, plan, options, now);
  } catch (const db::DbError& e) {  // a taken name: the transaction rolled everything back
    throw db::DbError(e.kind(), std::string(e.what()) + "\nnothing was queued");
  }

  std::printf("sweep %s: %zu points from %s (%s)\n", plan.name.c_str(), plan.points.size(),
              config_path.c_str(),
              spec.random > 0 ? ("random, seed " + std::to_string(spec.seed)).c_str() : "grid");
  for (size_t i = 0; i < plan.points.size(); ++i)
    std::printf("  entry %-5lld %-24s %s\n", static_cast<long long>(ids[i]), plan.points[i].name.c_str(),
                plan.points[i].point.words().c_str());
  if (plan.halving.on()) {
    std::printf("successive halving: keeps the best 1/%d at", plan.halving.eta);
    for (size_t i = 0; i < plan.halving.rungs.size(); ++i)
      std::printf("%s%s", i ? ", " : " ",
                  runs::tokens_words(static_cast<double>(plan.halving.rungs[i])).c_str());
    std::printf("; a run that falls out is stopped with a checkpoint\n");
  }
  for (const auto& n : plan.notes) std::printf("note: %s\n", n.c_str());
  std::printf(
      "queued: the scheduler starts them (flotilla queue serve, or the app); follow with flotilla sweep "
      "show %s\n",
      plan.name.c_str());
  return kExitOk;
}

}  // namespace

int cmd_sweep(const Context& ctx) {
  ArgReader args(ctx.args, "sweep");
  if (args.flag("--help")) {
    std::printf(
        "Usage: flotilla sweep CONFIG.toml --set KEY=V1,V2,... [--set ...] [--name NAME]\n"
        "                      [--random N [--seed S]] [--halving auto|T1,T2,... [--eta 2]]\n"
        "                      [--on PLACE]... [--priority N] [--deadline TIME] [--max-usd USD]\n"
        "                      [--max-restarts K]\n"
        "       flotilla sweep list [--json]\n"
        "       flotilla sweep show NAME [--json]\n"
        "       flotilla sweep compare NAME [--csv|--json]\n\n"
        "Queues one run per point, named NAME-1, NAME-2, ... (NAME: --name, else the config's run.name),\n"
        "in the group NAME; the scheduler (flotilla queue serve, or the app) starts them.\n"
        "Without --random the points are the grid: every combination of the --set lists. With --random N,\n"
        "N points are drawn (seeded: --seed S, else a seed that is printed): KEY=LO:HI uniform,\n"
        "KEY=LO:HI:log log-uniform, KEY=a|b|c or KEY=a,b,c one of the values; integer keys are rounded.\n"
        "A --set with one value applies to every point. A value with ',' or '|' is quoted: KEY=\"a,b\".\n"
        "Every key and every point's config are checked as flotilla run checks them before anything is\n"
        "queued: the first bad point is named with its values, and nothing is queued.\n\n"
        "--halving stops the runs that fall behind (successive halving, asynchronous): at each rung (a\n"
        "token count: 4096, 16k, 1.5M; auto: each run's total tokens / eta^3, / eta^2, / eta) a run goes\n"
        "on only when its validation loss is among the best 1/eta (rounded up) of the runs that reached\n"
        "the rung so far (fewer than eta there: it goes on); else it is stopped with a checkpoint and\n"
        "the reason is recorded on it. eval.every 0 is set so that each rung has a validation loss.\n\n"
        "--on PLACE (local, node:NAME, nodes:A,B, cluster:NAME[/PARTITION]; repeatable), --priority,\n"
        "--deadline (+3h, \"YYYY-MM-DD HH:MM\", unix seconds) and --max-usd (per run) are as for\n"
        "flotilla queue add, for every point.\n");
    return kExitOk;
  }
  const std::vector<std::string>& raw = ctx.args;
  if (!raw.empty() && raw[0] == "list") {
    ArgReader sub(std::vector<std::string>(raw.begin() + 1, raw.end()), "sweep list");
    return sweep_list(ctx, sub);
  }
  if (!raw.empty() && raw[0] == "show") {
    ArgReader sub(std::vector<std::string>(raw.begin() + 1, raw.end()), "sweep show");
    return sweep_show(ctx, sub);
  }
  if (!raw.empty() && raw[0] == "compare") {
    if (raw.size() < 2 || looks_like_option(raw[1]))
      throw UsageError("sweep compare needs the sweep's NAME (flotilla sweep list)");
    Context c = ctx;
    c.args = {"--group", raw[1]};
    c.args.insert(c.args.end(), raw.begin() + 2, raw.end());
    c.command = "compare";
    return cmd_compare(c);
  }
  return sweep_add(ctx, args);
}

}  // namespace flotilla::cli
