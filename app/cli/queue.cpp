// `flotilla queue ...`: the run queue (issue 37) as a terminal uses it: add (a config checked as
// `flotilla run` checks it, then stored), list, show (the decision with every place's figures),
// cancel, pause, resume, move, and serve (the scheduler, runs/scheduler.h, in this process).
//
// Decision: this file only parses and prints. The queue is the store's (db/queue.h), every change
// a compare-and-set the store refuses with the sentence to show; starting, placing and watching
// runs is the scheduler's. `serve` maps SIGINT/SIGTERM/SIGHUP to a clean end: the lease is
// released and the runs it started go on (stop_with_parent false); the next `serve` (or the app)
// attaches them.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "app/cli/cli.h"
#include "app/cli/terminal.h"
#include "db/queue.h"
#include "db/run_store.h"
#include "engine/config/config_io.h"
#include "engine/core/error.h"
#include "engine/core/probe.h"
#include "runs/run_setup.h"
#include "runs/scheduler.h"
#include "runs/scheduler_policies.h"
#include "runs/worker_command.h"

#include "runs/queue_place.h"

namespace flotilla::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string check_place_key(const std::string& key) {
  try {
    return runs::parse_place_key(key).key();
  } catch (const Error& e) {
    throw UsageError(std::string("--on: ") + e.what());
  }
}

int64_t entry_id(const db::Database& db, const std::string& text) { return db::get_queue_entry(db, text).id; }

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : sep) + s;
  return out;
}

json entry_json(const db::QueueEntry& e) {
  json j;
  j["id"] = e.id;
  j["name"] = e.name;
  j["state"] = db::entry_state_name(e.state);
  j["place"] = e.place;
  j["places"] = e.places;
  j["priority"] = e.priority;
  j["after_run"] = e.after_run;
  j["deadline"] = e.deadline ? json(*e.deadline) : json(nullptr);
  j["max_usd"] = e.max_usd ? json(*e.max_usd) : json(nullptr);
  j["run_id"] = e.run_id ? json(*e.run_id) : json(nullptr);
  j["why"] = e.why;
  j["group"] = e.group;
  j["starts"] = e.starts;
  j["max_restarts"] = e.max_restarts;
  j["lost_steps"] = e.lost_steps;
  j["lost_usd"] = e.lost_usd;
  j["created_at"] = e.created_at;
  j["updated_at"] = e.updated_at;
  json d = json::parse(e.decision_json, nullptr, false);
  j["decision"] = d.is_discarded() ? json::object() : d;
  return j;
}

int queue_add(const Context& ctx, ArgReader& args) {
  const std::optional<std::string> name = args.value("--name");
  const std::vector<std::string> sets = args.values("--set");
  const std::vector<std::string> on = args.values("--on");
  const std::optional<double> priority = args.number("--priority");
  const std::optional<std::string> after = args.value("--after");
  const std::optional<std::string> deadline = args.value("--deadline");
  const std::optional<double> max_usd = args.number("--max-usd");
  const std::optional<double> max_restarts = args.number("--max-restarts");
  const auto pos = args.positionals();
  if (pos.size() != 1) throw UsageError("queue add needs exactly one CONFIG.toml");
  if (priority && *priority != std::floor(*priority)) throw UsageError("--priority needs a whole number");
  if (max_usd && !(*max_usd > 0)) throw UsageError("--max-usd needs a positive number of dollars");
  if (max_restarts &&
      (*max_restarts < 0 || *max_restarts > 100 || *max_restarts != std::floor(*max_restarts)))
    throw UsageError("--max-restarts needs a whole number from 0 to 100");
  if (name) {
    try {
      runs::check_new_run_name(*name);
    } catch (const Error& e) {
      throw UsageError(std::string("--name: ") + e.what());
    }
  }
  db::NewQueueEntry n;
  for (const std::string& key : on) n.places.push_back(check_place_key(key));
  const std::string config_path = fs::absolute(pos[0]).string();
  RunConfig config;
  try {
    config = load_config(config_path, sets);
    // Checked as `flotilla run` checks it before it starts anything (the layout it asks).
    runs::validate_run_config(config, runs::ranks_of(config));
    if (!name) runs::check_new_run_name(config.run.name);
  } catch (const Error& e) {
    std::fprintf(stderr, "flotilla: %s\n", e.what());
    return static_cast<int>(e.code());
  }
  db::Database db = open_store(ctx, "flotilla queue add");
  const double now = db::now_seconds();
  n.name = name.value_or(config.run.name);
  n.explicit_name = name.has_value();
  n.config_toml = config_to_toml(config);
  n.config_path = config_path;
  n.priority = static_cast<int64_t>(priority.value_or(0));
  n.after_run = after.value_or("");
  if (deadline) n.deadline = parse_deadline(*deadline, now);
  if (n.deadline && *n.deadline <= now) throw UsageError("--deadline '" + *deadline + "' is already past");
  n.max_usd = max_usd;
  if (max_restarts) n.max_restarts = static_cast<int64_t>(*max_restarts);
  std::string got;
  const int64_t id = db::add_queue_entry(db, n, now, &got);
  std::printf("queued %s as entry %lld%s\n", got.c_str(), static_cast<long long>(id),
              n.places.empty() ? "" : (" (on " + join(n.places, ", ") + ")").c_str());
  return kExitOk;
}

int queue_list(const Context& ctx, ArgReader& args) {
  const bool all = args.flag("--all");
  const bool as_json = args.flag("--json");
  if (!args.positionals().empty()) throw UsageError("queue list takes no argument");
  const db::Database db = open_store(ctx, "flotilla queue");
  const auto entries = db::list_queue(db, all);
  if (as_json) {
    json arr = json::array();
    for (const auto& e : entries) arr.push_back(entry_json(e));
    std::printf("%s\n", arr.dump(2).c_str());
    return kExitOk;
  }
  if (entries.empty()) {
    std::printf("the queue is empty%s\n", all ? "" : " (flotilla queue list --all shows finished entries)");
    return kExitOk;
  }
  std::printf("%-5s %-24s %-10s %-18s %-8s %s\n", "ID", "NAME", "STATE", "PLACE", "PRIORITY", "WHY");
  for (const auto& e : entries)
    std::printf("%-5lld %-24s %-10s %-18s %-8lld %s\n", static_cast<long long>(e.id), e.name.c_str(),
                db::entry_state_name(e.state), e.place.empty() ? "-" : e.place.c_str(),
                static_cast<long long>(e.priority), e.why.c_str());
  return kExitOk;
}

int queue_show(const Context& ctx, ArgReader& args) {
  const bool as_json = args.flag("--json");
  const auto pos = args.positionals();
  if (pos.size() != 1) throw UsageError("queue show needs one entry (its id or name)");
  const db::Database db = open_store(ctx, "flotilla queue show");
  const db::QueueEntry e = db::get_queue_entry(db, pos[0]);
  const json j = entry_json(e);
  if (as_json) {
    std::printf("%s\n", j.dump(2).c_str());
    return kExitOk;
  }
  std::printf("entry %lld: %s (%s)\n", static_cast<long long>(e.id), e.name.c_str(),
              db::entry_state_name(e.state));
  std::printf("config    %s\n", e.config_path.c_str());
  std::printf("places    %s\n", e.places.empty() ? "any" : join(e.places, ", ").c_str());
  std::printf("priority  %lld\n", static_cast<long long>(e.priority));
  if (!e.after_run.empty()) std::printf("after     run %s completes\n", e.after_run.c_str());
  if (e.deadline) std::printf("deadline  %s\n", format_time(*e.deadline).c_str());
  if (e.max_usd) std::printf("max cost  %s\n", format_usd(*e.max_usd).c_str());
  if (e.run_id) std::printf("run       id %lld\n", static_cast<long long>(*e.run_id));
  std::printf("starts    %lld (at most %lld restarts)\n", static_cast<long long>(e.starts),
              static_cast<long long>(e.max_restarts));
  if (e.lost_steps > 0)
    std::printf("lost      %lld step(s) to preemptions, %s\n", static_cast<long long>(e.lost_steps),
                format_usd(e.lost_usd).c_str());
  std::printf("why       %s\n", e.why.empty() ? "-" : e.why.c_str());
  const json& d = j["decision"];
  if (d.contains("places") && d["places"].is_array() && !d["places"].empty()) {
    std::printf("\ndecision%s: %s\n",
                d.contains("time") ? (" at " + format_time(d["time"].get<double>())).c_str() : "",
                d.value("words", std::string()).c_str());
    std::printf("  %-22s %-5s %-12s %-12s %-10s %-10s %s\n", "PLACE", "FITS", "LAYOUT", "TOKENS/S", "TIME",
                "COST", "WHY NOT / BASIS");
    for (const json& p : d["places"]) {
      const bool fits = p.value("fits", false);
      const std::string cost =
          p.contains("usd") && p["usd"].is_number() ? format_usd(p["usd"].get<double>()) : std::string("-");
      const std::string secs = p.contains("seconds") && p["seconds"].is_number()
                                   ? format_duration(p["seconds"].get<double>())
                                   : std::string("-");
      std::printf("  %-22s %-5s %-12s %-12.1f %-10s %-10s %s\n", p.value("label", p.value("key", "")).c_str(),
                  fits ? "yes" : "no", p.value("layout", "").c_str(), p.value("tokens_per_s", 0.0),
                  secs.c_str(), cost.c_str(), (fits ? p.value("basis", "") : p.value("why_not", "")).c_str());
    }
  }
  return kExitOk;
}

int queue_serve(const Context& ctx, ArgReader& args) {
  const bool until_empty = args.flag("--until-empty");
  const std::optional<double> tick = args.number("--tick");
  if (!args.positionals().empty()) throw UsageError("queue serve takes no argument");
  if (tick && !(*tick > 0)) throw UsageError("--tick needs a positive number of seconds");
  open_store(ctx, "flotilla queue serve");  // created, migrated, stale runs settled
  runs::SchedulerOptions o;
  o.service = service_options(ctx, "flotilla queue serve");
  o.origin = "flotilla queue serve";
  if (tick) o.tick_s = *tick;
  o.note = [](const std::string& line) {
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  };
  o.local = runs::local_facts(probe_machine());  // this machine's GPUs for placement, probed once
  // Successive halving and idle autostop, as the app wires them; autostop's notices printed.
  const std::string autostop_logs =
      (std::filesystem::path(database_path(ctx)).parent_path() / "autostop").string();
  runs::add_standard_policies(o, autostop_logs, [](const runs::AutostopNotice& n) {
    std::printf("%s\n", n.text.c_str());
    std::fflush(stdout);
  });
  const StopSignals signals;
  runs::Scheduler scheduler(o);
  try {
    scheduler.acquire();
  } catch (const runs::Refusal& e) {
    note_stderr(e.what());
    return kExitRefused;
  }
  std::printf("serving the queue of %s (pid %d)%s\n", database_path(ctx).c_str(),
              static_cast<int>(::getpid()),
              until_empty ? " until it is empty" : "; Ctrl-C stops serving, runs go on");
  std::fflush(stdout);
  std::atomic<bool> stop{false};
  std::atomic<bool> done{false};
  std::thread relay([&] {
    while (!done.load()) {
      if (StopSignals::requested()) stop = true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  int rc = 0;
  try {
    rc = scheduler.serve(until_empty, &stop);
  } catch (...) {
    done = true;
    relay.join();
    throw;
  }
  done = true;
  relay.join();
  if (stop.load())
    std::printf("stopped serving; the runs it started go on (flotilla queue serve continues them)\n");
  if (rc != 0) {
    note_stderr("another scheduler took the queue over; this one stopped");
    return kExitRefused;
  }
  return kExitOk;
}

void print_help() {
  std::printf(
      "Usage: flotilla queue [list [--all] [--json]]\n"
      "       flotilla queue add CONFIG.toml [--set K=V]... [--name N] [--on PLACE]... [--priority N]\n"
      "                          [--after RUN] [--deadline TIME] [--max-usd X] [--max-restarts N]\n"
      "       flotilla queue show ID [--json]\n"
      "       flotilla queue cancel|pause|resume ID\n"
      "       flotilla queue move ID --top | --bottom | --before ID | --after ID\n"
      "       flotilla queue serve [--until-empty] [--tick S]\n\n"
      "Queued runs start when the scheduler (flotilla queue serve, or the app) finds them a place: the\n"
      "highest priority first, on the place with the lowest predicted cost to finish within the\n"
      "deadline and --max-usd. PLACE: local, node:NAME, nodes:A,B, cluster:NAME[/PARTITION] (default:\n"
      "any). TIME: \"2026-12-08 18:00\", 2026-12-08T18:00Z, +3h, +90m. --after RUN waits for that run to\n"
      "complete. A preempted run goes back to the head of the queue and resumes from its newest\n"
      "checkpoint wherever it fits first, at most --max-restarts times (default 3).\n"
      "serve --until-empty returns once nothing is queued or running. Ctrl-C stops serving; the runs\n"
      "go on and the next serve attaches them. One scheduler per workspace: a second is refused.\n");
}

}  // namespace

int cmd_queue(const Context& ctx) {
  std::vector<std::string> rest = ctx.args;
  std::string sub = "list";
  if (!rest.empty() && rest[0].rfind("-", 0) != 0) {
    sub = rest[0];
    rest.erase(rest.begin());
  }
  ArgReader args(rest, "queue " + sub);
  if (args.flag("--help") || sub == "help") {
    print_help();
    return kExitOk;
  }
  if (sub == "add") return queue_add(ctx, args);
  if (sub == "list") return queue_list(ctx, args);
  if (sub == "show") return queue_show(ctx, args);
  if (sub == "serve") return queue_serve(ctx, args);
  if (sub == "cancel" || sub == "pause" || sub == "resume") {
    const auto pos = args.positionals();
    if (pos.size() != 1) throw UsageError("queue " + sub + " needs one entry (its id or name)");
    db::Database db = open_store(ctx, "flotilla queue " + sub);
    const int64_t id = entry_id(db, pos[0]);
    const double now = db::now_seconds();
    if (sub == "cancel") db::cancel_queue_entry(db, id, now);
    if (sub == "pause") db::pause_queue_entry(db, id, now);
    if (sub == "resume") db::resume_queue_entry(db, id, now);
    const db::QueueEntry e = *db::find_queue_entry(db, id);
    std::printf("entry %lld (%s): %s\n", static_cast<long long>(id), e.name.c_str(),
                db::entry_state_name(e.state));
    return kExitOk;
  }
  if (sub == "move") {
    const bool top = args.flag("--top");
    const bool bottom = args.flag("--bottom");
    const std::optional<std::string> before = args.value("--before");
    const std::optional<std::string> after = args.value("--after");
    const auto pos = args.positionals();
    if (pos.size() != 1) throw UsageError("queue move needs one entry (its id or name)");
    if (static_cast<int>(top) + static_cast<int>(bottom) + static_cast<int>(before.has_value()) +
            static_cast<int>(after.has_value()) !=
        1)
      throw UsageError("queue move needs one of --top, --bottom, --before ID, --after ID");
    db::Database db = open_store(ctx, "flotilla queue move");
    const int64_t id = entry_id(db, pos[0]);
    const double now = db::now_seconds();
    if (top) db::move_queue_entry(db, id, db::MoveTo::kTop, 0, now);
    if (bottom) db::move_queue_entry(db, id, db::MoveTo::kBottom, 0, now);
    if (before) db::move_queue_entry(db, id, db::MoveTo::kBefore, entry_id(db, *before), now);
    if (after) db::move_queue_entry(db, id, db::MoveTo::kAfter, entry_id(db, *after), now);
    std::printf("moved entry %lld\n", static_cast<long long>(id));
    return kExitOk;
  }
  throw UsageError("unknown queue command '" + sub +
                   "' (add, list, show, cancel, pause, resume, move, serve)");
}

}  // namespace flotilla::cli
