// The link matrix on the collective path (issue 36): connect to the chosen nodes, deploy the worker,
// start `flotilla-worker launch ... links` on every one of them so their ranks form one process
// group over the transport runs use (Gloo TCP; NCCL where GPUs are), read rank 0's JSON and store
// the matrix (db/links.h). The Nodes page's "Measure links", `flotilla nodes links` and a
// multi-node run's start (parallel.measure_links = auto) all call run_link_job.
//
// Decision: modelled on latency_job.h, and for the same reason a node that cannot take part (host
// key unknown or changed, sshd down, deploy failed, its ranks never joined) is not a reason to stop:
// the others are still measured, its pairs get error rows and the problem comes back as a sentence
// (also stored in the measurement's note). Everything is bounded by LinkJobOptions::timeout_s: the
// worker's own --budget is derived from it, and every remote exec has a timeout. Qt-free.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "db/database.h"
#include "db/links.h"
#include "db/nodes.h"
#include "remote/session.h"

namespace flotilla::runs {

struct LinkJobOptions {
  int64_t bytes = 8 << 20;        // large-message size for the bandwidth
  double timeout_s = 60;          // the whole measurement, connect + deploy + measure
  std::optional<int64_t> run_id;  // stored with this run (a run's start)
  bool intra_node = true;         // two ranks per node for the intra-node figure
};

struct LinkJobResult {
  std::optional<db::LinkMeasurement> measurement;  // as stored (id set); empty when nothing measured
  std::vector<std::string> problems;               // one sentence per node that could not take part
};

// Nodes by stored name; "local" = this machine (its intra-node figure, and a peer of the others is
// NOT attempted: this machine is not a node of a run). Blocking (worker thread), bounded by
// timeout_s, never throws for a node's failure: a node that cannot take part gets error rows for
// its pairs and a sentence in problems; the others are still measured.
LinkJobResult run_link_job(const std::string& database_path, const std::vector<std::string>& node_names,
                           const std::string& worker_path,
                           const std::function<remote::SessionOptions(const db::SshNode&)>& options,
                           const std::atomic<bool>& cancel, const LinkJobOptions& job = {});

// A node already connected with its worker deployed (a run's start: runs/node_run.cpp).
struct LinkNode {
  db::SshNode rec;
  remote::Session* session = nullptr;  // the caller's, used from one thread at a time
  std::string worker;                  // the deployed flotilla-worker path on the node
};
// run_link_job on sessions the caller holds (no connect, no deploy); `db` is written on this thread.
LinkJobResult measure_links_on_nodes(db::Database& db, const std::vector<LinkNode>& nodes,
                                     const LinkJobOptions& job = {});

// The matrix as the CLI prints it (latency and bandwidth per ordered pair, the slowest link named).
std::string link_matrix_text(const db::Database& db, const db::LinkMeasurement& m);

// The slowest measured inter-node link (else intra-node), e.g. {from "a", to "b", bytes_per_s}.
struct SlowestLink {
  std::string from, to;
  double bytes_per_s = 0, latency_s = 0;
};
std::optional<SlowestLink> slowest_link(const db::Database& db, const db::LinkMeasurement& m);

}  // namespace flotilla::runs
