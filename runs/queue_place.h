// Placement by measured cost (issue 37 item 2): where a queued run goes, and why, in words the user
// can check. Place keys ("local", "node:b", "nodes:a,b", "cluster:hpc/gpu"), what each place offers
// now (devices, memory per device, price, busy devices, powered off, jobs ahead), each place's
// predicted speed calibrated by its measured speed on earlier runs of the same model shape, and the
// choice: the lowest predicted cost to finish among the places that fit, meet the deadline and stay
// within the budget (docs/scheduling.md "Placement" states every rule and formula).
//
// Decision: the choice is a pure function of the entry, the offers and the speed history, so the
// scheduler, a test and the Queue page weigh the same numbers; only list_places and speed_history
// read the store. A predicted figure is always labelled predicted, and what it rests on ("measured:
// 3 runs, median 1234 tok/s", "planner, uncalibrated") travels with it into the decision JSON that
// the Costs page reads back (parse_decision_json).
//
// Decision: a place without a price is "unpriced", never $0 - except this machine, which the
// workspace owns: without a price it counts as $0 ("no price set") so it wins when it is in time,
// as the "local: $0 but 11 h" reads. An unpriced node or cluster is ranked after every
// priced place, and no unpriced place can be held to a money cap (RunService refuses a cap on an
// unpriced run: runs/pricing.h check_budget_is_priced), so under max_usd it does not qualify.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "db/database.h"
#include "engine/config/run_config.h"
#include "engine/core/probe.h"
#include "engine/plan/planner.h"
#include "runs/placement.h"

namespace flotilla::runs {

// ---- place keys ---------------------------------------------------------------------------------

enum class PlaceKeyKind { kLocal, kNode, kNodes, kCluster };

struct PlaceKey {
  PlaceKeyKind kind = PlaceKeyKind::kLocal;
  std::vector<std::string> nodes;  // kNode: one name; kNodes: several, the master first
  std::string cluster;             // kCluster
  std::string partition;           // kCluster: "" for the cluster's default partition
  // The canonical key: "local", "node:b", "nodes:a,b", "cluster:hpc", "cluster:hpc/gpu".
  std::string key() const;
  bool operator==(const PlaceKey& o) const { return key() == o.key(); }
};

// Parses a place key. Throws flotilla::Error(kUsage) naming the key (made printable) and the
// accepted forms for anything else: an unknown kind, an empty or repeated name, a node name outside
// remote/validate_node_name's allow-list, a cluster or partition outside validate_slurm_name's.
// Nothing is looked up: hostile text is refused before any store access.
PlaceKey parse_place_key(std::string_view text);
// The accepted forms, for messages and --help: "local, node:NAME, nodes:A,B, cluster:NAME[/PARTITION]".
const char* place_key_forms();
// In words: "this machine", "node b", "nodes a, b", "cluster hpc", "cluster hpc (partition gpu)".
std::string place_key_text(const PlaceKey& key);
// Whether `allowed` (a key the user named with --on) admits `offer`: the same key, or a cluster
// key without a partition admitting every partition of that cluster.
bool place_allows(const PlaceKey& allowed, const PlaceKey& offer);
// The place key of a stored run from its target ("local", "a,b", "slurm:hpc") and, for a Slurm run,
// its job's partition. "" when the target reads as none of these.
std::string run_place_key(const std::string& target, const std::string& slurm_partition = "");

// What a start on the key needs besides the key: the ranks the chosen layout launches, whether they
// use GPUs, and the predicted seconds (a Slurm job's time limit: 1.5 x predicted + 10 min, at
// least 15 min, at most 7 days).
struct PlaceShape {
  int ranks = 1;
  bool gpus = false;
  double predicted_s = 0;
};
// The runs::Placement that starts a run there. Checks the names exist in the store (DbError
// kNotFound naming the missing node or cluster, as get_ssh_node / get_cluster do).
Placement placement_for(const PlaceKey& key, const db::Database& db, const PlaceShape& shape = {});
// place_key_text of a stored key; the key itself when it does not parse (a row from a newer build).
std::string place_words(const std::string& key);
// Slurm's "[D-]HH:MM:SS" for a Slurm time limit.
std::string slurm_time_limit(double seconds);

// ---- inventory ----------------------------------------------------------------------------------

// A running run holding devices of a place: how many, and when it should end (for "free in ~20 min").
struct BusyRun {
  std::string run;
  int devices = 0;
  double seconds_left = -1;  // -1: unknown (no pace or no planned steps)
};

// One hour of a place's devices: a fixed part (a node priced as a whole with no GPU count) plus a
// part per device; a several-node place adds one per node, its devices spread evenly.
struct PriceRule {
  bool priced = false;
  double usd_fixed_per_hour = 0;
  double usd_per_device_hour = 0;
  std::string source;  // "flat $2/h for 4 GPUs", "partition gpu: $0.9/GPU-h", "no price set"
};

struct PlaceOffer {
  PlaceKey key;
  std::string label;  // place_key_text(key)
  // Capacity. GPU runs use gpus; CPU runs use cpu_ranks (one rank per core at least).
  int gpus = 0;
  std::string gpu_type;        // as probed ("NVIDIA H100 80GB HBM3"), "" when none or unknown
  uint64_t gpu_mem_bytes = 0;  // per GPU; 0: unknown (memory not checked, said so)
  int cpu_ranks = 0;
  uint64_t host_mem_bytes = 0;  // shared by the CPU ranks of a run; 0: unknown
  double cpu_core_flops = 0;    // one core's peak (cpu_profile_nominal(1)); 0: this machine's assumed
  // Now: devices of each kind held by running runs, and when those runs should end.
  int gpus_busy = 0, cpus_busy = 0;
  std::vector<BusyRun> busy_gpu_runs, busy_cpu_runs;
  // Price of GPUs and of CPU ranks (a node's price covers whatever a run uses of it).
  PriceRule gpu_price, cpu_price;
  // A node that autostop powered off (node_power.state): starting there first waits wake_s.
  std::string power_state = "on";  // on, stopping, stopped, starting
  double wake_s = 0;
  // A cluster: the jobs ahead in the partition's queue (the scheduler fills it; 0 unknown or none)
  // and the wait each is taken to add.
  int jobs_ahead = 0;
  double seconds_per_job_ahead = 0;
  std::string note;  // what is assumed ("CPU ranks assumed: 4 (no probe)") or ""
  // Measured links from this node to the other stored nodes (newest per pair, db::latest_links). A
  // place of several nodes plans its communication over the slowest link among them, as
  // runs/plan_links.h does: bandwidth = min(device profile's, measured), latency per collective =
  // the profile's + 2 (n - 1) one-way latencies; a pair not measured keeps the profile's link.
  struct Link {
    std::string to;
    double bytes_per_s = 0, latency_s = 0;
  };
  std::vector<Link> links;
  double link_bytes_per_s = 0;  // several nodes: the slowest measured link's bandwidth; 0 = not all measured
  double link_latency_s = 0;    // several nodes: 2 (n - 1) x its one-way latency
};

// What this machine has (the caller probes it once: engine/core/probe.h probe_machine, the facts the
// app's Nodes page shows); list_places never probes.
struct LocalFacts {
  int gpus = 0;
  std::string gpu_type;
  uint64_t gpu_mem_bytes = 0;
  int cpu_cores = 0;            // 0: std::thread::hardware_concurrency()
  uint64_t host_mem_bytes = 0;  // 0: cpu_profile_nominal's usable memory
};

struct InventoryOptions {
  // nullopt: the GPUs stored for node "local" (else none), the cores and memory read by this process.
  std::optional<LocalFacts> local;
  bool include_local = true;
  int node_cpu_ranks = 4;  // CPU ranks of a node or partition whose probe gives none
  double wake_s = 300;     // a powered-off node's start, until its probe answers
  double seconds_per_job_ahead = 900;
  double now = 0;  // 0: db::now_seconds() (a node starting since T has wake_s - (now - T) left)
};

// Every place of the workspace: this machine, each stored SSH node, each stored Slurm cluster's
// partitions (from its last probe; the cluster with its default partition when never probed).
std::vector<PlaceOffer> list_places(const db::Database& db, const InventoryOptions& options = {});
// This machine's facts from a probe (engine/core/probe.h probe_machine: the app and the CLI hold one).
LocalFacts local_facts(const ProbeResult& probe);

// The planner's GPU profile (engine/plan/planner.h gpu_profile_names) for a probed GPU name:
// "NVIDIA H100 80GB HBM3" -> "h100-sxm"; "" when none matches.
std::string gpu_profile_for(const std::string& gpu_type);

// ---- speed history -------------------------------------------------------------------------------

// One earlier run's measured speed on one place (runs/run_speed.h's figure).
struct SpeedSample {
  std::string place;  // its place key
  std::string run;
  RunConfig config;
  double tokens_per_s = 0;
  double when = 0;
};
struct SpeedHistory {
  std::vector<SpeedSample> samples;  // newest first
};
// Stored runs with a readable config and a measured speed, newest first, at most `limit`.
SpeedHistory speed_history(const db::Database& db, int limit = 200);
// Same model shape: architecture, n_layer, n_embd, n_head, vocab, seq_len, micro-batch, LoRA or
// not, device kind and dtype (the layout may differ: the planner carries the speed across layouts).
bool same_model_shape(const RunConfig& a, const RunConfig& b);

// ---- estimate and choice -------------------------------------------------------------------------

struct EntryNeeds {
  int64_t steps_to_go = -1;        // -1: the config's train.steps
  int64_t tokens_per_step = 0;     // 0: the config's (engine tokens_per_step)
  std::optional<double> deadline;  // unix seconds
  std::optional<double> max_usd;
  std::vector<std::string> allowed;  // place keys (--on); empty: every place
  double now = 0;                    // 0: db::now_seconds()
};

// One place weighed.
struct PlaceEstimate {
  std::string key, label;
  bool fits = false;
  std::string why_not;  // "" when it fits
  Layout layout;
  std::string layout_text;  // "dp=2 tp=1 pp=1"
  int devices = 0;          // what the layout uses
  bool gpus = false;
  double tokens_per_s = 0;  // predicted
  std::string basis;        // "measured: 3 runs, median 1234 tok/s" / "planner (uncalibrated)"
  double wait_s = 0;        // before it can start: busy devices, waking, jobs ahead
  bool wait_known = true;   // false: busy with runs whose end is not known
  double seconds = 0;       // wait + running until the last step
  bool priced = false;
  double usd = 0;  // predicted cost to finish (running time x price); 0 when unpriced
  double usd_per_hour = 0;
  bool meets_deadline = true;
  bool within_budget = true;
  std::string clause;  // its clause in the decision's words
};

struct Decision {
  double time = 0;
  bool start = false;  // start now on `chosen`
  bool waits = false;  // `chosen` is the best place but busy (or waking): wait for it
  std::string chosen;  // the chosen place key ("" when refused)
  Layout layout;       // the chosen place's layout
  std::string words;   // one clause per place, the chosen first; or the refusal with every figure
  std::vector<PlaceEstimate> places;
  std::vector<std::string> wake_nodes;  // powered-off nodes of `chosen` to start (the idle hook's wake)
  const PlaceEstimate* chosen_estimate() const;
};

// Weighs every offer the entry allows and picks one (rules: docs/scheduling.md "Placement").
Decision choose_place(const RunConfig& config, const EntryNeeds& needs, const std::vector<PlaceOffer>& offers,
                      const SpeedHistory& history);

// The Placement of a decision's chosen place (placement_for with its devices, device kind and
// predicted running seconds). Throws flotilla::Error(kUsage) when the decision chose nothing.
Placement decision_placement(const Decision& decision, const db::Database& db);

// The decision as queue_entries.decision stores it (docs/scheduling.md) and back. parse accepts
// what decision_json writes (unknown fields ignored); throws flotilla::Error(kUsage) on text that is
// not a decision object.
std::string decision_json(const Decision& decision);
Decision parse_decision_json(const std::string& text);

// Words: "3 h 10 min", "45 min", "30 s"; "$1.92", "$0.0042"; "Tue 18:00" (this machine's time zone).
std::string duration_words(double seconds);
std::string usd_words(double usd);
std::string time_words(double unix_seconds);

}  // namespace flotilla::runs
