// The app's "Measure latency": connect to the chosen nodes, deploy the worker (reused when
// present), measure the matrix and store it (nodebridge.h's measure_and_store_latency), all on one
// worker thread; the Nodes page shows the stored matrix afterwards.
//
// Decision: a node whose host key is unknown or changed is never logged into, but it is not a
// reason to stop: the others still measure each other and it (a TCP connect to its sshd needs no
// trust), its own row says why it was skipped, and the problem comes back as a sentence for the
// page. Qt-free, so it can be driven from a test without a window.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include "db/nodes.h"
#include "remote/session.h"

namespace flotilla::runs {

struct LatencyJobResult {
  std::vector<db::NodeLatency> rows;  // as stored; empty when nothing was measured
  std::vector<std::string> problems;  // one sentence per node that could not measure, or the failure
};

// Blocking; for a worker thread. `cancel` is polled between nodes (the measurement itself is
// bounded by the sessions' timeouts). Never throws: failures come back in `problems`.
LatencyJobResult run_latency_job(const std::string& database_path, const std::vector<db::SshNode>& nodes,
                                 const std::string& worker_path,
                                 const std::function<remote::SessionOptions(const db::SshNode&)>& options,
                                 const std::atomic<bool>& cancel, int count = 5);

}  // namespace flotilla::runs
