// Idle autostop in the store: a rented node's idle limit and its owner's stop/start commands
// (node_power), and what the node cost while it was powered with no run (idle_accruals).
//
// Decision: a command is stored as a JSON array of arguments exactly as the user gave them and is
// read back as that list; the store never joins it into a line, so nothing downstream can hand it
// to a shell. An idle accrual is one interval of one node with no run, at the node's whole rate
// resolved when it opened (a later price edit never rewrites it), closed when a run starts there
// or autostop stops the node (its note then says so). Amounts are computed when read with the
// Accrual arithmetic of costs.h (wall times: these rows carry no monotonic readings), so idle
// dollars and run dollars are one kind of number.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "db/costs.h"
#include "db/database.h"

namespace flotilla::db {

// on: powered (may accrue idle cost); stopping: its stop command is running; stopped: off, nothing
// accrues; starting: its start command ran and its probe is awaited.
inline constexpr char kPowerOn[] = "on";
inline constexpr char kPowerStopping[] = "stopping";
inline constexpr char kPowerStopped[] = "stopped";
inline constexpr char kPowerStarting[] = "starting";

struct NodePower {
  int64_t node_id = 0;
  std::string node_name;               // read only (nodes.name)
  std::optional<double> idle_limit_s;  // empty: autostop off (the commands are kept)
  std::vector<std::string> stop_argv, start_argv;
  std::string state = kPowerOn;
  double since = 0;                  // when `state` was entered (wall time)
  std::optional<double> idle_since;  // since when no run and no queued work wanted the node
};

// Stores the node's idle limit and commands (insert or update); its state, since and idle_since
// are kept when the row exists. DbError(kNotFound) when the node does not exist.
void set_node_power(Database& db, const NodePower& settings);
// Turns autostop off for the node (idle limit cleared, commands kept); false when it had no row.
bool clear_idle_limit(Database& db, int64_t node_id);
std::optional<NodePower> node_power(const Database& db, int64_t node_id);
// Every row, by node name.
std::vector<NodePower> list_node_power(const Database& db);
// Moves the node to `state` (one of the kPower* names) at `at`; DbError(kInvalid) for another name.
void set_power_state(Database& db, int64_t node_id, const std::string& state, double at);
void set_idle_since(Database& db, int64_t node_id, std::optional<double> since);

// A JSON array of strings <-> an argument list; DbError(kInvalid) for text that is not one.
std::string argv_to_json(const std::vector<std::string>& argv);
std::vector<std::string> argv_from_json(const std::string& text);

// The nodes attached to a run whose status is running (run_nodes), each with when its earliest open
// cost accrual began (the run's start there; 0 when none is open): busy whatever the queue says.
std::map<int64_t, double> nodes_with_running_runs(const Database& db);

// Idle accruals ---------------------------------------------------------------------------------
struct IdleAccrual {
  int64_t id = 0, node_id = 0;
  std::string node_name;
  double start = 0;
  std::optional<double> end;  // open while the node is powered with no run
  double usd_per_hour = 0;
  std::string note;  // e.g. "stopped by autostop after 30 min idle"
};
// Opens an interval at `start` unless the node has one open; true when it opened one.
bool open_idle_accrual(Database& db, int64_t node_id, double start, double usd_per_hour,
                       const std::string& note = "");
// Closes the node's open interval at `end` (never before its start), setting its note when not
// empty; false when none was open.
bool close_idle_accrual(Database& db, int64_t node_id, double end, const std::string& note = "");
// Intervals that overlap [from, to] (to 0: the present), oldest first; every one when both are 0.
std::vector<IdleAccrual> idle_accruals(const Database& db, double from = 0, double to = 0);

// These intervals clipped to [from, to] as costs.h Accruals (run_id 0, status "idle", 0 devices,
// the note as rate_source), to be summed with accrued_until() / running_until().
std::vector<Accrual> idle_as_accruals(const std::vector<IdleAccrual>& rows, double from, double to);
// Idle time and money per node in [from, to] (to 0: the present): key = node name, usd, priced,
// running_s / hours = idle seconds (overlaps once). By node name.
std::vector<CostLine> idle_costs_by_node(const Database& db, double from = 0, double to = 0);
// Every node's idle dollars in [from, to].
double idle_cost_usd(const Database& db, double from = 0, double to = 0);

// Autostop's events (kind "autostop", no run) in [from, to] (to 0: the present), oldest first.
struct PowerEvent {
  double time = 0;
  std::string node, level, message;
  bool stopped = false;  // a stop that succeeded (fields.stopped)
  double idle_s = 0;     // how long it had been idle then
};
std::vector<PowerEvent> power_events(const Database& db, double from = 0, double to = 0);

}  // namespace flotilla::db
