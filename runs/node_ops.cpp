// Node and cluster operations outside a run (see node_ops.h).
#include "runs/node_ops.h"

#include <filesystem>
#include <memory>

#include "db/clusters.h"
#include "db/nodes.h"
#include "flotilla/build_info.h"
#include "remote/node_fields.h"
#include "remote/session.h"
#include "runs/node_bridge.h"
#include "runs/slurm_run.h"

namespace flotilla::runs {

NodeCheck check_node(const SshAccess& access, db::Database& db, const std::string& name,
                     int latency_samples) {
  const db::SshNode node = db::get_ssh_node(db, name);
  remote::Session session(ssh_session_options(access, node));
  connect_or_refuse(access, session, node.name, false);
  NodeCheck c;
  c.probe = remote::probe_node(session);
  c.latency_s = remote::measure_latency(session, latency_samples);
  c.fingerprint = session.host_fingerprint();
  c.known_hosts_name = session.target().known_hosts_name();
  db::insert_system_samples(db, samples_from_gpus(node.id, c.probe.gpus, db::now_seconds()));
  db::set_node_gpus(db, node.id, c.probe.gpus.empty() ? "" : c.probe.gpus[0].name,
                    static_cast<int64_t>(c.probe.gpus.size()));
  return c;
}

ClusterProbe check_cluster(const SshAccess& access, db::Database& db, const std::string& name,
                           std::string* stored_json) {
  const db::SlurmCluster c = db::get_cluster(db, name);
  remote::Session session(ssh_session_options(access, login_node(c)));
  connect_or_refuse(access, session, c.name, true);
  const ClusterProbe p = remote::probe_cluster(session);
  const std::string stored = remote::cluster_probe_json(p);
  db::set_cluster_probe(db, c.id, stored, db::now_seconds());
  if (stored_json) *stored_json = stored;
  return p;
}

void trust_host_key(const SshAccess& access, db::Database& db, const std::string& name,
                    const std::string& fingerprint, bool cluster) {
  const db::SshNode node = cluster ? login_node(db::get_cluster(db, name)) : db::get_ssh_node(db, name);
  remote::Session session(ssh_session_options(access, node));
  try {
    session.trust(fingerprint);
  } catch (const remote::HostKeyError& e) {
    throw Refusal((cluster ? "cluster " : "node ") + name + ": " + e.what());
  }
}

std::string known_hosts_name(const db::SshNode& node) {
  return node.port == 22 ? node.host : "[" + node.host + "]:" + std::to_string(node.port);
}

int forget_host_key(const SshAccess& access, db::Database& db, const db::SshNode& node, bool unless_shared) {
  if (unless_shared)
    for (const auto& n : db::list_ssh_nodes(db))
      if (n.name != node.name && n.host == node.host && n.port == node.port) return 0;
  const std::string file = workspace_known_hosts(access.database_path);
  std::error_code ec;
  if (!std::filesystem::exists(file, ec)) return 0;
  return remote::forget_host_key(file, known_hosts_name(node));
}

LatencyJobResult measure_node_latency(const SshAccess& access, const std::vector<std::string>& names,
                                      const std::string& worker_path, const std::atomic<bool>& cancel,
                                      int count) {
  std::vector<db::SshNode> nodes;
  {
    db::Database db(access.database_path);
    for (const auto& n : names) nodes.push_back(db::get_ssh_node(db, n));
  }
  return run_latency_job(
      access.database_path, nodes, worker_path,
      [&](const db::SshNode& rec) { return ssh_session_options(access, rec); }, cancel, count);
}

}  // namespace flotilla::runs
