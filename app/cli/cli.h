// The headless commands of `flotilla` (docs/cli.md): shared context, argument helpers, commands.
//
// Decision: each command group is one file (run.cpp, runs.cpp, compare.cpp, costs.cpp) over the
// Qt-free db/ and runs/ APIs, so a command is what a script or the UI would do with the store,
// printed; a run's lifecycle is the runs layer's, never the command's. This library links no
// widget code (the layer guard forbids including ui/ here). The
// store is opened per command (--db PATH, else the workspace database) and every problem reaches
// the user once, through cli_main's handler, with its exit code (listed by flotilla --help).
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "db/database.h"

namespace flotilla::cli {

// Exit codes of the headless commands (`run` and `runs resume` return the worker's instead).
inline constexpr int kExitOk = 0;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitConfig = 3;    // the run config cannot be read (as flotilla-worker)
inline constexpr int kExitNotFound = 4;  // no such run, node or price
inline constexpr int kExitStore = 6;     // the run database cannot be opened or written
inline constexpr int kExitRefused = 9;   // the store refused the request (e.g. resuming a completed run)

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Context {
  std::string workspace;          // "" = the default workspace
  std::string db_path;            // --db PATH ("" = <workspace>/flotilla.db)
  std::vector<std::string> args;  // arguments after the command name
  std::string command;            // the command's name ("runs", "run", ...), for messages
};

// The database path this invocation uses.
std::string database_path(const Context& ctx);
// Opens (creating and migrating) the store and seeds the pricing catalogue when it changed; then
// settles the store's stale local runs (running with their worker gone: runs/stale_runs.h),
// saying so on stderr, with `origin` ("flotilla runs list") as who settled them.
db::Database open_store(const Context& ctx, const std::string& origin = "flotilla");

// True for an argument that is an option ("--quiet", "-rf"), not a value. A '-' followed by a
// digit or ".digit" is a negative number, and a lone "-" is a value: those are values, which the
// option's own check then accepts or refuses ("--budget -1": "needs a positive number").
bool looks_like_option(const std::string& arg);

// Small argument reader: flags, options with a value, positionals; unknown options are errors.
// An option's value is the next argument unless that looks like an option (looks_like_option) or
// another option already took it: then the option "needs a value" (D17: `--name --budget` must not
// name a run "--budget"). A value that starts with '-' is written --option=VALUE. After "--" every
// argument is a positional (a run stored under an older rule as "-x": runs show -- -x).
class ArgReader {
 public:
  ArgReader(std::vector<std::string> args, std::string command);
  bool flag(const std::string& name);
  std::optional<std::string> value(const std::string& name);
  std::vector<std::string> values(const std::string& name);
  std::optional<double> number(const std::string& name);
  // The remaining positionals; throws UsageError on a leftover option.
  std::vector<std::string> positionals();

 private:
  std::vector<std::string> args_;
  std::vector<bool> used_;
  std::string command_;
  size_t end_ = 0;  // the index of "--" (args_.size() when absent): options stop there
};

// Formatting helpers.
std::string format_time(double unix_seconds);   // "2025-01-31 14:02" (local time), "-" for 0
std::string format_duration(double seconds);    // "1h02m", "3m05s", "12.3s"
std::string format_number(double v);            // 12.3k, 4.56M, ...
std::string format_usd(double usd);             // runs::usd_text: "$0.0014", "$12.35"
std::string csv_field(const std::string& s);    // quoted when needed
std::string json_string(const std::string& s);  // a JSON string literal
// --deadline of `queue add` and `sweep`: "+3h" / "+90m" / "+2d" / "+30s" from `now`, "2026-12-08 18:00"
// or 2026-12-08T18:00[:SS] (local time; Z for UTC), or unix seconds. UsageError naming --deadline.
double parse_deadline(const std::string& text, double now);

// Commands (args exclude the command name).
int cmd_run(const Context& ctx);
int cmd_runs(const Context& ctx);
int cmd_compare(const Context& ctx);
int cmd_costs(const Context& ctx);
int cmd_pricing(const Context& ctx);
int cmd_nodes(const Context& ctx);     // nodes.cpp
int nodes_links(const Context& ctx, ArgReader& args);  // nodes_links.cpp: the link matrix (issue 36)
int cmd_plan(const Context& ctx);      // plan.cpp
int cmd_clusters(const Context& ctx);  // clusters.cpp: Slurm clusters
int cmd_queue(const Context& ctx);     // queue.cpp: the run queue and its scheduler
int cmd_sweep(const Context& ctx);     // sweep.cpp: sweeps (issue 37)
int cmd_models(const Context& ctx);    // models.cpp: the Hugging Face cache, by name (issue 40)
// `nodes autostop NAME ...` (autostop.cpp): a node's idle limit and its stop/start commands.
int nodes_autostop(const Context& ctx, ArgReader& args);
// `runs eval RUN --task FILE ...` (runs_eval.cpp): a checkpoint scored on a task file, stored as the
// run's task metrics.
int runs_eval(const Context& ctx, ArgReader& args);

}  // namespace flotilla::cli
