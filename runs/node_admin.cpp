// Node and cluster commands' access to the SSH layer (see node_admin.h).
#include "runs/node_admin.h"

#include <memory>

#include "engine/core/error.h"
#include "remote/deploy.h"
#include "remote/session.h"
#include "remote/ssh_info.h"
#include "runs/node_bridge.h"

namespace flotilla::runs {

std::string ssh_library_version() { return remote::libssh_version(); }

std::vector<db::NodeLatency> measure_latency_matrix(const SshAccess& access, db::Database& db,
                                                    const std::vector<db::SshNode>& recs, int count,
                                                    const std::string& worker_path,
                                                    const std::string& version, const Note& progress) {
  // Every stored address is checked again before any connection (S7: the store is a file).
  std::string bad;
  for (const auto& n : recs)
    for (const std::string& why : {remote::validate_host(n.host), remote::validate_port_number(n.port)})
      if (!why.empty()) bad += (bad.empty() ? "" : "; ") + ("node " + n.name + ": " + why);
  if (!bad.empty()) throw Error(ExitCode::kUsage, bad);
  // Connect all first: a host key problem refuses the measurement before anything runs anywhere (S3).
  std::vector<std::unique_ptr<remote::Session>> sessions;
  std::vector<LatencyNode> nodes;
  for (const auto& rec : recs) {
    auto session = std::make_unique<remote::Session>(ssh_session_options(access, rec));
    LatencyNode n;
    n.node = rec;
    try {
      session->connect();
      n.session = session.get();
    } catch (const remote::HostKeyError& e) {
      throw Refusal(host_key_text(access, host_key_refusal(rec.name, e)));
    } catch (const std::exception& e) {
      n.unavailable = std::string("unreachable: ") + e.what();
    }
    sessions.push_back(std::move(session));
    nodes.push_back(n);
  }
  remote::DeployOptions deploy;
  deploy.worker_path = worker_path;
  deploy.version = version;
  for (auto& n : nodes) {
    if (!n.session) continue;
    try {
      const remote::DeployResult d = remote::deploy_worker(*n.session, deploy);
      n.worker = d.worker;
      if (progress)
        progress("node " + n.node.name + ": worker " + d.dir + " (" + (d.reused ? "reused" : "uploaded") +
                 ")");
    } catch (const std::exception& e) {
      n.unavailable = std::string("the worker could not be deployed: ") + e.what();
    }
  }
  return measure_and_store_latency(db, nodes, count);
}

NodeProber::NodeProber(const SshAccess& access, const db::SshNode& node)
    : options_(ssh_session_options(access, node)) {}
NodeProber::~NodeProber() = default;

NodeProber::Result NodeProber::probe(const std::string& trust_fingerprint) {
  Result r;
  try {
    if (!session_) session_ = std::make_unique<remote::Session>(options_);
    if (!trust_fingerprint.empty()) session_->trust(trust_fingerprint);
    session_->connect();
    r.probe = remote::probe_node(*session_);
    r.latency_s = remote::measure_latency(*session_, 3);
    r.fingerprint = session_->host_fingerprint();
  } catch (const remote::HostKeyError& e) {
    r.failure =
        e.problem() == remote::HostKeyProblem::kUnknown ? Failure::kUnknownHostKey : Failure::kHostKeyChanged;
    r.fingerprint = e.presented();
    r.message = e.what();
    session_.reset();
  } catch (const remote::AuthError& e) {
    r.failure = Failure::kAuth;
    r.message = e.what();
    session_.reset();
  } catch (const std::exception& e) {
    r.failure = Failure::kUnreachable;
    r.message = e.what();
    session_.reset();  // a fresh session next time (the link may be half dead)
  }
  return r;
}

}  // namespace flotilla::runs
