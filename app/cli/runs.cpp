// `flotilla runs list|show|export|resume|attach|fork|checkpoint|checkpoints|fetch|delete` over the
// run store and the runs service.
//
// Decision: a command on one run (resume, attach, fork, checkpoint, checkpoints, fetch, delete)
// asks the runs service (runs/service.h), which knows where the run is; this file never asks what
// kind of run it holds. What a run cannot do now comes back as runs::Refusal: printed, exit 9.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>

#include <nlohmann/json.hpp>

#include "app/cli/cli.h"
#include "app/cli/run_args.h"
#include "app/cli/terminal.h"
#include "db/costs.h"
#include "db/errors.h"
#include "db/queries.h"
#include "db/run_records.h"
#include "db/run_store.h"
#include "engine/config/config_io.h"
#include "engine/core/error.h"
#include "engine/core/stop_request.h"
#include "runs/comm_advice.h"
#include "runs/comm_efficiency.h"
#include "runs/export_args.h"
#include "runs/run_setup.h"
#include "runs/run_speed.h"
#include "runs/figures.h"
#include "runs/run_status.h"
#include "runs/sample_text.h"
#include "runs/service.h"
#include "runs/worker_command.h"

namespace flotilla::cli {
namespace {

using nlohmann::json;

json opt(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }

json run_json(const db::Run& r) {
  return json{{"id", r.id},
              {"name", r.name},
              {"status", db::to_string(r.status)},
              {"target", r.target},
              {"run_dir", r.run_dir},
              {"tags", r.tags},
              {"notes", r.notes},
              {"created_at", r.created_at},
              {"started_at", opt(r.started_at)},
              {"ended_at", opt(r.ended_at)},
              {"exit_code", r.exit_code ? json(*r.exit_code) : json(nullptr)},
              {"parent_id", r.parent_id ? json(*r.parent_id) : json(nullptr)},
              {"parent_kind", r.parent_kind},
              {"budget_usd", opt(r.budget_usd)},
              {"budget_warn_fraction", r.budget_warn_fraction},
              {"max_hours", opt(r.max_hours)},
              {"usd_per_hour", opt(r.usd_per_hour)},
              {"price_source", r.price_source},
              {"status_note", r.status_note}};
}

json summary_json(const db::RunSummary& s) {
  // Evaluation tasks (eval.tasks): each task's headline score at its best and the step it was reached.
  json tasks = json::array();
  for (const db::TaskBest& t : s.best_tasks)
    tasks.push_back({{"task", t.task}, {"score", t.score}, {"value", t.value}, {"step", t.step}});
  return json{{"steps", s.steps},
              {"best_tasks", tasks},
              {"final_loss", opt(s.final_loss)},
              {"best_loss", opt(s.best_loss)},
              {"best_val_loss", opt(s.best_val_loss)},
              {"tokens", s.tokens},
              {"tokens_per_s", opt(s.tokens_per_s)},
              {"mfu", opt(s.mfu)},
              {"running_s", s.running_s},
              {"training_s", s.training_s},
              {"device_hours", s.gpu_hours},
              {"device_hours_unit", db::device_hours_unit(s.on_gpus)},
              {"cost_usd", opt(s.cost_usd)},
              {"usd_per_million_tokens", opt(s.usd_per_million_tokens)}};
}

db::RunFilter::Sort parse_sort(const std::string& s) {
  using S = db::RunFilter::Sort;
  if (s == "created") return S::kCreated;
  if (s == "name") return S::kName;
  if (s == "status") return S::kStatus;
  if (s == "loss") return S::kFinalLoss;
  if (s == "steps") return S::kSteps;
  throw UsageError("runs list: --sort takes created, name, status, loss or steps, not '" + s + "'");
}

int list(const Context& ctx, ArgReader& args) {
  db::RunFilter f;
  const bool as_json = args.flag("--json");
  for (const auto& s : args.values("--status")) f.statuses.push_back(db::parse_run_status(s));
  f.name_contains = args.value("--name").value_or("");
  f.tag = args.value("--tag").value_or("");
  if (auto s = args.value("--sort")) f.sort = parse_sort(*s);
  if (args.flag("--asc")) f.descending = false;
  if (auto n = args.number("--limit")) f.limit = static_cast<int>(*n);
  if (!args.positionals().empty()) throw UsageError("runs list takes no positional arguments");
  const db::Database db = open_store(ctx);
  const auto items = db::list_runs(db, f);
  if (as_json) {
    json out = json::array();
    for (const auto& it : items) {
      json j = run_json(it.run);
      j["last_step"] = it.last_step;
      j["last_loss"] = opt(it.last_loss);
      out.push_back(j);
    }
    std::printf("%s\n", out.dump(2).c_str());
    return kExitOk;
  }
  if (items.empty()) {
    std::printf("no runs in %s (start one with flotilla run CONFIG.toml)\n", db.path().c_str());
    return kExitOk;
  }
  std::printf("%-5s %-24s %-10s %8s %10s  %-16s %s\n", "ID", "NAME", "STATUS", "STEP", "LOSS", "CREATED",
              "TARGET");
  for (const auto& it : items) {
    const std::string loss = it.last_loss ? format_number(*it.last_loss) : "-";
    std::printf("%-5lld %-24s %-10s %8lld %10s  %-16s %s\n", static_cast<long long>(it.run.id),
                it.run.name.c_str(), db::to_string(it.run.status), static_cast<long long>(it.last_step),
                loss.c_str(), format_time(it.run.created_at).c_str(), it.run.target.c_str());
  }
  return kExitOk;
}

int show(const Context& ctx, ArgReader& args) {
  const bool as_json = args.flag("--json");
  const auto pos = args.positionals();
  if (pos.size() != 1) throw UsageError("runs show needs one RUN (a name or an id)");
  const db::Database db = open_store(ctx);
  const db::Run r = db::get_run(db, pos[0]);
  const db::RunSummary s = runs::run_summary(db, r.id);
  const auto names = db::metric_names(db, r.id);
  const auto checkpoints = db::list_checkpoints(db, r.id);
  const auto events = db::list_events(db, r.id, 20);
  // Communication efficiency at the newest comm record (runs/comm_efficiency.h: the one place it is
  // computed); nothing for a run without comm records (one rank, or a worker from before them).
  const runs::CommReport comm = runs::comm_report(db, r.id);
  const std::vector<runs::Advice> advice =
      comm.empty() ? std::vector<runs::Advice>{} : runs::run_advice(db, r.id);  // runs/comm_advice.h
  if (as_json) {
    json j = run_json(r);
    j["summary"] = summary_json(s);
    j["metrics"] = names;
    j["config"] = json::parse(r.config_json, nullptr, false);
    json cps = json::array();
    for (const auto& c : checkpoints)
      cps.push_back(
          {{"step", c.step}, {"dir", c.dir}, {"bytes", c.bytes}, {"reason", c.reason}, {"time", c.time}});
    j["checkpoints"] = cps;
    json evs = json::array();
    for (const auto& e : events)
      evs.push_back({{"time", e.time}, {"kind", e.kind}, {"level", e.level}, {"message", e.message}});
    j["events"] = evs;
    if (!comm.empty()) {
      json groups = json::array();
      for (const runs::GroupEfficiency& g : comm.groups) {
        const auto o = [](const std::optional<double>& v) { return v ? json(*v) : json(nullptr); };
        json link{{"bytes_per_s", o(g.link.bytes_per_s)}, {"source", g.link.source}};
        if (g.link.bytes_per_s) {
          link["from"] = g.link.from;
          link["to"] = g.link.to;
        }
        groups.push_back({{"group", g.group}, {"size", g.size}, {"bytes", g.bytes}, {"ms", g.ms},
                          {"wait_ms", g.wait_ms}, {"busbw", o(g.busbw)}, {"share", o(g.share)},
                          {"hidden", o(g.hidden)}, {"link", link}});
      }
      json tips = json::array();
      for (const runs::Advice& a : advice)
        tips.push_back({{"rule", a.rule}, {"severity", a.severity}, {"text", a.text}, {"change", a.change}});
      j["communication"] = {
          {"step", comm.step}, {"step_ms", comm.step_ms}, {"groups", groups}, {"advice", tips}};
    }
    std::printf("%s\n", j.dump(2).c_str());
    return kExitOk;
  }
  std::printf("run        %s (id %lld)\n", r.name.c_str(), static_cast<long long>(r.id));
  std::printf("status     %s%s\n", runs::status_text(r).c_str(),
              r.exit_code ? (" (exit " + std::to_string(*r.exit_code) + ")").c_str() : "");
  std::printf("run dir    %s\n", r.run_dir.c_str());
  std::printf("created    %s   started %s   ended %s\n", format_time(r.created_at).c_str(),
              format_time(r.started_at.value_or(0)).c_str(), format_time(r.ended_at.value_or(0)).c_str());
  if (!r.tags.empty()) {
    std::string t;
    for (const auto& x : r.tags) t += (t.empty() ? "" : ", ") + x;
    std::printf("tags       %s\n", t.c_str());
  }
  if (!r.notes.empty()) std::printf("notes      %s\n", r.notes.c_str());
  std::printf("steps      %lld   tokens %s\n", static_cast<long long>(s.steps), format_number(s.tokens).c_str());
  // The two durations by their names (db/queries.h RunSummary): the price multiplies the first.
  std::printf("time       running %s   training %s (first to last step)\n", runs::clock_text(s.running_s).c_str(),
              runs::clock_text(s.training_s).c_str());
  std::printf("loss       final %s   best %s   best val %s\n",
              s.final_loss ? format_number(*s.final_loss).c_str() : "-",
              s.best_loss ? format_number(*s.best_loss).c_str() : "-",
              s.best_val_loss ? format_number(*s.best_val_loss).c_str() : "-");
  for (const db::TaskBest& t : s.best_tasks)
    std::printf("task       %s: best %s %s at step %lld\n", t.task.c_str(), t.score.c_str(),
                format_number(t.value).c_str(), static_cast<long long>(t.step));
  std::printf("speed      %s tok/s   mfu %s\n", s.tokens_per_s ? format_number(*s.tokens_per_s).c_str() : "-",
              s.mfu ? runs::mfu_text(*s.mfu).c_str() : "-");
  const bool priced = r.usd_per_hour && *r.usd_per_hour > 0;
  std::printf("cost       %s   %s%s%s\n", runs::usd_text(s.cost_usd).c_str(),
              runs::device_hours_text(s.gpu_hours, db::device_hours_unit(s.on_gpus)).c_str(),
              r.budget_usd ? ("   budget " + runs::usd_text(*r.budget_usd)).c_str() : "",
              r.max_hours ? ("   time limit " + format_number(*r.max_hours) + " h of running time").c_str() : "");
  if (priced)
    std::printf("price      %s/h (%s) x running time %s\n", runs::usd_text(*r.usd_per_hour).c_str(),
                r.price_source.empty() ? "-" : r.price_source.c_str(), runs::clock_text(s.running_s).c_str());
  else if (r.usd_per_hour)
    std::printf("price      none: %s\n", r.price_source.c_str());
  std::string m;
  size_t comm_names = 0;  // comm/<group>/<op>/<field>: many names, summed up by the table below
  for (const auto& n : names) {
    if (n.rfind("comm/", 0) == 0) {
      ++comm_names;
      continue;
    }
    m += (m.empty() ? "" : " ") + n;
  }
  if (comm_names > 0)
    m += (m.empty() ? "" : " ") + std::string("comm/... (") + std::to_string(comm_names) + " names)";
  std::printf("metrics    %s\n", m.empty() ? "-" : m.c_str());
  if (!comm.empty())
    std::printf("%s%s", runs::comm_table_text(comm).c_str(), runs::advice_text(advice).c_str());
  for (const auto& c : checkpoints)
    std::printf("checkpoint step %lld  %s  (%s)\n", static_cast<long long>(c.step), c.dir.c_str(),
                flotilla::checkpoint_reason_words(c.reason).c_str());
  for (const auto& e : events)
    std::printf("event      %s  %-7s %s\n", format_time(e.time).c_str(), e.level.c_str(), e.message.c_str());
  return kExitOk;
}

int export_run(const Context& ctx, ArgReader& args) {
  const bool jsonl = args.flag("--jsonl");
  const bool csv = args.flag("--csv");
  if (jsonl && csv) throw UsageError("runs export: choose --csv or --jsonl");
  const auto metric = args.value("--metric");
  const auto pos = args.positionals();
  if (pos.size() != 1) throw UsageError("runs export needs one RUN (a name or an id)");
  const db::Database db = open_store(ctx);
  const db::Run r = db::get_run(db, pos[0]);
  std::vector<std::string> names = metric ? std::vector<std::string>{*metric} : db::metric_names(db, r.id);
  if (metric && !db::metric_names(db, r.id).empty()) {
    const auto all = db::metric_names(db, r.id);
    if (std::find(all.begin(), all.end(), *metric) == all.end())
      throw db::DbError(db::DbErrorKind::kNotFound, "run " + r.name + " has no metric '" + *metric +
                                                        "' (flotilla runs show " + r.name + " lists them)");
  }
  // step -> (time, name -> value)
  std::map<int64_t, std::pair<double, std::map<std::string, double>>> rows;
  for (const auto& n : names)
    for (const db::Point& p : db::metric_points(db, r.id, n)) {
      auto& row = rows[p.step];
      row.first = std::max(row.first, p.time);
      row.second[n] = p.value;
    }
  if (jsonl) {
    for (const auto& [step, row] : rows) {
      json j{{"step", step}, {"time", row.first}};
      for (const auto& [n, v] : row.second) j[n] = v;
      std::printf("%s\n", j.dump().c_str());
    }
    return kExitOk;
  }
  std::string header = "step,time";
  for (const auto& n : names) (header += ',') += csv_field(n);  // (not "," + s: GCC 12 -Wrestrict)
  std::printf("%s\n", header.c_str());
  for (const auto& [step, row] : rows) {
    std::printf("%lld,%.3f", static_cast<long long>(step), row.first);
    for (const auto& n : names) {
      const auto it = row.second.find(n);
      if (it == row.second.end())
        std::printf(",");
      else
        std::printf(",%.9g", it->second);
    }
    std::printf("\n");
  }
  return kExitOk;
}

int remove(const Context& ctx, ArgReader& args) {
  const bool force = args.flag("--force");
  const auto pos = args.positionals();
  if (pos.size() != 1) throw UsageError("runs delete needs one RUN (a name or an id)");
  db::Database db = open_store(ctx);
  const db::Run r = db::get_run(db, pos[0]);
  if (r.status == db::RunStatus::kRunning && !force) {
    std::fprintf(stderr,
                 "flotilla: run %s is running; stop it first, or delete its record anyway with --force\n",
                 r.name.c_str());
    return kExitRefused;
  }
  // A live worker is never orphaned, --force or not: its rows and costs would vanish while it
  // trains unrecorded. Stopping it is the watcher's job (it checkpoints); delete it afterwards.
  if (const std::string why =
          runs::RunService(service_options(ctx, "flotilla runs delete")).abilities(r).remove;
      !why.empty()) {
    std::fprintf(stderr, "flotilla: %s\n", why.c_str());
    return kExitRefused;
  }
  const int64_t rows = db::delete_run(db, r.id);
  std::printf("deleted run %s (id %lld, %lld metric rows) from %s; its run directory %s was kept\n",
              r.name.c_str(), static_cast<long long>(r.id), static_cast<long long>(rows), db.path().c_str(),
              r.run_dir.empty() ? "-" : r.run_dir.c_str());
  return kExitOk;
}

// The run's stored row, by name or id, after the store settled its stale runs.
db::Run stored_run(const Context& ctx, const std::string& run, const std::string& origin) {
  const db::Database db = open_store(ctx, origin);
  return db::get_run(db, run);
}

int checkpoint_run(const Context& ctx, ArgReader& args) {
  const auto pos = args.positionals();
  if (pos.size() != 1) throw UsageError("runs checkpoint needs one RUN (a name or an id)");
  const db::Run r = stored_run(ctx, pos[0], "flotilla runs checkpoint");
  runs::RunService service(service_options(ctx, "flotilla runs checkpoint"));
  service.request_checkpoint(r.id);
  std::printf(
      "asked run %s for a checkpoint at its next step (%s); it appears in flotilla runs checkpoints %s\n",
      r.name.c_str(), runs::RunService::where_text(r).c_str(), r.name.c_str());
  return kExitOk;
}

int list_checkpoints(const Context& ctx, ArgReader& args) {
  const bool as_json = args.flag("--json");
  const auto pos = args.positionals();
  if (pos.size() != 1) throw UsageError("runs checkpoints needs one RUN (a name or an id)");
  const db::Run r = stored_run(ctx, pos[0], "flotilla runs checkpoints");
  runs::RunService service(service_options(ctx, "flotilla runs checkpoints"));
  int purged = 0;
  const std::vector<runs::CheckpointEntry> all = service.checkpoints(r.id, &purged);
  if (as_json) {
    json out = json::array();
    for (const auto& c : all) {
      json j{{"step", c.step}, {"where", c.where}};
      // Known for a checkpoint on this machine (the store's record); a node's listing has neither.
      if (c.bytes > 0) j["bytes"] = c.bytes;
      if (!c.reason.empty()) j["reason"] = c.reason;
      if (!c.local_dir.empty()) j["local_dir"] = c.local_dir;
      out.push_back(j);
    }
    std::printf("%s\n", out.dump(2).c_str());
  } else if (all.empty()) {
    std::printf(
        "run %s has no checkpoint%s\n", r.name.c_str(),
        purged ? (" on disk (" + std::to_string(purged) + " written earlier were purged)").c_str() : "");
  } else {
    for (const auto& c : all)
      std::printf("step %8lld  %s\n", static_cast<long long>(c.step), c.where.c_str());
  }
  return kExitOk;
}

// A step number given as `opt`, checked to be one of `run`'s checkpoints (UsageError naming those
// there are).
std::optional<int64_t> read_step(ArgReader& args, const std::string& opt) {
  const std::optional<double> step = args.number(opt);
  if (!step) return std::nullopt;
  if (*step < 0 || *step != static_cast<double>(static_cast<int64_t>(*step)))
    throw UsageError(opt + " needs a step number (flotilla runs checkpoints RUN lists them)");
  return static_cast<int64_t>(*step);
}
void check_step(runs::RunService& service, const db::Run& r, int64_t step) {
  std::string steps;
  for (const auto& c : service.checkpoints(r.id)) {
    if (c.step == step) return;
    steps += (steps.empty() ? "" : ", ") + std::to_string(c.step);
  }
  throw UsageError("run " + r.name + " has no checkpoint at step " + std::to_string(step) +
                   (steps.empty() ? std::string(" (it has none)") : " (it has " + steps + ")"));
}

int fetch(const Context& ctx, ArgReader& args) {
  const std::optional<int64_t> step = read_step(args, "--step");
  const std::string out = args.value("--out").value_or("");
  const auto pos = args.positionals();
  if (pos.size() != 1) throw UsageError("runs fetch needs one RUN (a name or an id)");
  const db::Run r = stored_run(ctx, pos[0], "flotilla runs fetch");
  runs::RunService service(service_options(ctx, "flotilla runs fetch"));
  if (step) check_step(service, r, *step);
  // A checkpoint already on this machine is not copied: its own folder is the answer.
  std::printf("%s\n", service.fetch_checkpoint(r.id, step, out).c_str());
  return kExitOk;
}

// Watches a run the service started, attached or resumed, after its headline.
int follow(const Context& ctx, runs::ActiveRun& run, bool quiet) {
  if (!quiet) {
    std::printf("%s\n", run.headline().c_str());
    std::fflush(stdout);
  }
  return watch_run(ctx, run, quiet);
}

int resume(const Context& ctx, ArgReader& args) {
  const bool quiet = args.flag("--quiet");
  const std::optional<double> budget = args.number("--budget");
  const PlaceArgs place = read_place(args, false);
  const runs::Layout layout = read_layout(args);
  const auto pos = args.positionals();
  if (pos.size() != 1) throw UsageError("runs resume needs one RUN (a name or an id)");
  if (budget && !(*budget > 0)) throw UsageError("--budget needs a positive number of dollars");
  const db::Run r = stored_run(ctx, pos[0], "flotilla runs resume");
  runs::ServiceOptions options = service_options(ctx, "flotilla runs resume");
  options.no_bind = place.no_bind;
  runs::RunService service(options);
  runs::ResumeRequest req;
  req.where = place.where;
  req.layout = layout;
  req.budget_usd = budget;
  req.recovery = place.recovery;
  const StopSignals signals;
  const auto progress = [quiet](const std::string& line) {
    if (!quiet) std::printf("%s\n", line.c_str());
  };
  std::unique_ptr<runs::ActiveRun> run = service.resume(r.id, req, progress);
  return follow(ctx, *run, quiet);
}

int attach(const Context& ctx, ArgReader& args) {
  const bool quiet = args.flag("--quiet");
  const bool no_bind = args.flag("--no-bind");
  const std::optional<runs::RecoveryChoice> recovery = read_recovery(args);
  const auto pos = args.positionals();
  if (pos.size() != 1) throw UsageError("runs attach needs one RUN (a name or an id)");
  const StopSignals signals;  // from here on, Ctrl-C stops the run once attached
  const db::Run r = stored_run(ctx, pos[0], "flotilla runs attach");
  runs::ServiceOptions options = service_options(ctx, "flotilla runs attach");
  options.no_bind = no_bind;
  runs::RunService service(options);
  std::unique_ptr<runs::ActiveRun> run = service.attach(r.id, note_stderr, recovery);
  return follow(ctx, *run, quiet);
}

int fork(const Context& ctx, ArgReader& args) {
  const bool quiet = args.flag("--quiet");
  runs::ForkRequest req;
  req.step = read_step(args, "--step");
  req.checkpoint_dir = args.value("--checkpoint").value_or("");
  req.name = args.value("--name").value_or("");
  req.sets = args.values("--set");
  const PlaceArgs place = read_place(args);
  req.where = place.where;
  req.layout = read_layout(args);
  const auto pos = args.positionals();
  if (pos.size() != 1) throw UsageError("runs fork needs one RUN (a name or an id)");
  if (req.step && !req.checkpoint_dir.empty())
    throw UsageError("runs fork: give --step or --checkpoint, not both");
  if (!req.name.empty()) {
    try {
      runs::check_new_run_name(req.name);
    } catch (const Error& e) {
      throw UsageError(std::string("--name: ") + e.what());
    }
  }
  if (!req.checkpoint_dir.empty())
    req.checkpoint_dir = std::filesystem::absolute(req.checkpoint_dir).string();
  const db::Run r = stored_run(ctx, pos[0], "flotilla runs fork");
  runs::ServiceOptions options = service_options(ctx, "flotilla runs fork");
  options.no_bind = place.no_bind;
  runs::RunService service(options);
  if (req.step) check_step(service, r, *req.step);
  const StopSignals signals;
  const auto progress = [quiet](const std::string& line) {
    if (!quiet) std::printf("%s\n", line.c_str());
  };
  std::unique_ptr<runs::ActiveRun> run = service.fork(r.id, req, progress);
  if (!quiet) std::printf("forked run %s from run %s\n", run->name().c_str(), r.name.c_str());
  return follow(ctx, *run, quiet);
}

// Runs flotilla-worker with `args` in the foreground (its output is this command's) and returns
// its exit status.
int run_worker(const std::vector<std::string>& args) {
  std::vector<std::string> argv{runs::find_worker()};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> c;
  for (auto& a : argv) c.push_back(a.data());
  c.push_back(nullptr);
  std::fflush(stdout);
  pid_t pid = 0;
  if (const int err = ::posix_spawn(&pid, c[0], nullptr, nullptr, c.data(), environ); err != 0)
    throw Error(ExitCode::kIo, "cannot start " + argv[0] + ": " + std::strerror(err));
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// The run's checkpoint (`--step`, default the newest) on this machine, fetched when it is elsewhere,
// and the run's config as stored.
struct ModelSource {
  db::Run run;
  RunConfig config;
  std::string checkpoint;
};
ModelSource model_source(const Context& ctx, const std::string& name, std::optional<int64_t> step,
                         const std::string& origin) {
  ModelSource m;
  m.run = stored_run(ctx, name, origin);
  m.config = parse_config_toml(m.run.config_toml, "run " + m.run.name);
  runs::RunService service(service_options(ctx, origin));
  if (step) check_step(service, m.run, *step);
  m.checkpoint = service.fetch_checkpoint(m.run.id, step);
  return m;
}

// `runs sample RUN [--step N] [--prompt TEXT] [--tokens N] [--temperature T] [--top-k K] [--top-p P]
// [--seed S] [--stop TEXT]... [--system TEXT] [--chat auto|on|off] [--special]`: the model answers (a
// chat model, its prompt as a user turn) or continues a prompt: the command the app's Sample dialog
// runs (runs::sample_worker_args).
int sample(const Context& ctx, ArgReader& args) {
  const std::optional<int64_t> step = read_step(args, "--step");
  runs::SampleRequest request;
  request.prompt = args.value("--prompt").value_or("");
  const std::optional<double> tokens = args.number("--tokens");
  const std::optional<double> temperature = args.number("--temperature");
  const std::optional<double> top_k = args.number("--top-k");
  const std::optional<double> top_p = args.number("--top-p");
  const std::optional<double> seed = args.number("--seed");
  request.stops = args.values("--stop");
  request.system = args.value("--system").value_or("");
  request.chat = args.value("--chat").value_or("auto");
  request.special = args.flag("--special");
  const auto pos = args.positionals();
  if (pos.size() != 1) throw UsageError("runs sample needs one RUN (a name or an id)");
  auto whole = [](std::optional<double> v, double lo, double hi) {
    return !v || (*v >= lo && *v <= hi && *v == static_cast<double>(static_cast<int64_t>(*v)));
  };
  if (!whole(tokens, 1, 4096)) throw UsageError("--tokens needs a whole number from 1 to 4096");
  if (!whole(top_k, 0, 1e9)) throw UsageError("--top-k needs a whole number, 0 for no limit");
  if (!whole(seed, 0, 9e15)) throw UsageError("--seed needs a whole number");
  if (temperature && *temperature < 0) throw UsageError("--temperature needs 0 (greedy) or more");
  if (top_p && !(*top_p > 0 && *top_p <= 1)) throw UsageError("--top-p needs a number above 0 and at most 1");
  if (request.chat != "auto" && request.chat != "on" && request.chat != "off")
    throw UsageError("--chat takes auto, on or off, not '" + request.chat + "'");
  if (tokens) request.tokens = static_cast<int>(*tokens);
  if (temperature) request.temperature = *temperature;
  if (top_k) request.top_k = static_cast<int>(*top_k);
  if (top_p) request.top_p = *top_p;
  if (seed) request.seed = static_cast<uint64_t>(*seed);
  const ModelSource m = model_source(ctx, pos[0], step, "flotilla runs sample");
  request.checkpoint = m.checkpoint;
  request.tokenizer = runs::run_tokenizer_path(m.config);
  if (request.tokenizer.empty() && request.prompt.find_first_not_of("0123456789 ") != std::string::npos)
    throw UsageError("run " + m.run.name +
                     " has no tokenizer on this machine (the synthetic corpus is token ids, not text): give "
                     "--prompt as token ids (\"1 2 3\"), or none to start at token 0");
  return run_worker(runs::sample_worker_args(request));
}

// `runs export-model RUN --out PATH [--format hf|safetensors|peft] [--step N] [--dtype D]`: the weights of a
// checkpoint (a LoRA run's hf export is its base with the adapter merged in; peft the adapter alone).
int export_model(const Context& ctx, ArgReader& args) {
  const std::optional<int64_t> step = read_step(args, "--step");
  const std::optional<std::string> out = args.value("--out");
  std::optional<std::string> format = args.value("--format");
  const std::optional<std::string> dtype = args.value("--dtype");
  const auto pos = args.positionals();
  if (pos.size() != 1) throw UsageError("runs export-model needs one RUN (a name or an id)");
  if (!out) throw UsageError("runs export-model needs --out PATH");
  if (format && *format != "hf" && *format != "safetensors" && *format != "peft")
    throw UsageError("--format takes hf, safetensors or peft, not '" + *format + "'");
  if (dtype && *dtype != "source" && *dtype != "bf16" && *dtype != "fp32")
    throw UsageError("--dtype takes source, bf16 or fp32, not '" + *dtype + "'");
  const ModelSource m = model_source(ctx, pos[0], step, "flotilla runs export-model");
  if (!format) format = m.config.model.arch == "llama" ? "hf" : "safetensors";
  if (*format == "peft" && !m.config.lora.enabled)
    throw UsageError("run " + m.run.name +
                     " trained every weight, so it has no LoRA adapter: export its weights");
  runs::ExportRequest request;
  request.checkpoint = m.checkpoint;
  request.format = *format;
  request.out = std::filesystem::absolute(*out).string();
  request.dtype = dtype.value_or("");
  request.tokenizer = runs::run_tokenizer_path(m.config);
  const std::vector<std::string> a = runs::export_worker_args(request);
  const std::string& target = a[6];  // --out as the worker gets it
  const int code = run_worker(a);
  if (code == 0)
    std::printf("exported run %s (checkpoint %s) to %s\n", m.run.name.c_str(), m.checkpoint.c_str(),
                target.c_str());
  return code;
}

void usage() {
  std::printf(
      "Usage: flotilla runs list [--json] [--status S]... [--tag T] [--name TEXT] [--sort "
      "created|name|status|loss|steps]\n"
      "                          [--asc] [--limit N]\n"
      "       flotilla runs show RUN [--json]\n"
      "       flotilla runs export RUN [--csv|--jsonl] [--metric NAME]\n"
      "       flotilla runs resume RUN [--quiet] [--no-bind] [--budget USD] [--layout "
      "dp=N,tp=N,pp=N,zero=N]\n"
      "                            [--local | --nodes A,B [...] | --cluster C [...]]\n"
      "                            [--auto-recover [--spare C,...] [--max-recoveries K] [--recover-after "
      "S]]\n"
      "       flotilla runs attach RUN [--quiet] [--no-bind] [--auto-recover ...]\n"
      "       flotilla runs fork RUN [--step N | --checkpoint DIR] [--name NEW] [--set KEY=VALUE]...\n"
      "                          [--layout ...] [--local | --nodes A,B [...] | --cluster C [...]] [--quiet]\n"
      "       flotilla runs sample RUN [--step N] [--prompt TEXT] [--tokens N] [--temperature T] [--top-k K]\n"
      "                                [--top-p P] [--seed S] [--stop TEXT]... [--system TEXT]\n"
      "                                [--chat auto|on|off] [--special]\n"
      "       flotilla runs eval RUN --task FILE [--step N] [--kind multiple_choice|perplexity|generate]\n"
      "                              [--name N] [--dev FILE --fewshot N] [--limit N] [--stride N] [--regex R]\n"
      "                              [--max-tokens N] [--batch N] [--json]\n"
      "       flotilla runs export-model RUN --out PATH [--format hf|safetensors|peft] [--step N]\n"
      "                                  [--dtype source|bf16|fp32]\n"
      "       flotilla runs checkpoint RUN\n"
      "       flotilla runs checkpoints RUN [--json]\n"
      "       flotilla runs fetch RUN [--step N] [--out DIR]\n"
      "       flotilla runs delete RUN [--force]\n"
      "RUN is a run's name or id. See docs/cli.md.\n");
}

}  // namespace

int cmd_runs(const Context& ctx) {
  if (ctx.args.empty() || ctx.args[0] == "--help") {
    usage();
    return ctx.args.empty() ? kExitUsage : kExitOk;
  }
  const std::string sub = ctx.args[0];
  ArgReader args(std::vector<std::string>(ctx.args.begin() + 1, ctx.args.end()), "runs " + sub);
  if (sub == "list") return list(ctx, args);
  if (sub == "show") return show(ctx, args);
  if (sub == "export") return export_run(ctx, args);
  if (sub == "delete") return remove(ctx, args);
  try {
    if (sub == "checkpoints") return list_checkpoints(ctx, args);
    if (sub == "checkpoint") return checkpoint_run(ctx, args);
    if (sub == "fetch") return fetch(ctx, args);
    if (sub == "resume") return resume(ctx, args);
    if (sub == "attach") return attach(ctx, args);
    if (sub == "fork") return fork(ctx, args);
    if (sub == "sample") return sample(ctx, args);
    if (sub == "eval") return runs_eval(ctx, args);
    if (sub == "export-model") return export_model(ctx, args);
  } catch (const runs::Refusal& e) {  // what the run cannot do now, and why; nothing was changed
    std::fflush(stdout);
    note_stderr(e.what());
    return kExitRefused;
  }
  throw UsageError("runs: unknown subcommand '" + sub +
                   "' (list, show, export, export-model, sample, eval, resume, attach, fork, checkpoint, "
                   "checkpoints, fetch, delete)");
}

}  // namespace flotilla::cli
