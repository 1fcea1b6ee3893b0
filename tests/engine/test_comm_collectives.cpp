// Every Gloo collective on 2 and 3 real processes, with odd and uneven sizes (1, 7, 1000003
// elements), against values computed in the test. Integer-valued floats make the expected sums
// exact; a random-float all-reduce is checked against a double-precision sum (tolerance: n-1
// float roundings of partial sums of magnitude <= n, i.e. ~n * 2^-24 * n), and must be bitwise
// identical on every rank and across two runs (the ring's fixed summation order), and equal bit
// for bit to reduce_scatter + all_gather (ZeRO's path) when the count is a multiple of 16 n.
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/comm/process_group.h"
#include "engine/comm/rendezvous.h"
#include "tests/engine/test_comm_util.h"

using namespace flotilla::comm;

namespace {

constexpr Millis kTimeout{20000};

// Integer-valued input of rank r at index i (exact in float: |v| < 2^24).
float int_value(int r, size_t i) { return static_cast<float>((r + 1) * static_cast<int>(i % 101) - 50); }

std::vector<float> random_values(int r, size_t n) {
  std::mt19937 gen(1234u + static_cast<unsigned>(r));
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

uint64_t hash_floats(const std::vector<float>& v) {
  uint64_t h = 1469598103934665603ull;
  for (float x : v) {
    uint32_t b;
    std::memcpy(&b, &x, 4);
    h = (h ^ b) * 1099511628211ull;
  }
  return h;
}

void check_all_reduce(ProcessGroup& pg, size_t count) {
  const int n = pg.size(), r = pg.rank();
  std::vector<float> f(count);
  std::vector<double> d(count);
  std::vector<int64_t> q(count);
  for (size_t i = 0; i < count; ++i) {
    f[i] = int_value(r, i);
    d[i] = 0.5 * int_value(r, i);
    q[i] = (int64_t{1} << 40) * (r + 1) + static_cast<int64_t>(i);
  }
  pg.all_reduce(f.data(), count);
  pg.all_reduce(d.data(), count);
  pg.all_reduce(q.data(), count);
  size_t bad_f = 0, bad_d = 0, bad_q = 0;
  for (size_t i = 0; i < count; ++i) {
    double ef = 0;
    for (int k = 0; k < n; ++k) ef += int_value(k, i);
    const int64_t eq = (int64_t{1} << 40) * (n * (n + 1) / 2) + static_cast<int64_t>(i) * n;
    bad_f += f[i] != static_cast<float>(ef);
    bad_d += d[i] != 0.5 * ef;
    bad_q += q[i] != eq;
  }
  CHECK_MSG(bad_f == 0 && bad_d == 0 && bad_q == 0,
            "all_reduce n=%d count=%zu: %zu float, %zu double, %zu int64 wrong", n, count, bad_f, bad_d,
            bad_q);
}

void check_reduce_scatter(ProcessGroup& pg, size_t c, bool in_place) {
  const int n = pg.size(), r = pg.rank();
  std::vector<float> in(c * static_cast<size_t>(n));
  for (size_t j = 0; j < in.size(); ++j) in[j] = int_value(r, j);
  std::vector<float> out(c, -1.0f);
  float* dst = in_place ? in.data() + c * static_cast<size_t>(r) : out.data();
  pg.reduce_scatter(in.data(), dst, c);
  size_t bad = 0;
  for (size_t i = 0; i < c; ++i) {
    double e = 0;
    for (int k = 0; k < n; ++k) e += int_value(k, c * static_cast<size_t>(r) + i);
    bad += dst[i] != static_cast<float>(e);
  }
  CHECK_MSG(bad == 0, "reduce_scatter n=%d c=%zu in_place=%d: %zu wrong", n, c, in_place, bad);
}

void check_all_gather(ProcessGroup& pg, size_t c, bool in_place) {
  const int n = pg.size(), r = pg.rank();
  std::vector<float> out(c * static_cast<size_t>(n), -7.0f);
  std::vector<float> in(c);
  for (size_t i = 0; i < c; ++i) in[i] = static_cast<float>(r * 100000 + static_cast<int>(i % 99991));
  const float* src = in.data();
  if (in_place) {
    std::memcpy(out.data() + c * static_cast<size_t>(r), in.data(), c * sizeof(float));
    src = out.data() + c * static_cast<size_t>(r);
  }
  pg.all_gather(src, out.data(), c);
  size_t bad = 0;
  for (int k = 0; k < n; ++k)
    for (size_t i = 0; i < c; ++i)
      bad +=
          out[c * static_cast<size_t>(k) + i] != static_cast<float>(k * 100000 + static_cast<int>(i % 99991));
  CHECK_MSG(bad == 0, "all_gather n=%d c=%zu in_place=%d: %zu wrong", n, c, in_place, bad);
}

void check_broadcast(ProcessGroup& pg, size_t count, int root) {
  const int r = pg.rank();
  std::vector<float> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = r == root ? int_value(root, i) : -999.0f;
  pg.broadcast(v.data(), count, root);
  size_t bad = 0;
  for (size_t i = 0; i < count; ++i) bad += v[i] != int_value(root, i);
  CHECK_MSG(bad == 0, "broadcast n=%d count=%zu root=%d: %zu wrong", pg.size(), count, root, bad);
  std::vector<int64_t> q(3, r == root ? 77 : 0);
  pg.broadcast(q.data(), q.size(), root);
  CHECK(q[0] == 77 && q[2] == 77);
}

// Random floats: close to the double sum; identical bits on every rank and on a second run.
void check_random_all_reduce(ProcessGroup& pg, size_t count) {
  const int n = pg.size(), r = pg.rank();
  std::vector<float> a = random_values(r, count), b = a;
  pg.all_reduce(a.data(), count);
  pg.all_reduce(b.data(), count);
  double worst = 0;
  std::vector<std::vector<float>> all;
  for (int k = 0; k < n; ++k) all.push_back(random_values(k, count));
  for (size_t i = 0; i < count; ++i) {
    double e = 0;
    for (int k = 0; k < n; ++k) e += all[static_cast<size_t>(k)][i];
    worst = std::max(worst, std::fabs(a[i] - e));
  }
  CHECK_MSG(worst <= n * n * 6e-8, "random all_reduce n=%d: max error %.3g", n, worst);
  CHECK(std::memcmp(a.data(), b.data(), count * sizeof(float)) == 0);
  // Every rank holds the same bits: gather each rank's hash through an int64 all_reduce.
  std::vector<int64_t> hashes(static_cast<size_t>(n), 0);
  hashes[static_cast<size_t>(r)] = static_cast<int64_t>(hash_floats(a) >> 2);
  pg.all_reduce(hashes.data(), hashes.size());
  for (int k = 1; k < n; ++k) CHECK(hashes[static_cast<size_t>(k)] == hashes[0]);
}

// all_reduce and reduce_scatter + all_gather sum each element in the same ring order when the
// count is a multiple of 16 * n: the results are equal bit for bit (ZeRO vs plain DP).
void check_zero_matches_dp(ProcessGroup& pg, size_t c) {
  const int n = pg.size();
  std::vector<float> x = random_values(pg.rank() + 100, c * static_cast<size_t>(n));
  std::vector<float> reduced = x, shard(c), gathered(x.size());
  pg.all_reduce(reduced.data(), reduced.size());
  pg.reduce_scatter(x.data(), shard.data(), c);
  pg.all_gather(shard.data(), gathered.data(), c);
  CHECK(std::memcmp(reduced.data(), gathered.data(), x.size() * sizeof(float)) == 0);
}

void rank_main(int n, int rank, int port) {
  auto pg = init_process_group("gloo", rank, n, "127.0.0.1", port, kTimeout);
  CHECK(pg->size() == n && pg->rank() == rank && pg->name() == "world");
  CHECK(std::string(pg->backend()) == "gloo");
  // 16384 floats = 64 KiB: the largest direct exchange; 16385: the smallest ring.
  for (size_t count : {size_t{1}, size_t{7}, size_t{16384}, size_t{16385}, size_t{1000003}}) {
    check_all_reduce(*pg, count);
  }
  for (size_t c : {size_t{1}, size_t{7}, size_t{333337}}) {
    check_reduce_scatter(*pg, c, false);
    check_reduce_scatter(*pg, c, true);
    check_all_gather(*pg, c, false);
    check_all_gather(*pg, c, true);
  }
  for (int root = 0; root < n; ++root) check_broadcast(*pg, root == 0 ? 1000003 : 7, root);
  check_random_all_reduce(*pg, 100003);
  check_random_all_reduce(*pg, 1001);
  check_zero_matches_dp(*pg, 16 * 1001);  // the ring
  check_zero_matches_dp(*pg, 16 * 7);     // the direct exchange of small operations
  // Zero-sized operations complete and keep the ranks in step.
  pg->all_reduce(static_cast<float*>(nullptr), 0);
  pg->barrier();

  // Async: overlap a large all_reduce with local work, then a blocking op behind it.
  std::vector<float> big(1 << 20);
  for (size_t i = 0; i < big.size(); ++i) big[i] = int_value(rank, i);
  auto work = pg->all_reduce_async(big.data(), big.size());
  double local = 0;
  for (int i = 0; i < 2000000; ++i) local += std::sqrt(static_cast<double>(i));
  std::vector<float> small(5, static_cast<float>(rank + 1));
  pg->all_reduce(small.data(), small.size());  // queued behind the async one, same order everywhere
  work->wait();
  CHECK(work->done());
  CHECK(local > 0);
  CHECK(small[4] == static_cast<float>(n * (n + 1) / 2));
  size_t bad = 0;
  for (size_t i = 0; i < big.size(); ++i) {
    double e = 0;
    for (int k = 0; k < n; ++k) e += int_value(k, i);
    bad += big[i] != static_cast<float>(e);
  }
  CHECK(bad == 0);
  std::vector<float> rs_in(static_cast<size_t>(n) * 1000, 1.0f), rs_out(1000);
  auto w2 = pg->reduce_scatter_async(rs_in.data(), rs_out.data(), 1000);
  w2->wait();
  CHECK(rs_out[999] == static_cast<float>(n));

  const CommStats stats = pg->stats();
  const OpStats& ar = stats.per_op[static_cast<int>(OpKind::kAllReduce)];
  CHECK(ar.count >= 10 && ar.busy_s > 0 && ar.wait_s > 0);
  CHECK(stats.total().count > ar.count);
  const CollectiveRecord rec = pg->last_record();
  CHECK(rec.finished && !rec.failed && rec.op == "reduce_scatter" && rec.group == "world");
  CHECK(
      comm_test::contains(rec.describe(), "reduce_scatter #" + std::to_string(rec.seq) + " on group world"));
  pg->barrier();
}

}  // namespace

int main() {
  for (int n : {2, 3}) {
    const auto t0 = comm_test::Clock::now();
    const auto results =
        comm_test::run_ranks(comm_test::iota_ranks(n), [n](int rank, int port) { rank_main(n, rank, port); });
    comm_test::expect_all_ok(results, n == 2 ? "2 ranks" : "3 ranks");
    std::printf("collectives on %d ranks: %.2f s\n", n, comm_test::seconds_since(t0));
  }
  return flotilla_test::summary("test_comm_collectives");
}
