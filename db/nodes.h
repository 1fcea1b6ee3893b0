// SSH nodes in the store: how to reach them, what they cost, and what their GPUs reported.
//
// Decision: the store keeps only what is needed to connect (host, port, user, the PATH of a key
// file) and never a secret: passphrases are asked when a key is used and forgotten (docs/reliability.md
// S10). Field validation is the caller's (remote/validate.h, remote/node_fields.h): db/ does not
// depend on remote/, and a row that reaches the store has been checked where the user typed it.
// Price and spot/on-demand live in node_pricing (costs.h), so accruals use the same rate source
// as every other node.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "db/database.h"

namespace flotilla::db {

struct SshNode {
  int64_t id = 0;
  std::string name;
  std::string host;
  int port = 22;
  std::string user;                    // "": the local user (or ~/.ssh/config)
  std::string key_path;                // "": ssh-agent, then the default key files
  std::optional<double> usd_per_hour;  // flat price of the whole node
  bool spot = false;
  std::vector<std::string> labels;
  std::string gpu_type;  // from the last probe
  int64_t gpu_count = 0;
  double created_at = 0;
};

// Inserts an ssh node. Throws DbError(kConstraint) when the name is taken.
int64_t add_ssh_node(Database& db, const SshNode& node);
// Rewrites every field of node `name` (the new name may differ). DbError(kNotFound) if missing.
void update_ssh_node(Database& db, const std::string& name, const SshNode& node);
// Deletes the node and its samples; DbError(kConstraint) naming the runs when runs used it.
void remove_node(Database& db, const std::string& name);
std::optional<SshNode> find_ssh_node(const Database& db, const std::string& name);
// find_ssh_node or DbError(kNotFound) suggesting `flotilla nodes list`.
SshNode get_ssh_node(const Database& db, const std::string& name);
// Every node of kind ssh, by name.
std::vector<SshNode> list_ssh_nodes(const Database& db);
// The ssh nodes attached to run `run_id` (run_nodes), by node id.
std::vector<SshNode> run_ssh_nodes(const Database& db, int64_t run_id);
// Every node attached to run `run_id` (run_nodes), of any kind ("local" included), by node id.
struct RunNodeRef {
  int64_t node_id = 0;
  std::string name, kind;
  int64_t devices = 1;
};
// In the order they were attached: the launch's node order (node i holds ranks i*devices ..).
std::vector<RunNodeRef> list_run_nodes(const Database& db, int64_t run_id);
// Records what a probe found (GPU type and count; they scale the node's price per device).
void set_node_gpus(Database& db, int64_t node_id, const std::string& gpu_type, int64_t gpu_count);
// The node's GPU count only (the type stays), e.g. `flotilla pricing node NAME --gpus N`.
void set_node_gpu_count(Database& db, int64_t node_id, int64_t gpu_count);

// One device's reading at one time (system_samples).
struct SystemSample {
  int64_t node_id = 0;
  int device = 0;
  double time = 0;
  std::optional<double> utilization;                 // percent
  std::optional<int64_t> memory_used, memory_total;  // bytes
  std::optional<double> power_w, temperature_c;
};
// Inserts samples in one transaction; a repeated (node, device, time) replaces the old reading.
void insert_system_samples(Database& db, const std::vector<SystemSample>& samples);
// Samples of a node with time >= since, oldest first (every device).
std::vector<SystemSample> system_samples(const Database& db, int64_t node_id, double since = 0);
// The newest sample of each device of a node.
std::vector<SystemSample> latest_system_samples(const Database& db, int64_t node_id);

// Labels are stored as one comma-separated text; exposed for tests.
std::string join_labels(const std::vector<std::string>& labels);
std::vector<std::string> split_labels(const std::string& text);

// One link of the latency matrix (node_latency): the median TCP connect time from one node to
// another, or why it could not be measured. The store's local node stands for this machine.
struct NodeLatency {
  int64_t from_node = 0;
  int64_t to_node = 0;
  std::optional<double> rtt_ms;  // median ms; empty when `error` is set
  std::string error;             // "" when measured
  double measured_at = 0;
};
// Inserts or replaces each (from, to) link in one transaction (the latest measurement wins).
// DbError(kInvalid) for a row with neither a time nor an error, or a negative time.
void upsert_node_latency(Database& db, const std::vector<NodeLatency>& rows);
// The stored links, ordered by from and to; only those between `node_ids` when it is not empty.
std::vector<NodeLatency> node_latency_matrix(const Database& db, const std::vector<int64_t>& node_ids = {});

}  // namespace flotilla::db
