// Rank grid arithmetic, and real sub-groups on a 4-rank dp=2 x tp=2 grid: the TP and DP groups
// have the documented members (TP innermost) and reduce only among them; point-to-point
// transfers around a ring (async pairs, send_recv exchange, raw bytes).
#include <cstring>
#include <vector>

#include "engine/comm/process_group.h"
#include "engine/comm/rendezvous.h"
#include "engine/parallel/rank_grid.h"
#include "tests/engine/test_comm_util.h"

using namespace flotilla::comm;
using namespace flotilla::parallel;

namespace {

constexpr Millis kTimeout{20000};

void grid_arithmetic() {
  const RankGrid g(4, 2, 2, 1);
  CHECK(g.tp_group(0) == (std::vector<int>{0, 1}) && g.tp_group(3) == (std::vector<int>{2, 3}));
  CHECK(g.dp_group(0) == (std::vector<int>{0, 2}) && g.dp_group(3) == (std::vector<int>{1, 3}));
  CHECK(g.pp_group(2) == (std::vector<int>{2}));
  // dp=2 tp=3 pp=2: rank = tp + 3 * (dp + 2 * pp).
  const RankGrid h(12, 2, 3, 2);
  const RankCoord c = h.coord(10);  // 10 = 1 + 3 * (1 + 2 * 1)
  CHECK(c.tp == 1 && c.dp == 1 && c.pp == 1);
  CHECK(h.rank_of(c) == 10);
  CHECK(h.tp_group(10) == (std::vector<int>{9, 10, 11}));
  CHECK(h.dp_group(10) == (std::vector<int>{7, 10}));
  CHECK(h.pp_group(10) == (std::vector<int>{4, 10}));
  CHECK(h.all_tp_groups().size() == 4 && h.all_dp_groups().size() == 6 && h.all_pp_groups().size() == 6);
  for (int r = 0; r < 12; ++r) CHECK(h.rank_of(h.coord(r)) == r);
  CHECK_THROWS(RankGrid(4, 3, 1, 1), "dp=3 x tp=1 x pp=1 = 3 ranks, but the world has 4");
}

void grid_rank(int rank, int port) {
  auto world = init_process_group("gloo", rank, 4, "127.0.0.1", port, kTimeout);
  const RankGrid grid(4, 2, 2, 1);
  ParallelGroups g = make_parallel_groups(*world, grid);
  CHECK(g.tp->size() == 2 && g.dp->size() == 2 && g.pp->size() == 1);
  CHECK(g.tp->world_ranks() == grid.tp_group(rank) && g.dp->world_ranks() == grid.dp_group(rank));
  CHECK(g.tp->rank() == grid.coord(rank).tp && g.dp->rank() == grid.coord(rank).dp);
  CHECK(g.tp->name() == "tp" && g.dp->name() == "dp" && std::string(g.pp->backend()) == "solo");

  // Sums stay inside each group.
  std::vector<float> v(1001, static_cast<float>(rank + 1));
  g.tp->all_reduce(v.data(), v.size());
  float expect = 0;
  for (int m : grid.tp_group(rank)) expect += static_cast<float>(m + 1);
  CHECK(v[0] == expect && v[1000] == expect);
  std::vector<double> d(3, 10.0 * (rank + 1));
  g.dp->all_reduce(d.data(), d.size());
  double expect_d = 0;
  for (int m : grid.dp_group(rank)) expect_d += 10.0 * (m + 1);
  CHECK(d[2] == expect_d);
  // reduce_scatter on DP: chunk k of member m holds 100*m + k.
  std::vector<float> in(2 * 7), out(7);
  for (size_t j = 0; j < in.size(); ++j) in[j] = static_cast<float>(100 * rank + static_cast<int>(j));
  g.dp->reduce_scatter(in.data(), out.data(), 7);
  const auto dp_members = grid.dp_group(rank);
  for (size_t i = 0; i < 7; ++i) {
    float e = 0;
    for (int m : dp_members)
      e += static_cast<float>(100 * m + static_cast<int>(7 * static_cast<size_t>(g.dp->rank()) + i));
    CHECK(out[i] == e);
  }
  // broadcast on TP from its rank 1.
  std::vector<int64_t> b(2, rank);
  g.tp->broadcast(b.data(), b.size(), 1);
  CHECK(b[0] == grid.tp_group(rank)[1]);
  // The one-rank PP group: collectives are local.
  std::vector<float> p(4, 3.0f), pg_out(4);
  g.pp->all_reduce(p.data(), p.size());
  g.pp->all_gather(p.data(), pg_out.data(), p.size());
  CHECK(p[0] == 3.0f && pg_out[3] == 3.0f);
  CHECK_THROWS(g.pp->send(p.data(), 1, 0), "must be another rank");
  // Groups keep working independently after the sub-groups exist.
  world->barrier();
  std::vector<float> w(2, 1.0f);
  world->all_reduce(w.data(), w.size());
  CHECK(w[1] == 4.0f);
  // Peers are named by group rank, with the world rank when it differs.
  const int other = 1 - g.dp->rank();
  const int other_world = dp_members[static_cast<size_t>(other)];
  const std::string expect_label = other_world == other ? "rank " + std::to_string(other)
                                                        : "rank " + std::to_string(other) + " (world rank " +
                                                              std::to_string(other_world) + ")";
  CHECK(g.dp->peer_label(other) == expect_label);
}

void p2p_rank(int n, int rank, int port) {
  auto pg = init_process_group("gloo", rank, n, "127.0.0.1", port, kTimeout);
  const int right = (rank + 1) % n, left = (rank + n - 1) % n;
  // Ring with async pairs: everybody sends and receives at once.
  std::vector<float> out(100003), in(100003, -1.0f);
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<float>(rank * 1000 + static_cast<int>(i % 1000));
  auto s = pg->send_async(out.data(), out.size(), right);
  auto r = pg->recv_async(in.data(), in.size(), left);
  r->wait();
  s->wait();
  size_t bad = 0;
  for (size_t i = 0; i < in.size(); ++i)
    bad += in[i] != static_cast<float>(left * 1000 + static_cast<int>(i % 1000));
  CHECK(bad == 0);
  // The same exchange in one call, twice (transfers to one peer match in call order).
  for (int round = 0; round < 2; ++round) {
    float x = static_cast<float>(rank + 10 * round), y = -1;
    pg->send_recv(&x, 1, right, &y, 1, left);
    CHECK(y == static_cast<float>(left + 10 * round));
  }
  // Blocking send/recv of raw bytes along a chain 0 -> 1 -> ... (no exchange, no deadlock).
  char msg[16] = {};
  if (rank == 0) {
    std::strcpy(msg, "hello");
    pg->send_bytes(msg, sizeof(msg), 1);
  } else {
    pg->recv_bytes(msg, sizeof(msg), rank - 1);
    if (rank + 1 < n) pg->send_bytes(msg, sizeof(msg), rank + 1);
  }
  CHECK(std::strcmp(msg, "hello") == 0);
  // A collective after transfers still lines up.
  std::vector<float> v(3, 1.0f);
  pg->all_reduce(v.data(), v.size());
  CHECK(v[0] == static_cast<float>(n));
  CHECK(pg->stats().per_op[static_cast<int>(OpKind::kSendRecv)].count ==
        4 + (rank == 0 || rank + 1 == n ? 1u : 2u));
}

}  // namespace

int main() {
  grid_arithmetic();
  auto t0 = comm_test::Clock::now();
  comm_test::expect_all_ok(comm_test::run_ranks(comm_test::iota_ranks(4), grid_rank), "dp=2 x tp=2 grid");
  std::printf("grid on 4 ranks: %.2f s\n", comm_test::seconds_since(t0));
  for (int n : {2, 3}) {
    t0 = comm_test::Clock::now();
    comm_test::expect_all_ok(
        comm_test::run_ranks(comm_test::iota_ranks(n), [n](int rank, int port) { p2p_rank(n, rank, port); }),
        "send/recv ring");
    std::printf("send/recv on %d ranks: %.2f s\n", n, comm_test::seconds_since(t0));
  }
  return flotilla_test::summary("test_comm_subgroups");
}
