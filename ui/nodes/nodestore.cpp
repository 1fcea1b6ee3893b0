// Store access for the Nodes page (see nodestore.h).
#include "ui/nodes/nodestore.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "db/database.h"
#include "db/errors.h"
#include "db/links.h"
#include "db/run_store.h"
#include "runs/link_job.h"
#include "runs/node_ops.h"
#include "runs/ssh_options.h"

namespace flotilla::ui {
namespace {

db::OpenOptions existingStore() {
  db::OpenOptions o;
  o.create = false;
  o.quick_check = false;  // the app checked the file when it opened the workspace
  return o;
}

}  // namespace

std::vector<NodeEntry> loadNodeEntries(const QString& databasePath) {
  const db::Database db(databasePath.toStdString(), existingStore());
  std::vector<NodeEntry> out;
  for (auto& node : db::list_ssh_nodes(db)) {
    NodeEntry e;
    e.latest = db::latest_system_samples(db, node.id);
    e.power = db::node_power(db, node.id);
    e.node = std::move(node);
    out.push_back(std::move(e));
  }
  return out;
}

StoredLatency loadLatency(const QString& databasePath) {
  const db::Database db(databasePath.toStdString(), existingStore());
  StoredLatency out;
  if (const auto local = db::find_node(db, "local")) out.localId = local->id;
  out.rows = db::node_latency_matrix(db);
  return out;
}

LinkMatrix loadLinkMatrix(const QString& databasePath) {
  const db::Database db(databasePath.toStdString(), existingStore());
  const std::optional<db::LinkMeasurement> m = db::latest_link_measurement(db);
  if (!m) return {};
  std::map<int64_t, std::string> names;
  for (const auto& n : db::list_nodes(db)) names[n.id] = n.name;
  return makeLinkMatrix(*m, names, runs::slowest_link(db, *m));
}

void addNode(const QString& databasePath, const runs::NodeFields& fields) {
  db::Database db(databasePath.toStdString(), existingStore());
  db::add_ssh_node(db, runs::node_from_fields(fields));
}

void updateNode(const QString& databasePath, const std::string& oldName, const runs::NodeFields& fields) {
  db::Database db(databasePath.toStdString(), existingStore());
  const db::SshNode old = db::get_ssh_node(db, oldName);
  db::SshNode n = runs::node_from_fields(fields);
  n.gpu_type = old.gpu_type;
  n.gpu_count = old.gpu_count;
  db::update_ssh_node(db, oldName, n);
}

void setNodePower(const QString& databasePath, const std::string& name, const runs::PowerFields& power) {
  db::Database db(databasePath.toStdString(), existingStore());
  const db::SshNode node = db::get_ssh_node(db, name);
  std::optional<double> limit;
  if (!runs::validate_power_fields(power, &limit).empty())
    throw db::DbError(db::DbErrorKind::kInvalid, "the autostop settings of node " + name + " are not valid");
  const auto current = db::node_power(db, node.id);
  if (!current && !limit && power.stop_argv.empty() && power.start_argv.empty()) return;
  db::NodePower p;
  p.node_id = node.id;
  p.idle_limit_s = limit;
  p.stop_argv = power.stop_argv;
  p.start_argv = power.start_argv;
  db::set_node_power(db, p);
}

bool removeNodeAndKey(const QString& databasePath, const std::string& name) {
  db::Database db(databasePath.toStdString(), existingStore());
  const db::SshNode node = db::get_ssh_node(db, name);
  db::remove_node(db, name);
  // Its key goes from the workspace's known_hosts unless another stored node at that address keeps it.
  runs::SshAccess access;
  access.database_path = databasePath.toStdString();
  return runs::forget_host_key(access, db, node, true) > 0;
}

std::string knownHostsFor(const QString& databasePath) {
  return runs::workspace_known_hosts(databasePath.toStdString());
}

}  // namespace flotilla::ui
