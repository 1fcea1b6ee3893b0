// What the front ends' node and cluster commands need from the SSH layer outside a run, named in
// the runs layer so that app/ and ui/ include nothing from remote/ (tests/tools/LayerGuard.cmake):
// the checks of a node's or a cluster's fields as typed, the probe types, the latency matrix as
// `flotilla nodes latency` measures it, the SSH library's version. (Probing, trusting and
// forgetting a host key: runs/node_ops.h.)
//
// Decision: the checks are the SSH layer's own functions under runs:: names (one rule for the
// form, the store and the command line), not copies; trust and the latency matrix go through the
// one set of session options (ssh_options.h) and say a refused host key in the access's words.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "db/database.h"
#include "db/nodes.h"
#include "remote/node_fields.h"
#include "remote/probe.h"
#include "remote/session.h"
#include "remote/slurm_cluster.h"
#include "remote/slurm_parse.h"
#include "remote/slurm_script.h"
#include "remote/validate.h"
#include "runs/ssh_options.h"
#include "runs/watch.h"

namespace flotilla::runs {

using NodeFields = remote::NodeFields;
using FieldProblem = remote::FieldProblem;
using SlurmNode = remote::SlurmNode;            // a node of a cluster's probe
using SlurmPartition = remote::SlurmPartition;  // a partition of a cluster's probe
using AuthError = remote::AuthError;            // a node refused every key offered (a probe's error)
using remote::cluster_probe_from_json;
using remote::plain_reason;  // Slurm's reason codes in words ("waiting for resources")
using remote::printable;
using remote::validate_host;
using remote::validate_node_fields;
using remote::validate_port;
using remote::validate_port_number;
using remote::validate_slurm_name;
using remote::validate_user;

// libssh's run-time version ("0.10.6/openssl/zlib"), for `flotilla --version` and the About box.
std::string ssh_library_version();

// The latency matrix of stored `nodes` as a command measures it: every node is connected first, and
// a host key problem refuses the whole measurement before anything runs anywhere (Refusal, in the
// access's words); a node that does not answer is measured as unreachable. The worker is deployed to
// each node that answers (progress: "node a: worker DIR (reused)"), then the links are measured
// and stored (node_bridge.h). Throws flotilla::Error(kUsage) naming a node whose stored address is
// not valid, before any connection.
std::vector<db::NodeLatency> measure_latency_matrix(const SshAccess& access, db::Database& db,
                                                    const std::vector<db::SshNode>& nodes, int count,
                                                    const std::string& worker_path,
                                                    const std::string& version, const Note& progress);

// One stored node probed again and again over one kept connection (the Nodes page's monitor, every
// few seconds): the session is made with the one set of options, kept between probes, and dropped
// after a failure so the next probe starts afresh. Not thread-safe: one probe at a time.
class NodeProber {
 public:
  NodeProber(const SshAccess& access, const db::SshNode& node);
  ~NodeProber();  // disconnects
  NodeProber(const NodeProber&) = delete;
  NodeProber& operator=(const NodeProber&) = delete;

  enum class Failure { kNone, kUnknownHostKey, kHostKeyChanged, kAuth, kUnreachable };
  struct Result {
    Failure failure = Failure::kNone;
    remote::NodeProbe probe;  // when it answered
    double latency_s = 0;     // the median round trip
    std::string fingerprint;  // the host key's (the one presented, when refused)
    std::string message;      // why not
  };
  // Trusts `trust_fingerprint` first when given (only the key the host presents now), connects when
  // not connected, probes the node and measures its latency.
  Result probe(const std::string& trust_fingerprint = "");

 private:
  remote::SessionOptions options_;
  std::unique_ptr<remote::Session> session_;
};

}  // namespace flotilla::runs
