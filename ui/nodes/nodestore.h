// The Nodes page's reads and writes of the run store, as plain functions over a database path.
//
// Decision: every function opens its own connection and is meant to run on a worker thread
// (QtConcurrent), never the UI thread; the page hands results back as values. A form's fields
// (runs::NodeFields, text as typed) are validated before they get here; conversion to the
// store's record lives here because db/ and the SSH layer do not know each other.
#pragma once

#include <QString>
#include <string>
#include <vector>

#include "db/node_power.h"
#include "db/nodes.h"
#include "runs/node_admin.h"
#include "runs/node_bridge.h"
#include "runs/power_settings.h"
#include "ui/nodes/linksview.h"

namespace flotilla::ui {

// A stored node and the newest reading of each of its GPUs.
struct NodeEntry {
  db::SshNode node;
  std::vector<db::SystemSample> latest;
  std::optional<db::NodePower> power;  // idle autostop settings and power state, when set
};

std::vector<NodeEntry> loadNodeEntries(const QString& databasePath);

// The stored latency matrix (db::node_latency_matrix) and the local node standing for this machine.
struct StoredLatency {
  int64_t localId = 0;  // 0: the store has no local node (then there is no "this machine" row data)
  std::vector<db::NodeLatency> rows;
};
StoredLatency loadLatency(const QString& databasePath);
// The newest stored link measurement (db::latest_link_measurement) laid out for the Links view, with
// the node names and the link job's slowest link; empty when none is stored.
LinkMatrix loadLinkMatrix(const QString& databasePath);

// Store writes; each throws db::DbError (e.g. kConstraint: name taken, node used by runs).
void addNode(const QString& databasePath, const runs::NodeFields& fields);
void updateNode(const QString& databasePath, const std::string& oldName, const runs::NodeFields& fields);
// Stores node `name`'s autostop settings (validated by the dialog; checked again here): an idle limit
// with its commands, or "" (off, commands kept); nothing when the node has none and none are given.
void setNodePower(const QString& databasePath, const std::string& name, const runs::PowerFields& power);
// Removes the node; when no other node uses its address, also its line in known_hosts.
// Returns true when a host key was forgotten.
bool removeNodeAndKey(const QString& databasePath, const std::string& name);

// The workspace's known_hosts (the same file as `flotilla nodes trust` writes).
std::string knownHostsFor(const QString& databasePath);

}  // namespace flotilla::ui
