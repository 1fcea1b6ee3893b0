// Runs: create, find, change status, tag, annotate, fork, delete; nodes a run executes on.
//
// Decision: status changes go through one function, set_status(), which checks the state machine
// (docs/store.md), stamps started/ended times, records an event and splits the run's cost accruals
// (costs.h) in the same BEGIN IMMEDIATE transaction, so a crash can never leave a status without
// its accrual split. Every function takes the Database it runs on: the CLI calls them on its own
// connection, the UI from its writer thread (Writer::submit) or, for reads, its reader connection.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "db/database.h"

namespace flotilla::db {

enum class RunStatus { kCreated, kQueued, kRunning, kPaused, kPreempted, kStopped, kFailed, kCompleted };

const char* to_string(RunStatus s);
// Throws DbError(kInvalid) for an unknown name.
RunStatus parse_run_status(const std::string& name);
// Whether the state machine allows from -> to (same status: true, a no-op).
bool transition_allowed(RunStatus from, RunStatus to);
// Running is the only status that accrues cost; terminal statuses cannot be left.
bool is_terminal(RunStatus s);

struct Run {
  int64_t id = 0;
  std::string name;
  RunStatus status = RunStatus::kCreated;
  std::string config_toml, config_json;
  std::string target = "local";  // "local", a node name or a cluster name
  std::string run_dir;
  std::optional<int64_t> parent_id;
  std::string parent_kind;  // "", "resume" or "fork"
  std::vector<std::string> tags;
  std::string notes;
  double created_at = 0;
  std::optional<double> started_at, ended_at;
  std::optional<int64_t> exit_code;
  std::optional<int64_t> world_size, parameters;
  std::optional<double> flops_per_token;
  std::string summary_json;  // the worker's last summary record ("" until one arrives)
  std::optional<double> budget_usd;
  double budget_warn_fraction = 0.8;
  // The run's price, resolved when it last started (config, then node or machine price, then the
  // catalogue: runs/pricing.h) and stored with each node's share (costs.h set_run_price); every
  // accrual it opens uses that share. nullopt: never resolved (a run stored before schema v7).
  std::optional<double> usd_per_hour;
  std::string price_source;         // where the price came from, in words
  std::optional<double> max_hours;  // stop (with a checkpoint) after this much running time
  std::string status_note;          // why the latest status ("budget reached: $0.0201 of $0.02"); "" none
};

struct NewRun {
  std::string name;
  std::string config_toml, config_json;
  std::string target = "local";
  std::string run_dir;
  std::vector<std::string> tags;
  std::string notes;
  std::optional<double> budget_usd;
  double budget_warn_fraction = 0.8;
  std::optional<double> max_hours;
  double created_at = 0;  // 0: now
};

// Inserts a run (status created). Throws DbError(kConstraint) when the name is taken.
int64_t create_run(Database& db, const NewRun& run);
// `base` if free, else base-2, base-3, ...
std::string unique_run_name(const Database& db, const std::string& base);
// A run by exact name, or by id when `name_or_id` is all digits and no run has that name.
std::optional<Run> find_run(const Database& db, const std::string& name_or_id);
// find_run or DbError(kNotFound) naming the run and suggesting `flotilla runs list`.
Run get_run(const Database& db, const std::string& name_or_id);
Run get_run(const Database& db, int64_t id);

// Moves a run to `to` at time `at` (0: now). Checks the state machine (DbError kInvalid names both
// statuses), sets started_at on the first running, ended_at on a terminal or halted status, records
// an event with `reason`, and splits cost accruals. A change of status also sets the run's
// status_note to `note` (the short why shown next to the status; "" clears it). Returns the
// previous status. Outside db/, only the runs layer calls it (runs/run_status.h). `at_boot` is the
// monotonic (CLOCK_BOOTTIME) reading taken with a given `at` (0: unknown); with `at` 0 both are
// read now. Cost intervals measure their seconds by it (costs.h).
RunStatus set_status(Database& db, int64_t run_id, RunStatus to, double at = 0,
                     const std::string& reason = "", std::optional<int64_t> exit_code = std::nullopt,
                     const std::string& note = "", double at_boot = 0);

void set_notes(Database& db, int64_t run_id, const std::string& notes);
void set_tags(Database& db, int64_t run_id, const std::vector<std::string>& tags);
void set_budget(Database& db, int64_t run_id, std::optional<double> cap_usd, double warn_fraction = 0.8);
// The wall-time cap (nullopt: none); DbError(kInvalid) unless > 0.
void set_max_hours(Database& db, int64_t run_id, std::optional<double> max_hours);
// Replaces the stored config (a fork started from another checkpoint, a resumed run's resolved file).
void set_run_config(Database& db, int64_t run_id, const std::string& config_toml,
                    const std::string& config_json);
// What the worker's run_start said about the run: world size, parameters, FLOPs per token, and
// its config JSON when the row has none yet.
void record_run_facts(Database& db, int64_t run_id, int64_t world_size, int64_t parameters,
                      double flops_per_token, const std::string& config_json);
// The worker's summary record (the line as written).
void set_run_summary(Database& db, int64_t run_id, const std::string& summary_json);
// A local run folder in one spelling (D4 of the second audit): absolute, symlinks resolved as far as
// the path exists, "." and ".." folded, repeated and trailing '/' dropped. Anything that is not an
// absolute path (a node's "gpu-box:~/.flotilla/runs/x", "") is returned as it is.
std::string canonical_run_dir(const std::string& run_dir);
// The run whose folder is `run_dir`, if any: the same folder however either is spelled
// (canonical_run_dir of both, so rows stored before folders were stored canonical match too).
std::optional<Run> find_run_by_dir(const Database& db, const std::string& run_dir);
// A run whose local folder lies inside `run_dir` or holds it (never the same folder: that is
// find_run_by_dir), both compared canonical; nullopt for a remote folder.
std::optional<Run> find_run_nested_with(const Database& db, const std::string& run_dir);
void set_run_dir(Database& db, int64_t run_id, const std::string& run_dir);
// A new run (status created) that starts from `parent`'s config, recorded as its fork.
int64_t fork_run(Database& db, int64_t parent_id, const std::string& name);
// Deletes the run and everything it owns (metrics, blocks, checkpoints, events, accruals). Files on
// disk are not touched. Returns the number of metric rows removed.
int64_t delete_run(Database& db, int64_t run_id);

// Records an event (kind e.g. "status", "event", "sample", "budget"). Duplicates are ignored.
void add_event(Database& db, std::optional<int64_t> run_id, double time, const std::string& kind,
               const std::string& level, const std::string& message, const std::string& fields_json = "{}",
               int rank = 0);

// Nodes ------------------------------------------------------------------------------------------
struct Node {
  int64_t id = 0;
  std::string name, kind = "local", host, gpu_type;
  int64_t gpu_count = 0;
  std::optional<int64_t> cluster_id;
};

// Returns the node's id, creating it (kind, gpu_type, gpu_count as given) when missing.
int64_t ensure_node(Database& db, const std::string& name, const std::string& kind = "local",
                    const std::string& gpu_type = "", int64_t gpu_count = 0, const std::string& host = "");
std::optional<Node> find_node(const Database& db, const std::string& name);
std::vector<Node> list_nodes(const Database& db);
// Declares that `run_id` uses `devices` devices of node `node_id` (accruals start at the next running).
void attach_node(Database& db, int64_t run_id, int64_t node_id, int64_t devices);
// The run no longer uses the node (e.g. preempted and replaced): no accrual opens for it again;
// what it already accrued stays with the run.
void detach_node(Database& db, int64_t run_id, int64_t node_id);
// Where the run executes ("local", or its SSH nodes "a,b" with the master first).
void set_run_target(Database& db, int64_t run_id, const std::string& target);

}  // namespace flotilla::db
