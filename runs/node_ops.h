// The one place for what the front ends do with stored nodes and clusters outside a run: probe a
// node (its system, GPUs and latency, stored), probe a cluster (its Slurm, stored), measure the
// latency matrix, forget a host key; all through the one set of SSH options (ssh_options.h).
//
// Decision: the CLI's `flotilla nodes` / `clusters` commands and the app's Nodes and Clusters
// pages call these, so a probe stores the same rows whoever asks; the probe types are the SSH
// layer's, named here so a front end needs no remote/ header.
#pragma once

#include <atomic>
#include <string>
#include <vector>

#include "db/database.h"
#include "remote/probe.h"
#include "remote/slurm_cluster.h"
#include "runs/latency_job.h"
#include "runs/ssh_options.h"

namespace flotilla::runs {

using NodeProbe = remote::NodeProbe;
using GpuInfo = remote::GpuInfo;
using ClusterProbe = remote::ClusterProbe;

struct NodeCheck {
  NodeProbe probe;
  double latency_s = 0;          // the median round trip
  std::string fingerprint;       // the host key's
  std::string known_hosts_name;  // how the host is named in known_hosts
};

// Connects to stored node `name` (Refusal in access's words for a host key problem), probes it,
// measures its latency, and stores its GPUs (type and count) and a system sample per GPU.
NodeCheck check_node(const SshAccess& access, db::Database& db, const std::string& name,
                     int latency_samples = 3);

// Connects to stored cluster `name`'s login node (Refusal as above), probes its Slurm and stores the
// probe with the cluster. `stored_json`: the probe as stored.
ClusterProbe check_cluster(const SshAccess& access, db::Database& db, const std::string& name,
                           std::string* stored_json = nullptr);

// Trusts `fingerprint` (SHA256:...) for stored node `name`, or a cluster's login node with
// `cluster`, in the workspace's known_hosts (the host is asked for its key; a different one is
// refused). Throws Refusal with the session layer's words when the host presents another key.
void trust_host_key(const SshAccess& access, db::Database& db, const std::string& name,
                    const std::string& fingerprint, bool cluster = false);
// Drops every line of `node`'s address from the workspace's known_hosts (no connection); how many.
// With `unless_shared`, a key another stored node at the same address still uses is kept (0).
int forget_host_key(const SshAccess& access, db::Database& db, const db::SshNode& node,
                    bool unless_shared = false);
// "host" for port 22, else "[host]:port": how known_hosts names a node.
std::string known_hosts_name(const db::SshNode& node);

// The latency matrix of stored nodes `names` (runs/latency_job.h) with the one SSH options.
LatencyJobResult measure_node_latency(const SshAccess& access, const std::vector<std::string>& names,
                                      const std::string& worker_path, const std::atomic<bool>& cancel,
                                      int count = 5);

}  // namespace flotilla::runs
