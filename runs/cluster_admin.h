// Adding a Slurm cluster to the workspace: one check of its fields as typed and one way to store it,
// for `flotilla clusters add` and the Clusters page's "Add cluster…" alike.
//
// Decision: the fields stay text until they are checked, so a bad port is reported as typed, and
// every problem comes back at once with the field it belongs to (the CLI prints them all, the
// dialog shows each beside its field). Host, user and port follow the SSH nodes' allow-lists,
// partition and account Slurm's; nothing typed here ever reaches a shell. Adding does not connect:
// the login node's host key is checked by the first probe (runs/node_ops.h check_cluster), which
// refuses an unknown key until the user trusts its fingerprint.
#pragma once

#include <string>
#include <vector>

#include "db/clusters.h"
#include "db/database.h"
#include "runs/node_admin.h"

namespace flotilla::runs {

// A cluster as typed ("" for an optional field left empty).
struct ClusterFields {
  std::string name;
  std::string login;  // the login node's host name or address
  std::string port = "22";
  std::string user;       // "": the local user (or ~/.ssh/config)
  std::string key_path;   // "": ssh-agent, then the default key files
  std::string partition;  // "": the cluster's default partition
  std::string account;    // "": the user's default account
};

// Every problem of the fields (empty: valid), each naming its field: "name", "login", "port",
// "user", "key", "partition", "account".
std::vector<FieldProblem> validate_cluster_fields(const ClusterFields& fields);

// Stores the cluster when its fields are valid. Throws flotilla::Error(kUsage) listing every
// problem otherwise, DbError(kConstraint) when the name is taken. Returns the stored cluster.
db::SlurmCluster add_cluster(db::Database& db, const ClusterFields& fields);

}  // namespace flotilla::runs
