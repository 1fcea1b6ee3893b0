// A run's communication efficiency (issue 36), computed once here and shown by every surface: Live,
// `flotilla runs show`, Compare, the advice (comm_advice.h).
//
// Inputs, all from the store: the `comm/...` metrics the worker's `comm` records put there
// (docs/metrics-protocol.md: per step, per process group and operation kind, the count, payload
// bytes, busy milliseconds and blocked milliseconds), the run's layout (parallel.dp/tp/pp of its
// config), its nodes in launch order (db::list_run_nodes: node i holds ranks i*devices ..), and the
// link figures: the measurement taken at the run's start, else the newest stored figure per pair.
//
// Decisions:
// - Bus bandwidth as nccl-tests defines it (bytes / time x 2(n-1)/n for all_reduce, x (n-1)/n for
//   reduce_scatter and all_gather, x 1 for broadcast and send/recv), so an efficiency compares with
//   one link's point-to-point bandwidth: a ring moves each byte over every link once.
// - The capacity of a group is the slowest link it crosses: the lowest measured bandwidth between
//   any two distinct nodes of its members, or the node's intra-node figure when all members share one
//   node. A group with no measured link has no share (never a made-up one); `link.source` says so.
// - The groups reported are rank 0's (dp, tp, pp and any other name the worker sends); members come
//   from the rank grid's documented order (TP innermost, then DP, then PP), not from timing.
// - A share is given only for operations whose mean message is at least kShareMinMessageBytes:
//   smaller ones are bound by latency and by the buffers on the way (a token-bucket shaper passes a
//   burst at line rate), so their bytes / time says nothing about the link (one run showed a 10 kB
//   all_gather at 748% of a 5 MB/s link). Their bus bandwidth is still shown.
// - Hidden share = 1 - blocked / busy over the group's operations: the part of the communication that
//   ran while compute went on (overlap). Clamped to [0, 1].
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "db/database.h"

namespace flotilla::runs {

// nccl-tests' bus-bandwidth factor for `op` ("all_reduce", "reduce_scatter", "all_gather",
// "broadcast", "send_recv", "barrier") over a group of n ranks (0 for barrier: it moves nothing).
double bus_factor(const std::string& op, int n);

// Mean message size below which an operation's bandwidth is not judged against the link.
inline constexpr double kShareMinMessageBytes = 64.0 * 1024;

struct LinkCapacity {
  std::optional<double> bytes_per_s;  // the slowest link's bandwidth; empty: not measured
  std::optional<double> latency_s;    // that link's one-way latency
  std::string from, to;               // node names of the slowest link (from == to: intra-node)
  // "measured at the run's start", "newest measurement (flotilla nodes links)", or why there is none
  // ("no link measured between a and b: flotilla nodes links a,b").
  std::string source;
};

struct OpEfficiency {
  std::string op;                                    // "all_reduce", ...
  double count = 0, bytes = 0, ms = 0, wait_ms = 0;  // per step
  std::optional<double> busbw;  // bytes/s (nccl-tests' busbw); empty when no time was spent
  std::optional<double> share;  // busbw / the group's link capacity
};

struct GroupEfficiency {
  std::string group;               // "dp", "tp", "pp", ...
  int size = 1;                    // ranks in the group
  std::vector<std::string> nodes;  // distinct node names its members are on, in launch order
  bool crosses_nodes = false;
  LinkCapacity link;
  std::vector<OpEfficiency> ops;          // ops with count > 0, by bytes descending
  double bytes = 0, ms = 0, wait_ms = 0;  // per step, all ops
  std::optional<double> busbw;            // sum(bytes x factor) / sum(ms) over ops that move data
  std::optional<double> share;            // busbw / link capacity
  std::optional<double> hidden;           // 1 - wait / busy (overlap), in [0, 1]
};

struct CommReport {
  int64_t step = -1;                    // the comm record's step; -1 when the run has none
  double step_ms = 0;                   // the mean step time over the steps that record covers
  std::vector<GroupEfficiency> groups;  // groups with size > 1 that communicated, dp, tp, pp first
  std::string note;                     // why it is empty ("a one-rank run does not communicate", ...)
  bool empty() const { return groups.empty(); }
};

// The report at `step` (the newest comm record at or before it), else the newest. Never throws for
// missing data: an empty report with its note.
CommReport comm_report(const db::Database& db, int64_t run_id, std::optional<int64_t> step = std::nullopt);

// One point per comm record of `group`: for the Live plot and Compare.
struct CommPoint {
  int64_t step = 0;
  double time = 0;  // the record's unix time
  double ms = 0, wait_ms = 0, bytes = 0;
  std::optional<double> busbw, share, hidden;
};
std::vector<CommPoint> comm_series(const db::Database& db, int64_t run_id, const std::string& group);

// The table `flotilla runs show` and `flotilla run` print (and the Live page's tooltip), e.g.
//   communication at step 40 (per step; link = slowest link the group crosses):
//   group  op          MB/step  ms/step  busbw MB/s  link MB/s        share  hidden
//   dp     all_reduce    12.6    1051.2       12.0    12.4 (a -> b)    97%     21%
std::string comm_table_text(const CommReport& report);

// Compare's two figures (`flotilla compare`, the app's Compare table): the dp group's share of the
// link it crosses, and the hidden share of all the run's communication (1 - blocked / busy summed
// over every group: how much of it overlapped compute). Empty where the report has none.
struct CommHeadline {
  std::optional<double> dp_share;
  std::optional<double> hidden;
};
CommHeadline comm_headline(const CommReport& report);

// "97%" (no decimals), "-" when empty: how every surface writes a share.
std::string share_text(const std::optional<double>& share);

// "0.52 GB/s", "12.4 MB/s", "812 kB/s" (decimal units, as nccl-tests).
std::string rate_text(double bytes_per_s);

}  // namespace flotilla::runs
