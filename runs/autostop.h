// Idle autostop: a rented node with an idle limit is stopped by its owner's command once the queue
// has had no work for it that long, stops accruing its price, and is started again (its start
// command, then its probe) when work arrives.
//
// Decision: tick() never blocks the scheduler: a stop command is started (state on -> stopping) and
// collected by later ticks (-> stopped, or back to on after a failure). A failed stop is recorded as
// an error event naming the command and its exit status and is not tried again for retry_after_s
// (kept in this object: a restarted scheduler tries once more after the idle limit, never in a
// loop). wake() does block: the scheduler calls it before starting an entry on a stopped node and
// cannot start there until the node's probe answers. A 'stopping' or 'starting' state left by a
// process that died is settled on the first tick (to on, resp. stopped: a half-started node is
// started again, and starting a started VM is harmless).
//
// Idle money: while an autostop node is on with no run, one idle accrual is open at the node's
// whole rate (db/node_power.h); a run starting there, or autostop stopping it, closes it. A node is
// busy when the scheduler says so or when a run in the store is running on it (a run started by
// hand keeps it on too).
//
// Nothing read from a node reaches a command: the argv is the stored list, verbatim; the node's
// name appears only in messages.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "db/database.h"
#include "db/node_power.h"
#include "runs/argv_command.h"
#include "runs/ssh_options.h"

namespace flotilla::runs {

// What the scheduler knows this tick, by stored node name (a place key node:A / nodes:A,B names
// its nodes).
struct WorkView {
  std::set<std::string> busy;    // nodes of entries starting or running
  std::set<std::string> wanted;  // nodes that a queued entry could use now (their idle clock rests)
};

struct AutostopOptions {
  std::string log_dir;                        // <dir>/node-<id>-stop.log / -start.log ("": no logs)
  double command_timeout_s = 600;             // a stop or start command is killed (its group) after this
  double retry_after_s = 600;                 // after a failed stop, the next try no sooner
  double probe_timeout_s = 600;               // wake: how long the node may take to answer its probe
  double probe_interval_s = 5;                // wake: between probes
  const std::atomic<bool>* cancel = nullptr;  // wake gives up when it turns true
  // How wake() checks the node answers (throws when not). Empty: runs::check_node over SSH (the
  // probe is stored as `flotilla nodes probe` stores it).
  std::function<void(db::Database&, const std::string& node)> probe;
};

// What happened, for the front end to notify (each is also an event in the store, run_id NULL,
// kind "autostop").
struct AutostopNotice {
  std::string node;
  std::string level;  // info, warning, error
  std::string text;   // "node vm-1 stopped by autostop at 03:12 after 30 min idle"
  double time = 0;
};

class IdleAutostop {
 public:
  explicit IdleAutostop(AutostopOptions options = {}, SshAccess access = {});
  ~IdleAutostop();  // a stop command still running is killed (the next tick settles its state)
  IdleAutostop(const IdleAutostop&) = delete;
  IdleAutostop& operator=(const IdleAutostop&) = delete;

  // One pass over every node with an idle limit at wall time `now`; returns what to notify.
  std::vector<AutostopNotice> tick(db::Database& db, double now, const WorkView& view);
  // Brings stored node `node` back: nothing when it has no autostop row or is on; else its start
  // command (state starting), then its probe until it answers (state on) or probe_timeout_s passes
  // (state stopped). False with `why` when it is not on at the end.
  bool wake(db::Database& db, const std::string& node, std::string* why);
  // Whether a stop command of this object is running for node `node_id`.
  bool stopping(int64_t node_id) const { return pending_.count(node_id) > 0; }

 private:
  struct Pending {
    std::unique_ptr<ArgvCommand> command;
    std::vector<std::string> argv;
    double idle_s = 0;
  };
  void tick_node(db::Database& db, const db::NodePower& p, double now, const WorkView& view,
                 const std::map<int64_t, double>& running, std::vector<AutostopNotice>& notices);
  std::vector<AutostopNotice> finish_stop(db::Database& db, int64_t node_id, const std::string& name,
                                          const CommandOutcome& outcome, double now);
  std::string log_path(int64_t node_id, const char* what) const;

  AutostopOptions options_;
  SshAccess access_;
  std::map<int64_t, Pending> pending_;
  std::map<int64_t, double> not_before_;  // node -> no stop try before this wall time
  std::set<int64_t> waking_;
};

// The tick hook the scheduler runs (Scheduler::tick_hooks wraps it with the WorkView it fills).
void autostop_tick(IdleAutostop& autostop, db::Database& db, double now, const WorkView& view,
                   std::vector<AutostopNotice>* notices = nullptr);

}  // namespace flotilla::runs
