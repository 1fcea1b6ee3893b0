// Idle autostop (see autostop.h).
#include "runs/autostop.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <thread>

#include <nlohmann/json.hpp>

#include "db/costs.h"
#include "db/node_power.h"
#include "db/nodes.h"
#include "db/run_store.h"
#include "remote/validate.h"
#include "runs/node_ops.h"
#include "runs/power_settings.h"

namespace flotilla::runs {
namespace {

constexpr char kEventKind[] = "autostop";

std::string clock_text(double t) {
  const std::time_t s = static_cast<std::time_t>(t);
  std::tm tm{};
  localtime_r(&s, &tm);
  char buf[16];
  std::strftime(buf, sizeof buf, "%H:%M", &tm);
  return buf;
}

// The last non-empty line of a command's output (for a message), at most 200 bytes.
std::string last_line(const std::string& output) {
  size_t end = output.find_last_not_of("\r\n \t");
  if (end == std::string::npos) return "";
  const size_t start = output.rfind('\n', end);
  std::string line = output.substr(start == std::string::npos ? 0 : start + 1,
                                   end + 1 - (start == std::string::npos ? 0 : start + 1));
  if (line.size() > 200) line = line.substr(0, 200) + "...";
  return remote::printable(line);
}

AutostopNotice record(db::Database& db, double time, const std::string& node, const std::string& level,
                      const std::string& text, const nlohmann::json& fields) {
  db::add_event(db, std::nullopt, time, kEventKind, level, text, fields.dump());
  return {node, level, text, time};
}

// The node's whole rate now (every GPU it reported; flat and power rates are whole-node already).
double whole_rate(const db::Database& db, int64_t node_id) {
  int64_t gpus = 0;
  for (const db::Node& n : db::list_nodes(db))
    if (n.id == node_id) gpus = n.gpu_count;
  return db::node_rate(db, node_id, gpus).usd_per_hour;
}

}  // namespace

IdleAutostop::IdleAutostop(AutostopOptions options, SshAccess access)
    : options_(std::move(options)), access_(std::move(access)) {}

IdleAutostop::~IdleAutostop() = default;

std::string IdleAutostop::log_path(int64_t node_id, const char* what) const {
  if (options_.log_dir.empty()) return "";
  std::error_code ec;
  std::filesystem::create_directories(options_.log_dir, ec);
  return options_.log_dir + "/node-" + std::to_string(node_id) + "-" + what + ".log";
}

std::vector<AutostopNotice> IdleAutostop::finish_stop(db::Database& db, int64_t node_id,
                                                      const std::string& name, const CommandOutcome& o,
                                                      double now) {
  const Pending p = std::move(pending_[node_id]);
  pending_.erase(node_id);
  const std::string cmd = command_text(p.argv);
  nlohmann::json fields = {{"node", name}, {"command", p.argv}, {"idle_s", p.idle_s}};
  if (o.ok) {
    const std::string note = "stopped by autostop after " + idle_duration_text(p.idle_s) + " idle";
    db::write_tx(db, [&] {
      db::set_power_state(db, node_id, db::kPowerStopped, now);
      db::set_idle_since(db, node_id, std::nullopt);
      db::close_idle_accrual(db, node_id, now, note);
    });
    fields["stopped"] = true;
    return {record(db, now, name, "info",
                   "node " + name + " stopped by autostop at " + clock_text(now) + " after " +
                       idle_duration_text(p.idle_s) + " idle (" + cmd + ")",
                   fields)};
  }
  not_before_[node_id] = now + options_.retry_after_s;
  db::set_power_state(db, node_id, db::kPowerOn, now);
  fields["exit_status"] = o.exit_status;
  fields["signal"] = o.signal;
  const std::string tail = last_line(o.output);
  return {record(db, now, name, "error",
                 "autostop of node " + name + " failed: " + cmd + ": " + o.description +
                     (tail.empty() ? "" : " (" + tail + ")") + "; tried again in " +
                     idle_duration_text(options_.retry_after_s) + " if still idle",
                 fields)};
}

void IdleAutostop::tick_node(db::Database& db, const db::NodePower& p, double now, const WorkView& view,
                             const std::map<int64_t, double>& running, std::vector<AutostopNotice>& notices) {
  const int64_t id = p.node_id;
  const std::string& name = p.node_name;
  // A stop command of ours that is running: collect it when it has ended.
  if (auto it = pending_.find(id); it != pending_.end()) {
    if (auto outcome = it->second.command->poll()) {
      auto more = finish_stop(db, id, name, *outcome, now);
      notices.insert(notices.end(), more.begin(), more.end());
    }
    return;
  }
  // States a dead process left behind.
  if (p.state == db::kPowerStopping) {
    db::set_power_state(db, id, db::kPowerOn, now);
    not_before_[id] = now + options_.retry_after_s;
    notices.push_back(record(db, now, name, "warning",
                             "node " + name +
                                 " was left stopping by an earlier scheduler; its stop is tried "
                                 "again once it is idle",
                             {{"node", name}}));
    return;
  }
  if (p.state == db::kPowerStarting && !waking_.count(id)) {
    db::set_power_state(db, id, db::kPowerStopped, now);
    return;
  }
  const bool busy = view.busy.count(name) > 0 || running.count(id) > 0;
  if (p.state == db::kPowerStopped && running.count(id)) {
    // A run is running there (started by hand, or the node was started outside Flotilla): it is on.
    db::set_power_state(db, id, db::kPowerOn, now);
    notices.push_back(record(db, now, name, "info", "node " + name + " is running a run again: counted as on",
                             {{"node", name}}));
  } else if (p.state != db::kPowerOn) {
    db::close_idle_accrual(db, id, now);  // a stopped node accrues nothing
    return;
  }
  if (busy) {
    if (p.idle_since) db::set_idle_since(db, id, std::nullopt);
    // Idle up to the run's start there (its cost accrual's), not up to this tick.
    const auto r = running.find(id);
    const double until = r != running.end() && r->second > 0 ? std::min(now, r->second) : now;
    db::close_idle_accrual(db, id, until, "a run started");
    return;
  }
  if (!p.idle_limit_s) {  // autostop off: no idle clock, no idle money
    db::close_idle_accrual(db, id, now);
    if (p.idle_since) db::set_idle_since(db, id, std::nullopt);
    return;
  }
  if (const double rate = whole_rate(db, id); rate > 0) db::open_idle_accrual(db, id, now, rate);
  if (view.wanted.count(name)) {  // queued work could use it: the idle clock rests
    if (p.idle_since) db::set_idle_since(db, id, std::nullopt);
    return;
  }
  if (!p.idle_since) {
    db::set_idle_since(db, id, now);
    return;
  }
  const double idle_s = now - *p.idle_since;
  if (idle_s < *p.idle_limit_s || p.stop_argv.empty()) return;
  if (auto nb = not_before_.find(id); nb != not_before_.end() && now < nb->second) return;
  Pending pending;
  pending.command = std::make_unique<ArgvCommand>();
  pending.argv = p.stop_argv;
  pending.idle_s = idle_s;
  std::string why;
  if (!pending.command->start(p.stop_argv, options_.command_timeout_s, log_path(id, "stop"), &why)) {
    not_before_[id] = now + options_.retry_after_s;
    notices.push_back(record(db, now, name, "error",
                             "autostop of node " + name + " failed: " + command_text(p.stop_argv) + ": " +
                                 why + "; tried again in " + idle_duration_text(options_.retry_after_s) +
                                 " if still idle",
                             {{"node", name}, {"command", p.stop_argv}}));
    return;
  }
  db::set_power_state(db, id, db::kPowerStopping, now);
  pending_.emplace(id, std::move(pending));
}

std::vector<AutostopNotice> IdleAutostop::tick(db::Database& db, double now, const WorkView& view) {
  std::vector<AutostopNotice> notices;
  const std::map<int64_t, double> running = db::nodes_with_running_runs(db);
  const std::vector<db::NodePower> rows = db::list_node_power(db);
  // A node removed while its stop command ran: the command is ended (it has no row to settle).
  for (auto it = pending_.begin(); it != pending_.end();) {
    const bool listed =
        std::any_of(rows.begin(), rows.end(), [&](const db::NodePower& r) { return r.node_id == it->first; });
    it = listed ? std::next(it) : pending_.erase(it);
  }
  for (const db::NodePower& p : rows) {
    // One node's failure (a store error, a node removed meanwhile) is said and the others go on.
    try {
      tick_node(db, p, now, view, running, notices);
    } catch (const std::exception& e) {
      notices.push_back({p.node_name, "error", "autostop of node " + p.node_name + ": " + e.what(), now});
    }
  }
  return notices;
}

bool IdleAutostop::wake(db::Database& db, const std::string& node, std::string* why) {
  const auto n = db::find_node(db, node);
  const auto p = n ? db::node_power(db, n->id) : std::nullopt;
  if (!p || p->state == db::kPowerOn) return true;
  const auto fail = [&](const std::string& text, const std::string& state) {
    const double t = db::now_seconds();
    db::set_power_state(db, p->node_id, state, t);
    record(db, t, node, "error", text, {{"node", node}, {"command", p->start_argv}});
    if (why) *why = text;
    return false;
  };
  if (p->state == db::kPowerStopping || pending_.count(p->node_id)) {
    if (why)
      *why = "node " + node + " is being stopped by autostop; it can be started once its stop command ends";
    return false;
  }
  waking_.insert(p->node_id);
  struct Done {
    std::set<int64_t>& s;
    int64_t id;
    ~Done() { s.erase(id); }
  } done{waking_, p->node_id};
  const double began = db::now_seconds();
  db::set_power_state(db, p->node_id, db::kPowerStarting, began);
  if (!p->start_argv.empty()) {
    ArgvCommand cmd;
    std::string start_why;
    if (!cmd.start(p->start_argv, options_.command_timeout_s, log_path(p->node_id, "start"), &start_why))
      return fail("starting node " + node + " failed: " + command_text(p->start_argv) + ": " + start_why,
                  db::kPowerStopped);
    const CommandOutcome o = cmd.wait();
    if (!o.ok) {
      const std::string tail = last_line(o.output);
      return fail("starting node " + node + " failed: " + command_text(p->start_argv) + ": " + o.description +
                      (tail.empty() ? "" : " (" + tail + ")"),
                  db::kPowerStopped);
    }
  }
  // Its probe, until it answers.
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(options_.probe_timeout_s * 1000));
  std::string last_error;
  for (;;) {
    try {
      if (options_.probe)
        options_.probe(db, node);
      else
        check_node(access_, db, node, 1);
      break;
    } catch (const std::exception& e) {
      last_error = e.what();
    }
    const bool cancelled = options_.cancel && options_.cancel->load();
    if (cancelled || std::chrono::steady_clock::now() >= deadline)
      return fail("node " + node +
                      (p->start_argv.empty() ? "" : " was started (" + command_text(p->start_argv) + ")") +
                      " but did not answer its probe within " + idle_duration_text(options_.probe_timeout_s) +
                      (cancelled ? " (cancelled)" : "") + ": " + last_error,
                  db::kPowerStopped);
    const auto step = std::chrono::milliseconds(static_cast<int64_t>(options_.probe_interval_s * 1000));
    std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(
        step, std::max<std::chrono::steady_clock::duration>(deadline - std::chrono::steady_clock::now(),
                                                            std::chrono::milliseconds(0))));
  }
  const double t = db::now_seconds();
  db::write_tx(db, [&] {
    db::set_power_state(db, p->node_id, db::kPowerOn, t);
    db::set_idle_since(db, p->node_id, std::nullopt);
  });
  not_before_.erase(p->node_id);
  char secs[32];
  std::snprintf(secs, sizeof secs, "%.0f s", t - began);
  record(db, t, node, "info",
         "node " + node + " started for queued work" +
             (p->start_argv.empty() ? "" : " (" + command_text(p->start_argv) + ")") +
             "; its probe answered after " + secs,
         {{"node", node}, {"command", p->start_argv}, {"started", true}});
  return true;
}

void autostop_tick(IdleAutostop& autostop, db::Database& db, double now, const WorkView& view,
                   std::vector<AutostopNotice>* notices) {
  auto got = autostop.tick(db, now, view);
  if (notices) notices->insert(notices->end(), got.begin(), got.end());
}

}  // namespace flotilla::runs
