// The one set of SSH session options and host-key refusal words (see ssh_options.h).
#include "runs/ssh_options.h"

#include "remote/node_fields.h"
#include "remote/session.h"

namespace flotilla::runs {

std::string workspace_known_hosts(const std::string& database_path) {
  return remote::workspace_known_hosts_path(database_path);
}

remote::SessionOptions ssh_session_options(const SshAccess& access, const db::SshNode& node) {
  remote::SessionOptions o;
  o.host = node.host;
  o.port = node.port;
  o.user = node.user;
  o.identity_file = node.key_path;
  o.known_hosts_path = workspace_known_hosts(access.database_path);
  o.connect_timeout_s = 10;
  o.read_timeout_s = 15;
  o.keepalive_interval_s = 5;
  if (access.passphrase)
    o.passphrase = [ask = access.passphrase, name = node.name](const std::string& key) {
      return ask(name, key);
    };
  o.node_name = node.name;
  return o;
}

HostKeyRefusal host_key_refusal(const std::string& node, const remote::HostKeyError& e, bool cluster) {
  HostKeyRefusal r;
  r.node = node;
  r.what = e.what();
  r.presented = e.presented();
  r.cluster = cluster;
  switch (e.problem()) {
    case remote::HostKeyProblem::kUnknown:
      r.problem = HostKeyRefusal::Problem::kUnknown;
      break;
    case remote::HostKeyProblem::kChanged:
      r.problem = HostKeyRefusal::Problem::kChanged;
      break;
    case remote::HostKeyProblem::kOtherType:
      r.problem = HostKeyRefusal::Problem::kOtherType;
      break;
  }
  return r;
}

std::string trust_command(const std::string& name, const std::string& fingerprint) {
  return "flotilla nodes trust " + name + " --fingerprint " + fingerprint;
}

std::string host_key_cli_text(const HostKeyRefusal& r) {
  if (r.cluster) {
    // The cluster's words (login_host_key_message): the trust command is the clusters one.
    std::string m = "cluster " + r.node + ": login node: " + r.what;
    if (r.problem == HostKeyRefusal::Problem::kUnknown && !r.presented.empty())
      m +=
          "\nAfter verifying it, run:\n  flotilla clusters trust " + r.node + " --fingerprint " + r.presented;
    return m;
  }
  std::string m = "node " + r.node + ": " + r.what;
  if (r.problem == HostKeyRefusal::Problem::kUnknown && !r.presented.empty())
    m += "\nAfter verifying it, run:\n  " + trust_command(r.node, r.presented);
  if ((r.problem == HostKeyRefusal::Problem::kChanged || r.problem == HostKeyRefusal::Problem::kOtherType) &&
      !r.presented.empty())
    m += "\nOnly after verifying the new fingerprint with the node's administrator, run:\n  flotilla nodes "
         "forget-key " +
         r.node + "\n  " + trust_command(r.node, r.presented);
  return m;
}

std::string host_key_text(const SshAccess& access, const HostKeyRefusal& r) {
  return access.host_key_text ? access.host_key_text(r) : host_key_cli_text(r);
}

void connect_or_refuse(const SshAccess& access, remote::Session& session, const std::string& name,
                       bool cluster) {
  try {
    session.connect();
  } catch (const remote::HostKeyError& e) {
    throw Refusal(host_key_text(access, host_key_refusal(name, e, cluster)));
  }
}

}  // namespace flotilla::runs
