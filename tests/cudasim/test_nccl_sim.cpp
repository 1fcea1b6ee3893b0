// cudasim's NCCL across real processes: 1-4 forked ranks run every collective Flotilla uses on a
// blocking and a non-blocking communicator (the latter with small slots, so large buffers cross
// many windows), and the failure paths: a killed peer, ncclCommAbort from another thread, a
// timeout, mismatched collectives, an init a rank never joins.
//
// Non-obvious decision: expected results are computed in each child from every rank's
// (deterministic) inputs, summed in rank order as the simulator promises, and compared bit for
// bit; the bf16 reference rounds with its own nearest-candidate rule rather than the simulator's
// formula. The parent reaps children in rank order, so a killed rank stays a zombie while its
// peers wait: the liveness check must see through that.
#include <dirent.h>
#include <nccl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "check.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kBig = 70001;  // floats: 280 KB, more than the default 256 KiB slot

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string shm_prefix() { return "cudasim-nccl-" + std::to_string(getpid()) + "-"; }

int leftover_segments() {
  int n = 0;
  if (DIR* d = opendir("/dev/shm")) {
    while (const dirent* e = readdir(d))
      if (std::string(e->d_name).rfind(shm_prefix(), 0) == 0) ++n;
    closedir(d);
  }
  return n;
}

// Checks and failures counted in the children (shared memory that survives their exit).
std::atomic<int>* child_totals() {
  static auto* t = static_cast<std::atomic<int>*>(
      mmap(nullptr, 2 * sizeof(std::atomic<int>), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  return t;
}

// Forks n ranks running body(rank); returns their wait statuses (reaped in rank order).
std::vector<int> run_ranks(int n, const std::function<void(int)>& body) {
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      const int checks = flotilla_test::checks(), failures = flotilla_test::failures();
      body(r);
      child_totals()[0].fetch_add(flotilla_test::checks() - checks);
      child_totals()[1].fetch_add(flotilla_test::failures() - failures);
      std::fflush(stdout);
      std::fflush(stderr);
      _exit(flotilla_test::failures() > failures ? 1 : 0);
    }
    pids.push_back(pid);
  }
  std::vector<int> status(pids.size(), -1);
  const auto start = Clock::now();
  for (size_t i = 0; i < pids.size(); ++i) {
    while (waitpid(pids[i], &status[i], WNOHANG) == 0) {
      if (seconds_since(start) > 30) {
        std::fprintf(stderr, "rank %zu hung: killing it\n", i);
        kill(pids[i], SIGKILL);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  return status;
}

bool exited_ok(int st) { return WIFEXITED(st) && WEXITSTATUS(st) == 0; }

ncclUniqueId new_id(const char* chunk_bytes = nullptr) {
  if (chunk_bytes) setenv("CUDASIM_NCCL_CHUNK_BYTES", chunk_bytes, 1);
  ncclUniqueId id;
  CHECK(ncclGetUniqueId(&id) == ncclSuccess);
  unsetenv("CUDASIM_NCCL_CHUNK_BYTES");
  return id;
}

// The final state of an operation: at once (blocking) or polled (non-blocking).
ncclResult_t settle(ncclComm_t c, ncclResult_t r) {
  if (r != ncclSuccess && r != ncclInProgress) return r;
  const auto start = Clock::now();
  for (;;) {
    ncclResult_t s = ncclInProgress;
    if (ncclCommGetAsyncError(c, &s) != ncclSuccess) return ncclInternalError;
    if (s != ncclInProgress || seconds_since(start) > 20) return s;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

ncclComm_t init(int n, const ncclUniqueId& id, int rank, bool blocking) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = blocking ? 1 : 0;
  config.commName = "test";
  ncclComm_t c = nullptr;
  const ncclResult_t r = ncclCommInitRankConfig(&c, n, id, rank, &config);
  CHECK_MSG(settle(c, r) == ncclSuccess, "init rank %d of %d: %s", rank, n, ncclGetLastError(c));
  return c;
}

void finish(ncclComm_t c) {
  CHECK(settle(c, ncclCommFinalize(c)) == ncclSuccess);
  CHECK(ncclCommDestroy(c) == ncclSuccess);
}

float fval(int rank, size_t i) {
  return static_cast<float>(std::sin(rank * 1.37 + static_cast<double>(i) * 0.011)) *
         static_cast<float>(rank + 1);
}

std::vector<float> fvec(int rank, size_t count, size_t first = 0) {
  std::vector<float> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = fval(rank, first + i);
  return v;
}

// Float sum over ranks in rank order.
float fsum(int n, size_t i) {
  float acc = fval(0, i);
  for (int q = 1; q < n; ++q) acc += fval(q, i);
  return acc;
}

uint16_t bf16_round(float f) {  // the nearer of the two bf16 neighbours, ties to the even one
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t lo = u & 0xffff0000u, hi = lo + 0x10000u;
  float flo, fhi;
  std::memcpy(&flo, &lo, 4);
  std::memcpy(&fhi, &hi, 4);
  const double dl = std::fabs(static_cast<double>(f) - flo), dh = std::fabs(static_cast<double>(fhi) - f);
  if (dl < dh || (dl == dh && ((lo >> 16) & 1u) == 0)) return static_cast<uint16_t>(lo >> 16);
  return static_cast<uint16_t>(hi >> 16);
}
float bf16_float(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

bool same_bits(const void* a, const void* b, size_t bytes) { return std::memcmp(a, b, bytes) == 0; }

uint64_t fnv(const void* p, size_t bytes) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < bytes; ++i) h = (h ^ static_cast<const unsigned char*>(p)[i]) * 1099511628211ull;
  return h;
}

uint8_t pbyte(int from, int to, int dir, size_t i) {
  return static_cast<uint8_t>(static_cast<size_t>(from * 31 + to * 7 + dir * 101) + i * 13);
}

// Every collective of Flotilla on `c`, checked against rank-order references.
void suite(ncclComm_t c, int n, int r) {
  const char* mode = "";
  // all_reduce, out of place: 1, odd, larger than a slot; identical bits on every rank
  for (size_t count : {size_t(1), size_t(1001), kBig}) {
    const std::vector<float> x = fvec(r, count);
    std::vector<float> y(count, -1.0f), want(count);
    for (size_t i = 0; i < count; ++i) want[i] = fsum(n, i);
    CHECK(settle(c, ncclAllReduce(x.data(), y.data(), count, ncclFloat32, ncclSum, c, nullptr)) ==
          ncclSuccess);
    CHECK_MSG(same_bits(y.data(), want.data(), count * 4), "all_reduce float count %zu n %d%s", count, n,
              mode);
    uint64_t h = fnv(y.data(), count * 4);
    std::vector<uint64_t> all(static_cast<size_t>(n));
    CHECK(settle(c, ncclAllGather(&h, all.data(), 1, ncclUint64, c, nullptr)) == ncclSuccess);
    for (uint64_t other : all) CHECK(other == h);
  }
  {  // in place, float avg
    std::vector<float> x = fvec(r, 1001);
    CHECK(settle(c, ncclAllReduce(x.data(), x.data(), x.size(), ncclFloat32, ncclAvg, c, nullptr)) ==
          ncclSuccess);
    bool ok = true;
    for (size_t i = 0; i < x.size(); ++i) ok = ok && x[i] == fsum(n, i) / static_cast<float>(n);
    CHECK_MSG(ok, "all_reduce avg in place n %d", n);
  }
  {  // double in place, larger than a slot
    std::vector<double> d(kBig), want(kBig);
    for (size_t i = 0; i < kBig; ++i) {
      d[i] = std::cos(static_cast<double>(i) * 0.3 + r) * 1e10;
      want[i] = 0;
      for (int q = 0; q < n; ++q) want[i] += std::cos(static_cast<double>(i) * 0.3 + q) * 1e10;
    }
    CHECK(settle(c, ncclAllReduce(d.data(), d.data(), kBig, ncclFloat64, ncclSum, c, nullptr)) ==
          ncclSuccess);
    CHECK_MSG(same_bits(d.data(), want.data(), kBig * 8), "all_reduce double n %d", n);
  }
  {  // int64 beyond 32 bits; int32 max
    std::vector<int64_t> v(333);
    std::vector<int32_t> m(333);
    for (size_t i = 0; i < v.size(); ++i) {
      v[i] = (int64_t(1) << 40) * (r + 1) - static_cast<int64_t>(i);
      m[i] = static_cast<int32_t>((static_cast<int>(i) * 7 + r * 13) % 50) - 25;
    }
    CHECK(settle(c, ncclAllReduce(v.data(), v.data(), v.size(), ncclInt64, ncclSum, c, nullptr)) ==
          ncclSuccess);
    CHECK(settle(c, ncclAllReduce(m.data(), m.data(), m.size(), ncclInt32, ncclMax, c, nullptr)) ==
          ncclSuccess);
    bool ok = true;
    for (size_t i = 0; i < v.size(); ++i) {
      int64_t want = 0;
      int32_t mx = INT32_MIN;
      for (int q = 0; q < n; ++q) {
        want += (int64_t(1) << 40) * (q + 1) - static_cast<int64_t>(i);
        mx = std::max(mx, static_cast<int32_t>((static_cast<int>(i) * 7 + q * 13) % 50) - 25);
      }
      ok = ok && v[i] == want && m[i] == mx;
    }
    CHECK_MSG(ok, "all_reduce int64 sum / int32 max n %d", n);
  }
  {  // bf16 (as uint16) in place: float accumulation in rank order, one rounding
    std::vector<uint16_t> b(1001), want(1001);
    for (size_t i = 0; i < b.size(); ++i) {
      b[i] = bf16_round(fval(r, i));
      float acc = bf16_float(bf16_round(fval(0, i)));
      for (int q = 1; q < n; ++q) acc += bf16_float(bf16_round(fval(q, i)));
      want[i] = bf16_round(acc);
    }
    CHECK(settle(c, ncclAllReduce(b.data(), b.data(), b.size(), ncclBfloat16, ncclSum, c, nullptr)) ==
          ncclSuccess);
    CHECK_MSG(same_bits(b.data(), want.data(), b.size() * 2), "all_reduce bf16 n %d", n);
  }
  {  // float16 conversions: exact sums, subnormals, overflow to infinity
    std::vector<uint16_t> h = {0x3c00, 0x0001, 0x7bff, 0xb800};  // 1, 2^-24, 65504, -0.5
    CHECK(settle(c, ncclAllReduce(h.data(), h.data(), h.size(), ncclFloat16, ncclSum, c, nullptr)) ==
          ncclSuccess);
    const uint16_t one_n[] = {0x3c00, 0x4000, 0x4200, 0x4400}, half_n[] = {0xb800, 0xbc00, 0xbe00, 0xc000};
    const size_t k = static_cast<size_t>(n - 1);
    CHECK(h[0] == one_n[k] && h[1] == static_cast<uint16_t>(n) && h[3] == half_n[k]);
    CHECK(h[2] == (n == 1 ? 0x7bff : 0x7c00));
  }
  // reduce_scatter: out of place (odd count) and in place (out == in + rank * count, large)
  for (size_t count : {size_t(1001), kBig}) {
    const bool in_place = count == kBig;
    std::vector<float> in = fvec(r, count * static_cast<size_t>(n));
    std::vector<float> out(count, -1.0f);
    float* dst = in_place ? in.data() + static_cast<size_t>(r) * count : out.data();
    CHECK(settle(c, ncclReduceScatter(in.data(), dst, count, ncclFloat32, ncclSum, c, nullptr)) ==
          ncclSuccess);
    bool ok = true;
    for (size_t i = 0; i < count; ++i) ok = ok && dst[i] == fsum(n, static_cast<size_t>(r) * count + i);
    CHECK_MSG(ok, "reduce_scatter count %zu in_place %d n %d", count, in_place, n);
  }
  // all_gather: out of place and in place (in == out + rank * count, large)
  for (size_t count : {size_t(1001), kBig}) {
    const bool in_place = count == kBig;
    std::vector<float> out(count * static_cast<size_t>(n), -1.0f);
    const std::vector<float> mine = fvec(r, count);
    if (in_place) std::memcpy(out.data() + static_cast<size_t>(r) * count, mine.data(), count * 4);
    const float* src = in_place ? out.data() + static_cast<size_t>(r) * count : mine.data();
    CHECK(settle(c, ncclAllGather(src, out.data(), count, ncclFloat32, c, nullptr)) == ncclSuccess);
    bool ok = true;
    for (int q = 0; q < n; ++q)
      for (size_t i = 0; i < count; ++i) ok = ok && out[static_cast<size_t>(q) * count + i] == fval(q, i);
    CHECK_MSG(ok, "all_gather count %zu in_place %d n %d", count, in_place, n);
  }
  {  // broadcast from the last rank: out of place (non-roots pass no send buffer) and in place
    const int root = n - 1;
    const std::vector<float> x = fvec(root, kBig);
    std::vector<float> y(kBig, -1.0f);
    CHECK(settle(c, ncclBroadcast(r == root ? x.data() : nullptr, y.data(), kBig, ncclFloat32, root, c,
                                  nullptr)) == ncclSuccess);
    CHECK_MSG(same_bits(x.data(), y.data(), kBig * 4), "broadcast out of place n %d", n);
    std::string s = r == root ? "checkpoint step 40 of run nccl" : std::string(30, '?');
    CHECK(settle(c, ncclBroadcast(s.data(), s.data(), s.size(), ncclUint8, root, c, nullptr)) == ncclSuccess);
    CHECK(s == "checkpoint step 40 of run nccl");
  }
  {  // ring exchange both ways in one group, a large and a small message, distinct payloads
    const int next = (r + 1) % n, prev = (r + n - 1) % n;
    const size_t big = 300001, small = 1003;
    std::vector<uint8_t> to_next(big), to_prev(small), from_prev(big, 0), from_next(small, 0);
    for (size_t i = 0; i < big; ++i) to_next[i] = pbyte(r, next, 0, i);
    for (size_t i = 0; i < small; ++i) to_prev[i] = pbyte(r, prev, 1, i);
    CHECK(ncclGroupStart() == ncclSuccess);
    CHECK(ncclSend(to_next.data(), big, ncclUint8, next, c, nullptr) == ncclSuccess);
    CHECK(ncclSend(to_prev.data(), small, ncclUint8, prev, c, nullptr) == ncclSuccess);
    CHECK(ncclRecv(from_prev.data(), big, ncclUint8, prev, c, nullptr) == ncclSuccess);
    CHECK(ncclRecv(from_next.data(), small, ncclUint8, next, c, nullptr) == ncclSuccess);
    CHECK(settle(c, ncclGroupEnd()) == ncclSuccess);
    bool ok = true;
    for (size_t i = 0; i < big; ++i) ok = ok && from_prev[i] == pbyte(prev, r, 0, i);
    for (size_t i = 0; i < small; ++i) ok = ok && from_next[i] == pbyte(next, r, 1, i);
    CHECK_MSG(ok, "send/recv ring n %d rank %d", n, r);
  }
}

void test_collectives(int n) {
  const auto start = Clock::now();
  const ncclUniqueId blocking_id = new_id(), small_slot_id = new_id("16384");
  const auto st = run_ranks(n, [&](int r) {
    ncclComm_t a = init(n, blocking_id, r, true);
    suite(a, n, r);
    finish(a);
    ncclComm_t b = init(n, small_slot_id, r, false);
    suite(b, n, r);
    finish(b);
  });
  for (int s : st) CHECK(exited_ok(s));
  CHECK(leftover_segments() == 0);
  std::printf("  %d rank(s): collectives and send/recv, blocking and non-blocking, %.2f s\n", n,
              seconds_since(start));
}

bool has(const char* text, const char* part) { return std::strstr(text, part) != nullptr; }

void test_killed_peer() {
  const ncclUniqueId id = new_id();
  const auto st = run_ranks(3, [&](int r) {
    ncclComm_t c = init(3, id, r, r != 1);  // rank 1 non-blocking
    float x = 1.0f;
    CHECK(settle(c, ncclAllReduce(&x, &x, 1, ncclFloat32, ncclSum, c, nullptr)) == ncclSuccess);
    if (r == 2) raise(SIGKILL);
    const auto start = Clock::now();
    const ncclResult_t res = settle(c, ncclAllReduce(&x, &x, 1, ncclFloat32, ncclSum, c, nullptr));
    const double s = seconds_since(start);
    const char* why = ncclGetLastError(c);
    CHECK_MSG(res == ncclRemoteError, "rank %d got %d", r, static_cast<int>(res));
    CHECK_MSG(s < 3.0, "rank %d noticed the dead peer after %.2f s", r, s);
    CHECK_MSG(has(why, "rank 2") && has(why, "killed"), "rank %d: %s", r, why);
    if (r == 0) std::printf("  killed peer: rank 0 failed after %.2f s: %s\n", s, why);
    CHECK(ncclCommAbort(c) == ncclSuccess);
  });
  CHECK(exited_ok(st[0]) && exited_ok(st[1]));
  CHECK(WIFSIGNALED(st[2]) && WTERMSIG(st[2]) == SIGKILL);
  CHECK(leftover_segments() == 0);
}

void test_abort(bool blocking) {
  const ncclUniqueId id = new_id();
  const auto st = run_ranks(2, [&](int r) {
    ncclComm_t c = init(2, id, r, blocking);
    float x = 1.0f;
    if (r == 0) {
      // Rank 1 never joins this all_reduce; another thread aborts while it waits.
      std::thread killer([c] {
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        ncclCommAbort(c);
      });
      const auto start = Clock::now();
      const ncclResult_t res = ncclAllReduce(&x, &x, 1, ncclFloat32, ncclSum, c, nullptr);
      if (blocking) {
        CHECK(res != ncclSuccess && res != ncclInProgress);
      } else {
        CHECK(res == ncclInProgress);  // polling it further is the caller's business until abort
      }
      killer.join();
      const double s = seconds_since(start);
      CHECK_MSG(s >= 0.25 && s < 1.5, "abort took %.2f s", s);
      if (blocking) CHECK_MSG(has(ncclGetLastError(nullptr), "abort"), "%s", ncclGetLastError(nullptr));
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(700));
      const auto start = Clock::now();
      const ncclResult_t res = settle(c, ncclAllReduce(&x, &x, 1, ncclFloat32, ncclSum, c, nullptr));
      CHECK(res == ncclRemoteError);
      CHECK(seconds_since(start) < 1.0);
      CHECK_MSG(has(ncclGetLastError(c), "rank 0"), "%s", ncclGetLastError(c));
      CHECK(ncclCommDestroy(c) == ncclSuccess);
    }
  });
  CHECK(exited_ok(st[0]) && exited_ok(st[1]));
  CHECK(leftover_segments() == 0);
}

void test_timeout_and_mismatch() {
  setenv("CUDASIM_NCCL_TIMEOUT_S", "0.4", 1);
  const ncclUniqueId id2 = new_id(), id = new_id();
  const auto st = run_ranks(2, [&](int r) {
    float x[10] = {};
    float y[20] = {};
    // First, different collectives on the two ranks: both refuse instead of exchanging garbage.
    ncclComm_t d = init(2, id2, r, true);
    const ncclResult_t m = r == 0 ? ncclAllReduce(x, x, 10, ncclFloat32, ncclSum, d, nullptr)
                                  : ncclAllGather(x, y, 10, ncclFloat32, d, nullptr);
    CHECK(m == ncclInvalidUsage);
    CHECK_MSG(has(ncclGetLastError(d), "different collectives"), "%s", ncclGetLastError(d));
    CHECK(ncclCommAbort(d) == ncclSuccess);
    ncclComm_t c = init(2, id, r, true);
    if (r == 1) std::this_thread::sleep_for(std::chrono::milliseconds(1000));
    const auto start = Clock::now();
    const ncclResult_t res = ncclAllReduce(x, x, 10, ncclFloat32, ncclSum, c, nullptr);
    CHECK(res != ncclSuccess);
    if (r == 0) {
      const double s = seconds_since(start);
      CHECK_MSG(s >= 0.35 && s < 1.0, "timed out after %.2f s", s);
      CHECK_MSG(has(ncclGetLastError(c), "timed out") && has(ncclGetLastError(c), "rank(s) 1"), "%s",
                ncclGetLastError(c));
    } else {
      CHECK_MSG(has(ncclGetLastError(c), "rank 0") && has(ncclGetLastError(c), "timed out"), "%s",
                ncclGetLastError(c));
    }
    CHECK(ncclCommAbort(c) == ncclSuccess);
  });
  CHECK(exited_ok(st[0]) && exited_ok(st[1]));
  // An init that rank 1 never joins fails in time, names the rank and leaves no segment.
  const ncclUniqueId lonely = new_id();
  ncclComm_t c = nullptr;
  const auto start = Clock::now();
  CHECK(ncclCommInitRank(&c, 2, lonely, 0) == ncclSystemError);
  CHECK(seconds_since(start) < 1.0);
  CHECK_MSG(has(ncclGetLastError(c), "rank(s) 1"), "%s", ncclGetLastError(c));
  CHECK(ncclCommDestroy(c) == ncclSuccess);
  unsetenv("CUDASIM_NCCL_TIMEOUT_S");
  CHECK(leftover_segments() == 0);
}

}  // namespace

int main() {
  const auto start = Clock::now();
  child_totals();  // mapped before the first fork
  int v = 0;
  CHECK(ncclGetVersion(&v) == ncclSuccess && v == NCCL_VERSION_CODE);
  CHECK(std::string(ncclGetErrorString(ncclRemoteError)).size() > 0);
  for (int n = 1; n <= 4; ++n) test_collectives(n);
  test_killed_peer();
  test_abort(true);
  test_abort(false);
  test_timeout_and_mismatch();
  flotilla_test::checks() += child_totals()[0].load();
  std::printf("  total %.2f s; %d checks in the ranks, %d failed\n", seconds_since(start),
              child_totals()[0].load(), child_totals()[1].load());
  return flotilla_test::summary("cudasim_nccl");
}
