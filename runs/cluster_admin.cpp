// Adding a cluster (see cluster_admin.h).
#include "runs/cluster_admin.h"

#include "engine/core/error.h"

namespace flotilla::runs {

std::vector<FieldProblem> validate_cluster_fields(const ClusterFields& f) {
  std::vector<FieldProblem> problems;
  const auto check = [&problems](const char* field, const std::string& why) {
    if (!why.empty()) problems.push_back({field, why});
  };
  check("name", validate_slurm_name("name", f.name));
  check("login", f.login.empty() ? "login: give the cluster's login node (a host name or address)"
                                 : validate_host(f.login));
  if (!f.user.empty()) check("user", validate_user(f.user));
  check("port", validate_port(f.port.empty() ? "22" : f.port));
  check("key", remote::validate_key_path(f.key_path));
  if (!f.partition.empty()) check("partition", validate_slurm_name("partition", f.partition));
  if (!f.account.empty()) check("account", validate_slurm_name("account", f.account));
  return problems;
}

db::SlurmCluster add_cluster(db::Database& db, const ClusterFields& f) {
  const std::vector<FieldProblem> problems = validate_cluster_fields(f);
  if (!problems.empty()) {
    std::string text;
    for (const FieldProblem& p : problems) text += (text.empty() ? "" : "; ") + p.message;
    throw_usage(text);
  }
  db::SlurmCluster c;
  c.name = f.name;
  c.login_host = f.login;
  c.port = f.port.empty() ? 22 : std::stoi(f.port);
  c.user = f.user;
  c.key_path = f.key_path;
  c.partition = f.partition;
  c.account = f.account;
  c.id = db::add_cluster(db, c);
  return db::get_cluster(db, c.name);
}

}  // namespace flotilla::runs
