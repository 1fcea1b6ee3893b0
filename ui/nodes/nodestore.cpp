// Store access for the Nodes page (see nodestore.h).
#include "ui/nodes/nodestore.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "db/database.h"
#include "remote/session.h"

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
    e.node = std::move(node);
    out.push_back(std::move(e));
  }
  return out;
}

db::SshNode nodeFromFields(const remote::NodeFields& f) {
  db::SshNode n;
  n.name = f.name;
  n.host = f.host;
  n.port = std::atoi(f.port.c_str());
  n.user = f.user;
  n.key_path = f.key_path.empty() ? "" : std::filesystem::absolute(f.key_path).lexically_normal().string();
  if (!f.price_per_hour.empty()) n.usd_per_hour = std::strtod(f.price_per_hour.c_str(), nullptr);
  n.spot = f.spot;
  n.labels = f.labels;
  return n;
}

remote::NodeFields fieldsFromNode(const db::SshNode& n) {
  remote::NodeFields f;
  f.name = n.name;
  f.host = n.host;
  f.port = std::to_string(n.port);
  f.user = n.user;
  f.key_path = n.key_path;
  if (n.usd_per_hour) {
    // Fixed notation (validate_price takes no exponent), trailing zeros trimmed: 3.6, not 3.6000.
    char buf[48];
    std::snprintf(buf, sizeof buf, "%.4f", *n.usd_per_hour);
    std::string p = buf;
    while (p.size() > 1 && p.back() == '0') p.pop_back();
    if (!p.empty() && p.back() == '.') p.pop_back();
    f.price_per_hour = p;
  }
  f.labels = n.labels;
  f.spot = n.spot;
  return f;
}

void addNode(const QString& databasePath, const remote::NodeFields& fields) {
  db::Database db(databasePath.toStdString(), existingStore());
  db::add_ssh_node(db, nodeFromFields(fields));
}

void updateNode(const QString& databasePath, const std::string& oldName, const remote::NodeFields& fields) {
  db::Database db(databasePath.toStdString(), existingStore());
  const db::SshNode old = db::get_ssh_node(db, oldName);
  db::SshNode n = nodeFromFields(fields);
  n.gpu_type = old.gpu_type;
  n.gpu_count = old.gpu_count;
  db::update_ssh_node(db, oldName, n);
}

bool removeNodeAndKey(const QString& databasePath, const std::string& name) {
  db::Database db(databasePath.toStdString(), existingStore());
  const db::SshNode node = db::get_ssh_node(db, name);
  db::remove_node(db, name);
  for (const auto& other : db::list_ssh_nodes(db))
    if (other.host == node.host && other.port == node.port) return false;  // it keeps the key
  const std::string kh = knownHostsFor(databasePath);
  if (!std::filesystem::exists(kh)) return false;
  const std::string khName = node.port == 22 ? node.host : "[" + node.host + "]:" + std::to_string(node.port);
  return remote::forget_host_key(kh, khName) > 0;
}

std::string knownHostsFor(const QString& databasePath) {
  return remote::workspace_known_hosts_path(databasePath.toStdString());
}

}  // namespace flotilla::ui
