// Creating a run before anything starts: check its config, name it, give it a folder, price it,
// and store it, for every caller (flotilla run, the app's wizard and demo, forks, runs on nodes).
//
// Decision: one naming scheme. A run is called what it is asked to be called (--name, the
// wizard's name, run.name); when that name is taken in the store, or its folder already holds
// another run's files, it becomes NAME-2, NAME-3, ... (an explicit name that is taken is refused
// instead: continue that run with resume). Its folder is run.out_dir, else <runs root>/<name>, the
// runs root being ./runs for the terminal and <workspace>/runs for the app; a folder another run
// owns is refused. The config is validated first (every problem at once) so an invalid run
// starts nothing and leaves no row; the row, its node, its price and its limits are written in
// one transaction, so a full disk leaves no half-made run behind.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "db/writer.h"
#include "engine/config/run_config.h"
#include "runs/pricing.h"

namespace flotilla::runs {

struct NewRunRequest {
  RunConfig config;                  // loaded, every --set applied
  std::string name;                  // the name asked for ("": config.run.name)
  bool explicit_name = false;        // refuse a taken name instead of picking NAME-2
  std::string runs_root;             // where run folders go when run.out_dir is empty (absolute)
  std::optional<double> budget_usd;  // --budget: overrides budget.max_usd
  std::optional<int> max_restarts;   // --max-restarts: overrides run.max_restarts
  std::optional<int64_t> fork_of;    // the parent run (recorded as a fork)
  std::string notes;
  // The app's demo: `flotilla-worker demo` uses its own built-in config, so none is written or
  // stored for it (the worker's run_start fills the row's config in).
  bool demo = false;
};

struct NewRun {
  int64_t run_id = 0;
  std::string name, run_dir;
  std::string config_path;  // <run dir>/run.toml: the resolved config the worker starts from
  RunConfig config;         // with run.name, run.out_dir and run.max_restarts final
  RunPrice price;
  RunLimits limits;
};

// The one rule for the name of a new run, whatever its kind (a local run, a fork, a run on SSH
// nodes or a Slurm cluster, the app's wizard and demo): 1 to 64 characters from A-Z a-z 0-9 '.'
// '_' '-', the first a letter or a digit. The name becomes a folder (<runs root>/<name>,
// ~/.flotilla/runs/<name>-<id> on a node) and a command-line argument, so "." and "..", '/',
// whitespace, control characters and a leading '-' or '.' are refused before any row, folder or
// process exists. Throws flotilla::Error (kConfig) quoting the name (control characters escaped),
// what breaks the rule, and the rule. Only creation applies it: runs stored under the older, looser
// rule stay addressable by show, delete and resume (the worker's own run.name check is that
// looser superset, so their restarts still validate).
void check_new_run_name(const std::string& name);
// The same rule as a message ("" when `name` follows it), for forms that show it beside the field.
std::string new_run_name_problem(const std::string& name);

// When model.init_from names a Hugging Face folder, sets the model's architecture and shape from
// its config.json, and when lora.init_from names a PEFT adapter, [lora]'s rank, alpha, targets and
// rsLoRA from its adapter_config.json, as the worker does at start (so what is validated, stored
// and shown is the model that trains). Throws flotilla::Error (kConfig) naming the key.
void resolve_model_source(RunConfig& config);

// Throws flotilla::Error (kConfig) listing every problem of `config` (its model resolved as above)
// for `ranks` ranks.
void validate_run_config(const RunConfig& config, int ranks);

// A run on a node or a cluster writes only inside its run folder there (~/.flotilla/runs/<run>;
// docs/reliability.md S8's allowed root): the config's paths the worker writes to
// (checkpoint.export_hf, checkpoint.export_peft) must be relative and stay inside it. Throws flotilla::Error (kConfig)
// naming the key, the value and the fix; `where` names the target ("node gpu-box").
void check_remote_write_paths(const RunConfig& config, const std::string& where);

// Validates, names, places, prices and stores a local run (status created, this machine's node
// attached with dp*tp*pp devices) and writes its config file; starts nothing. Throws
// flotilla::Error (kConfig) for an invalid config, DbError (kConstraint) for a taken explicit name
// or a folder another run owns, DbError (kInvalid) for a budget on an unpriced machine (the fix
// named), DbError for a store that refused.
NewRun create_local_run(db::Writer& writer, const NewRunRequest& request);

// The same scheme for a run that is not stored (the app without a run database): <root>/<base>,
// else <root>/<base>-2, ... (the first folder that does not hold files). Returns {name, dir}.
std::pair<std::string, std::string> place_unstored_run(const std::string& runs_root, const std::string& base);

// Re-prices a stored run before it starts again (resume): the price and limits are those of
// now, stored on the run. Throws as create_local_run does for an unpriced budget.
RunPrice reprice_for_start(db::Writer& writer, int64_t run_id, const RunConfig& config,
                           std::optional<double> budget_usd = std::nullopt);

// The config a stored local run starts from again: the worker's resolved copy in its folder
// (config.toml), else the one written at creation (run.toml), else the store's text written
// out as flotilla-config.toml. "" when none can be had.
std::string stored_config_file(const db::Run& run);

}  // namespace flotilla::runs
