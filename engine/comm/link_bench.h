// The link matrix on the collective path (issue 36): how fast the transport a run uses carries
// data between two nodes, and between two ranks of one node, measured over the run's own
// ProcessGroup send/recv (Gloo TCP, NCCL), not over ssh.
//
// Decisions:
// - One pair at a time: a pair's figures are never shared with another transfer on the same link.
//   Between pairs every rank joins a world all_reduce that carries the pair's figures to rank 0
//   and rank 0's go/stop decision to everyone, so all ranks walk the same list in step.
// - Node i holds ranks i*K .. i*K+K-1 (K = ranks per node, the launch order). Inter-node pairs are
//   the nodes' first ranks; the intra-node pair (i, i) is node i's first two ranks (K >= 2).
// - Latency is the median ping-pong round trip of 8-byte messages, halved; bandwidth is the bytes
//   of --iters large sends from -> to over their time (a send completes when the peer has it).
// - Bounded: every operation has a timeout (at most op_timeout_s, never past the budget); when the
//   budget runs out or the group fails (a rank died: the group is poisoned and every later
//   operation fails at once), the remaining pairs get an error row instead of a hang.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "engine/comm/process_group.h"

namespace flotilla::comm {

struct LinkBenchOptions {
  size_t bytes = 8u << 20;   // large-message size for the bandwidth
  int latency_iters = 20;    // ping-pongs per pair
  int bandwidth_iters = 3;   // large sends per pair (after one warm-up)
  double budget_s = 60;      // the whole measurement
  double op_timeout_s = 10;  // any single send/recv/collective
  int ranks_per_node = 1;    // K
};

struct LinkFigure {
  int from = 0, to = 0;  // node indexes; from == to: intra-node
  std::optional<double> latency_s, bytes_per_s;
  std::string error;  // "" when measured
};

struct LinkBenchReport {
  std::string transport;  // "gloo/tcp" | "nccl"
  int nodes = 0, ranks_per_node = 1;
  double seconds = 0;
  std::vector<LinkFigure> links;  // complete on rank 0 only
};

// The ordered pairs measured for `nodes` nodes of `ranks_per_node` ranks: inter-node (i, j), i != j,
// then intra-node (i, i) when ranks_per_node >= 2.
std::vector<std::pair<int, int>> link_pairs(int nodes, int ranks_per_node);

// Every rank of `world` calls it with the same options. Never throws for a peer's failure: rank 0's
// report has an error row for every pair not measured.
LinkBenchReport measure_links(ProcessGroup& world, const LinkBenchOptions& options);

// A report where nothing could be measured (e.g. the ranks never all joined): every pair's row has
// `error`.
LinkBenchReport failed_link_report(const std::string& transport, int nodes, int ranks_per_node,
                                   const std::string& error, double seconds);

// The one-line JSON of `flotilla-worker links --json`.
std::string link_report_json(const LinkBenchReport& report);

}  // namespace flotilla::comm
