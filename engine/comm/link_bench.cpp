// Pair measurements over ProcessGroup send/recv (see link_bench.h).
#include "engine/comm/link_bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <exception>

#include <unistd.h>

#include <nlohmann/json.hpp>

namespace flotilla::comm {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::string pair_text(int from, int to) {
  return from == to ? "within node " + std::to_string(from)
                    : "from node " + std::to_string(from) + " to node " + std::to_string(to);
}

}  // namespace

std::vector<std::pair<int, int>> link_pairs(int nodes, int ranks_per_node) {
  std::vector<std::pair<int, int>> out;
  for (int i = 0; i < nodes; ++i)
    for (int j = 0; j < nodes; ++j)
      if (i != j) out.emplace_back(i, j);
  if (ranks_per_node >= 2)
    for (int i = 0; i < nodes; ++i) out.emplace_back(i, i);
  return out;
}

LinkBenchReport failed_link_report(const std::string& transport, int nodes, int ranks_per_node,
                                   const std::string& error, double seconds) {
  LinkBenchReport r;
  r.transport = transport;
  r.nodes = nodes;
  r.ranks_per_node = ranks_per_node;
  r.seconds = seconds;
  for (const auto& [a, b] : link_pairs(nodes, ranks_per_node)) r.links.push_back({a, b, {}, {}, error});
  return r;
}

LinkBenchReport measure_links(ProcessGroup& world, const LinkBenchOptions& o) {
  const auto t0 = Clock::now();
  const int k = std::max(1, o.ranks_per_node);
  LinkBenchReport report;
  report.transport = std::string(world.backend()) == "nccl" ? "nccl" : "gloo/tcp";
  report.ranks_per_node = k;
  report.nodes = world.size() / k;
  const int me = world.rank();
  const auto pairs = link_pairs(report.nodes, k);
  std::vector<char> big(std::max<size_t>(o.bytes, 8));
  char small[8] = {};
  std::string failure;  // the group failed: every later pair gets this
  // The timeout of the next operation: op_timeout_s, never past the budget (at least 1 s).
  auto timeout = [&] {
    const double left = std::max(1.0, o.budget_s - since(t0));
    return Millis(static_cast<int64_t>(std::min(o.op_timeout_s, left) * 1000));
  };
  for (size_t p = 0; p < pairs.size(); ++p) {
    const auto [from, to] = pairs[p];
    const int a = from * k;
    const int b = from == to ? from * k + 1 : to * k;
    LinkFigure fig{from, to, {}, {}, ""};
    // Tests only (FLOTILLA_TEST_LINKS_EXIT_AT_PAIR=N): this rank dies as pair N starts.
    static const char* die_env = std::getenv("FLOTILLA_TEST_LINKS_EXIT_AT_PAIR");
    if (die_env != nullptr && std::atoi(die_env) == static_cast<int>(p)) ::_exit(9);
    if (failure.empty()) {
      try {
        // Rank 0 decides whether this pair fits in the budget: a pair takes about the warm-up and
        // the timed sends, so stop when less than one op timeout is left.
        double go = (me != 0 || o.budget_s - since(t0) > std::min(o.op_timeout_s, o.budget_s / 4)) ? 1 : 0;
        world.broadcast(&go, 1, 0, timeout());
        if (go == 0) {
          failure =
              "not measured: the budget of " + std::to_string(static_cast<int>(o.budget_s)) + " s ran out";
        } else {
          // [latency, bandwidth]: only rank a contributes.
          double figures[2] = {0, 0};
          std::string local_error;
          if (me == a || me == b) {
            const int peer = me == a ? b : a;
            try {
              std::vector<double> rtts;
              for (int i = 0; i < o.latency_iters; ++i) {
                const auto s = Clock::now();
                if (me == a) {
                  world.send_bytes(small, sizeof small, peer, timeout());
                  world.recv_bytes(small, sizeof small, peer, timeout());
                } else {
                  world.recv_bytes(small, sizeof small, peer, timeout());
                  world.send_bytes(small, sizeof small, peer, timeout());
                }
                rtts.push_back(since(s));
              }
              // One warm-up send (connection set-up, first-touch of the buffers), then the timed ones.
              auto s = Clock::now();
              for (int i = 0; i <= o.bandwidth_iters; ++i) {
                if (i == 1) s = Clock::now();
                if (me == a)
                  world.send_bytes(big.data(), o.bytes, peer, timeout());
                else
                  world.recv_bytes(big.data(), o.bytes, peer, timeout());
              }
              const double t = since(s);
              if (me == a && !rtts.empty()) {
                std::sort(rtts.begin(), rtts.end());
                figures[0] = rtts[rtts.size() / 2] / 2;
                figures[1] = t > 0 ? static_cast<double>(o.bytes) * o.bandwidth_iters / t : 0;
              }
            } catch (const std::exception& e) {
              local_error = e.what();
            }
          }
          try {
            // Every rank waits here for the pair's whole measurement (latency_iters round trips and
            // bandwidth_iters + 1 large sends), which on a slow link is far longer than one op
            // timeout: bounded by the budget instead, or the idle ranks give up mid-pair and their
            // exit breaks the group (found on the 5 MB/s netns link, tests/net).
            world.all_reduce(figures, 2,
                             Millis(static_cast<int64_t>(std::max(1.0, o.budget_s - since(t0)) * 1000)));
          } catch (const std::exception& e) {
            fig.error = pair_text(from, to) + ": " + (local_error.empty() ? e.what() : local_error);
            failure = "not measured: an earlier pair failed (" + fig.error + ")";
          }
          if (fig.error.empty()) {
            if (figures[1] > 0) {
              fig.latency_s = figures[0];
              fig.bytes_per_s = figures[1];
            } else {
              fig.error = pair_text(from, to) + ": no time measured";
            }
          }
        }
      } catch (const std::exception& e) {
        failure = std::string("not measured: ") + e.what();
      }
    }
    if (fig.error.empty() && !failure.empty()) fig.error = failure;
    report.links.push_back(fig);
  }
  report.seconds = since(t0);
  return report;
}

std::string link_report_json(const LinkBenchReport& r) {
  nlohmann::ordered_json links = nlohmann::ordered_json::array();
  for (const LinkFigure& f : r.links) {
    nlohmann::ordered_json l = {{"from", f.from}, {"to", f.to}};
    if (f.error.empty() && f.latency_s && f.bytes_per_s) {
      l["latency_s"] = *f.latency_s;
      l["bytes_per_s"] = *f.bytes_per_s;
    } else {
      l["error"] = f.error.empty() ? std::string("not measured") : f.error;
    }
    links.push_back(std::move(l));
  }
  const nlohmann::ordered_json out = {{"transport", r.transport},
                                      {"nodes", r.nodes},
                                      {"ranks_per_node", r.ranks_per_node},
                                      {"seconds", r.seconds},
                                      {"links", std::move(links)}};
  return out.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace flotilla::comm
