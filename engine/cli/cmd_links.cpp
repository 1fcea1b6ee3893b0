// flotilla-worker links: the link matrix on the collective path (engine/comm/link_bench.h), run
// under `flotilla-worker launch` with K ranks per node, or with the torchrun environment by hand.
//
// Decisions: rank 0 prints the report, complete with an error row for every pair it could not
// measure, and exits 0 (the errors are in the report, which is what the caller reads). The other
// ranks also exit 0 after a failure (printed on stderr): a non-zero exit would make the launcher on
// rank 0's node end rank 0 before it reports. When the ranks never all join, rank 0 still reports:
// every pair's row says who did not join. The whole command stops at --budget.
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <string>

#include "engine/cli/args.h"
#include "engine/cli/commands.h"
#include "engine/comm/link_bench.h"
#include "engine/comm/process_group.h"
#include "engine/comm/rendezvous.h"
#include "engine/core/error.h"

namespace flotilla::cli {
namespace {

const char* kHelp =
    "Usage: flotilla-worker links [--bytes SIZE] [--iters N] [--budget S] [--timeout S]\n"
    "                             [--backend gloo|nccl|auto] [--json]\n\n"
    "Measures the links between the nodes of a run over the transport runs use (Gloo TCP; NCCL where\n"
    "GPUs are), one ordered pair at a time: between the first ranks of every two nodes, and between\n"
    "the first two ranks of each node when there are two per node (LOCAL_WORLD_SIZE >= 2).\n"
    "Run it under `flotilla-worker launch` or with RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR and\n"
    "MASTER_PORT set in every rank; node i holds ranks i*K .. i*K+K-1. Rank 0 prints the matrix.\n\n"
    "  latency     one way: the median round trip of 8-byte ping-pongs (--iters of them), halved\n"
    "  bandwidth   --bytes (default 8M; K, M, G suffixes) sent from -> to three times after a warm-up,\n"
    "              bytes / time\n"
    "  --budget S  the whole command, rendezvous included (default 60); pairs left when it runs out,\n"
    "              and pairs after a failure (a rank died), get an error row instead of a hang\n"
    "  --timeout S any single operation (default 10)\n";

void print_text(const comm::LinkBenchReport& r) {
  std::printf("links: %s, %d node(s) x %d rank(s), %.1f s\n", r.transport.c_str(), r.nodes, r.ranks_per_node,
              r.seconds);
  std::printf("%6s %6s %14s %16s\n", "from", "to", "latency (us)", "bandwidth MB/s");
  for (const auto& l : r.links) {
    if (l.error.empty() && l.latency_s && l.bytes_per_s)
      std::printf("%6d %6d %14.1f %16.1f\n", l.from, l.to, *l.latency_s * 1e6, *l.bytes_per_s / 1e6);
    else
      std::printf("%6d %6d  %s\n", l.from, l.to, l.error.c_str());
  }
}

}  // namespace

int cmd_links(const CommandArgs& argv) {
  Args args(argv);
  if (args.flag("--help")) {
    std::printf("%s", kHelp);
    return 0;
  }
  comm::LinkBenchOptions o;
  o.bytes = parse_byte_size(args.value_or("--bytes", "8M"), "links: --bytes");
  o.latency_iters = static_cast<int>(args.int_or("--iters", 20));
  o.budget_s = args.double_or("--budget", 60);
  o.op_timeout_s = args.double_or("--timeout", 10);
  const std::string backend = args.value_or("--backend", "auto");
  const bool json = args.flag("--json");
  args.finish("links");
  if (o.latency_iters < 1) throw_usage("links: --iters must be at least 1");
  if (o.budget_s <= 0 || o.op_timeout_s <= 0) throw_usage("links: --budget and --timeout must be positive");

  const comm::DistEnv env = comm::dist_env_from_environment();
  if (env.world_size < 2)
    throw_usage(
        "links: needs at least two ranks (run it under flotilla-worker launch, or set RANK and WORLD_SIZE)");
  o.ranks_per_node = std::max(1, env.local_world_size);
  if (env.world_size % o.ranks_per_node != 0)
    throw_usage("links: WORLD_SIZE " + std::to_string(env.world_size) +
                " is not a multiple of LOCAL_WORLD_SIZE " + std::to_string(o.ranks_per_node));
  const int nodes = env.world_size / o.ranks_per_node;
  const auto t0 = std::chrono::steady_clock::now();
  const std::string transport_guess = backend == "nccl" ? "nccl" : "gloo/tcp";
  comm::LinkBenchReport report;
  try {
    // The rendezvous gets at most half the budget, so a missing rank is reported within it.
    const auto join = comm::Millis(static_cast<int64_t>(std::max(1.0, o.budget_s / 2) * 1000));
    auto pg = comm::init_process_group(backend, env, join);
    const double used = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    comm::LinkBenchOptions rest = o;
    rest.budget_s = std::max(1.0, o.budget_s - used);
    report = comm::measure_links(*pg, rest);
    report.seconds += used;
  } catch (const std::exception& e) {
    const double used = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (env.rank != 0) {
      std::fprintf(stderr, "links: rank %d: %s\n", env.rank, e.what());
      return 0;
    }
    report = comm::failed_link_report(transport_guess, nodes, o.ranks_per_node,
                                      std::string("the ranks did not all join: ") + e.what(), used);
  }
  if (env.rank != 0) return 0;
  if (json)
    std::printf("%s\n", comm::link_report_json(report).c_str());
  else
    print_text(report);
  std::fflush(stdout);
  return 0;
}

}  // namespace flotilla::cli
