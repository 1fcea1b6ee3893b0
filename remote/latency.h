// The latency matrix of a set of nodes: how long a TCP connect takes from each node to every other
// node's sshd (and from this machine to each node), measured by the deployed worker's
// `probe --json --connect HOST:PORT,...` (engine/core/probe.h), one node at a time in parallel.
//
// Decision: each node measures the others at the address the app reaches them at (the session's
// resolved host and port, unless the caller names another), because that is the address a run's
// master is given. A node that cannot be measured from (not connected, no worker, the probe
// failed) fills its row with the reason and is still measured TO by the others, so one dead node
// gives error cells, never a hang or an empty matrix. Every host and port is validated before
// anything runs anywhere; every argument is single-quoted (Session::exec_argv).
// Blocking: call from a worker thread.
#pragma once

#include <string>
#include <vector>

#include "engine/core/probe.h"
#include "remote/session.h"

namespace flotilla::remote {

struct LatencyEndpoint {
  std::string name;            // for messages ("node a: ...")
  Session* session = nullptr;  // connected; nullptr: this node cannot measure (see `unavailable`)
  std::string worker;          // the deployed flotilla-worker on it (absolute or ~/...)
  std::string host;            // where the others reach it; "": session->target().host
  int port = 0;                // 0: session->target().port
  std::string unavailable;     // why it cannot measure ("" = it can); fills its row
};

struct LatencyCell {
  double min_ms = -1;  // -1 when not measured
  double median_ms = -1;
  std::string error;  // "" when measured
};

struct LatencyMatrix {
  size_t size = 0;
  std::vector<LatencyCell> from_here;  // [to]: this machine -> node
  std::vector<LatencyCell> cells;      // [from * size + to]; the diagonal stays empty (error "")
  const LatencyCell& at(size_t from, size_t to) const { return cells[from * size + to]; }
};

struct LatencyOptions {
  int count = 5;          // connects per link (1-100), each with the worker's 2 s timeout
  bool from_here = true;  // also measure this machine -> each node (same connects, run locally)
};

// Validates every endpoint (host, port, worker path; Error(kUsage) naming the node and the field,
// before anything runs), then measures: every node's probe runs on its own thread, so the sessions
// must not be used elsewhere meanwhile. Network failures become cells' errors; it never throws
// for them, and nothing waits longer than the sessions' timeouts and the probes' own bound.
LatencyMatrix measure_latency_matrix(const std::vector<LatencyEndpoint>& nodes,
                                     const LatencyOptions& options = {});

// --- pieces, exposed for tests ---
// The `--connect` value for node `except`: every other node's HOST:PORT, in order.
std::string connect_list(const std::vector<ConnectTarget>& targets, size_t except);
// The "connect" array of a `probe --json` document as cells, one per expected target (a target the
// document does not mention gets an error).
std::vector<LatencyCell> parse_connect_json(const std::string& json,
                                            const std::vector<std::string>& expected);

}  // namespace flotilla::remote
