// cudasim's NCCL: communicators of real processes (one per rank) on the CPU, through one POSIX
// shared-memory segment per communicator, so data parallelism "on GPUs" runs with 2-4 ranks on a
// machine without any.
//
// Non-obvious decisions:
// - The segment's name travels in the ncclUniqueId; every rank creates-or-opens it (same size,
//   zero-filled, so no rank has to initialise it first) and it is unlinked as soon as all ranks
//   have joined: a rank killed later leaks nothing. Layout: a header (futex "bell", failure
//   record), one header per rank (pid, barrier arrivals, the collective it called), one channel
//   per ordered rank pair for send/recv, then two collective slots per rank and one slot per
//   channel.
// - Collectives move through the slots in windows: each rank posts its window into its own slot,
//   all meet at a barrier, then each reads every slot. Slots are double-buffered by barrier
//   parity, so one barrier per window suffices (a slot is rewritten only after every rank has
//   passed the next barrier, hence finished reading it). Reductions run in rank order
//   (((r0 + r1) + r2) + ...), 16-bit floats accumulate in float and round once, so every rank
//   gets the same bits, every run. Ranks compare the collective each one called at its first
//   barrier and fail on a mismatch instead of exchanging garbage.
// - Send/recv of a group run at ncclGroupEnd as one progress loop over all its operations (a
//   channel holds one chunk; a send completes once its last chunk is written), so two ranks
//   sending to each other cannot deadlock.
// - Every wait checks, in this order: the condition, a local ncclCommAbort, a failure another rank
//   recorded in the segment, and every ~50 ms the liveness of the ranks still awaited (pid gone or
//   a zombie, or the rank destroyed its communicator) and CUDASIM_NCCL_TIMEOUT_S. A rank that
//   fails records why in the segment, so its peers fail at once with a message naming it.
// - An operation first runs the work queued on its stream (streams.cpp), which includes running a
//   producer stream up to an event the stream waits for; so the data an operation reads is what a
//   GPU would have written by then, and a missing cudaStreamWaitEvent shows as stale data.
// - Non-blocking communicators run their operations on a thread of their own, in call order;
//   ncclCommGetAsyncError says ncclInProgress until they have completed, so the engine's polling
//   (and its own deadline and abort) work as with real NCCL.
#include <cuda_runtime.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <nccl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "nccl_reduce.h"

namespace {

using Clock = std::chrono::steady_clock;

constexpr char kIdMagic[8] = "CSNCCL1";
constexpr uint32_t kDefaultChunk = 256u << 10;  // bytes per collective slot and per channel
constexpr int kMaxRanks = 512;
constexpr size_t kShmAlign = 4096;
constexpr size_t kP2pBudget = size_t(256) << 20;  // cap on all channel slots together
constexpr auto kCheckEvery = std::chrono::milliseconds(50);

struct IdPayload {
  char magic[8];
  char name[72];
  uint32_t chunk;
};
static_assert(sizeof(IdPayload) <= NCCL_UNIQUE_ID_BYTES);

// --- shared layout (zero-filled by ftruncate; fields are accessed through std::atomic_ref) ------
struct alignas(64) ShmHeader {
  uint32_t bell;      // futex word: bumped on every state change
  uint32_t waiters;   // processes inside futex_wait (skip the wake syscall when 0)
  uint32_t attached;  // ranks that joined
  uint32_t failed;    // 0 none, 2 being written, 1 fail_text valid
  char fail_text[512];
};

enum class Kind : uint32_t { kAllReduce = 1, kReduce, kBroadcast, kReduceScatter, kAllGather };

struct OpDesc {
  uint64_t seq;
  uint64_t count;
  uint32_t kind, dtype, op;
  int32_t root;
};

struct alignas(64) RankHeader {
  uint64_t arrive;  // last barrier reached
  uint32_t joined;
  int32_t pid;
  uint32_t departed;  // destroyed or aborted its communicator
  OpDesc desc[2];     // by barrier parity, like the slots
};

struct alignas(64) Channel {  // from -> to
  uint64_t sent, consumed;    // chunks
  uint64_t total, offset, len;
};

template <class T>
T load(T& x) {
  return std::atomic_ref<T>(x).load();
}
template <class T>
void store(T& x, T v) {
  std::atomic_ref<T>(x).store(v);
}

size_t uz(int v) { return static_cast<size_t>(v); }

// --- process liveness and futex ----------------------------------------------------------------
bool process_alive(int pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  FILE* f = std::fopen(path, "r");
  if (!f) return errno != ENOENT;
  char buf[512];
  const size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  const char* close = std::strrchr(buf, ')');  // the command name may hold spaces or ')'
  if (!close || close[1] == '\0' || close[2] == '\0') return true;
  return close[2] != 'Z' && close[2] != 'X';  // a zombie's rank is gone as well
}

void futex_wait(uint32_t* addr, uint32_t expected, long ns) {
  timespec ts{0, ns};
  syscall(SYS_futex, addr, FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futex_wake_all(uint32_t* addr) { syscall(SYS_futex, addr, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0); }

double env_timeout_s() {
  const char* v = std::getenv("CUDASIM_NCCL_TIMEOUT_S");
  if (!v || !*v) return 300.0;
  char* end = nullptr;
  const double s = std::strtod(v, &end);
  return end != v && s > 0.0 ? s : 300.0;
}

uint32_t env_chunk() {
  const char* v = std::getenv("CUDASIM_NCCL_CHUNK_BYTES");
  if (!v || !*v) return kDefaultChunk;
  const unsigned long long b = std::strtoull(v, nullptr, 10);
  const unsigned long long c = std::clamp<unsigned long long>(b, kShmAlign, 64ull << 20);
  return static_cast<uint32_t>(c / kShmAlign * kShmAlign);
}

std::mutex g_last_mu;
std::string g_last_error;

void set_global_error(const std::string& text) {
  std::lock_guard<std::mutex> lock(g_last_mu);
  g_last_error = text;
}

ncclResult_t arg_error(const std::string& text) {
  set_global_error(text);
  return ncclInvalidArgument;
}

size_t type_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8:
      return 1;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64:
      return 8;
    default:
      return 0;
  }
}

const char* type_name(uint32_t t) {
  static const char* names[] = {"int8",   "uint8",   "int32",   "uint32",  "int64",
                                "uint64", "float16", "float32", "float64", "bfloat16"};
  return t < 10 ? names[t] : "?";
}

const char* op_name(uint32_t op) {
  static const char* names[] = {"sum", "prod", "max", "min", "avg"};
  return op < 5 ? names[op] : "?";
}

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::kAllReduce:
      return "ncclAllReduce";
    case Kind::kReduce:
      return "ncclReduce";
    case Kind::kBroadcast:
      return "ncclBroadcast";
    case Kind::kReduceScatter:
      return "ncclReduceScatter";
    case Kind::kAllGather:
      return "ncclAllGather";
  }
  return "?";
}

struct Coll {
  Kind kind;
  const char* send;
  char* recv;
  size_t count;
  ncclDataType_t type;
  ncclRedOp_t op;
  int root;
};

struct P2p {
  bool is_send;
  int peer;
  char* ptr;
  size_t bytes;
  size_t done = 0;
};

}  // namespace

struct ncclComm {
  int rank = 0, nranks = 1;
  bool blocking = true;
  std::string label;  // "comm 'name' rank r of n", the prefix of messages
  std::string shm_name;
  uint32_t chunk = kDefaultChunk;  // bytes per collective slot
  size_t p2p_chunk = kDefaultChunk;
  double timeout_s = 300.0;
  char* base = nullptr;
  std::atomic<char*> mapped{nullptr};  // base, for ncclCommAbort from another thread
  size_t map_bytes = 0, off_ranks = 0, off_channels = 0, off_coll = 0, off_p2p = 0;
  uint64_t barrier_seq = 0, coll_seq = 0;
  bool init_done = false;
  std::atomic<bool> aborted{false};
  std::atomic<int> error{0};  // sticky ncclResult_t
  std::atomic<int> pending{0};
  std::atomic<int> in_calls{0};
  std::mutex err_mu;
  std::string last_error;
  // non-blocking communicators: the operation thread and its queue
  std::thread worker;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<ncclResult_t()>> queue;
  bool stop = false;
};

namespace {

ShmHeader& header(ncclComm* c) { return *reinterpret_cast<ShmHeader*>(c->base); }
RankHeader& rank_header(ncclComm* c, int q) {
  return reinterpret_cast<RankHeader*>(c->base + c->off_ranks)[q];
}
Channel& channel(ncclComm* c, int from, int to) {
  return reinterpret_cast<Channel*>(c->base + c->off_channels)[uz(from) * uz(c->nranks) + uz(to)];
}
char* coll_slot(ncclComm* c, int q, uint64_t parity) {
  return c->base + c->off_coll + (uz(q) * 2 + parity) * c->chunk;
}
char* p2p_slot(ncclComm* c, int from, int to) {
  return c->base + c->off_p2p + (uz(from) * uz(c->nranks) + uz(to)) * c->p2p_chunk;
}

void notify(ncclComm* c, bool force = false) {
  ShmHeader& h = header(c);
  std::atomic_ref<uint32_t>(h.bell).fetch_add(1);
  if (force || load(h.waiters) > 0) futex_wake_all(&h.bell);
}

// Records the first failure with this communicator (and, with tell_peers, in the segment).
ncclResult_t fail(ncclComm* c, ncclResult_t code, const std::string& text, bool tell_peers) {
  const std::string msg = c->label + ": " + text;
  {
    std::lock_guard<std::mutex> lock(c->err_mu);
    if (c->last_error.empty()) c->last_error = msg;
  }
  set_global_error(msg);
  int none = 0;
  c->error.compare_exchange_strong(none, static_cast<int>(code));
  if (tell_peers && c->base) {
    ShmHeader& h = header(c);
    uint32_t zero = 0;
    if (std::atomic_ref<uint32_t>(h.failed).compare_exchange_strong(zero, 2u)) {
      std::snprintf(h.fail_text, sizeof(h.fail_text), "%s", msg.c_str());
      store(h.failed, 1u);
    }
    notify(c, true);
  }
  return code;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (int q : ranks) s += (s.empty() ? "" : ", ") + std::to_string(q);
  return s;
}

// Why rank q can no longer take part, or "".
std::string peer_gone(ncclComm* c, int q) {
  if (q == c->rank) return {};
  RankHeader& r = rank_header(c, q);
  if (load(r.departed))
    return "rank " + std::to_string(q) + " left the communicator (destroyed or aborted it)";
  const int pid = load(r.pid);
  if (pid > 0 && !process_alive(pid))
    return "rank " + std::to_string(q) + " (pid " + std::to_string(pid) + ") exited or was killed";
  return {};
}

// Waits until ready(); blame() lists the ranks still awaited (for liveness checks and messages).
template <class Ready, class Blame>
ncclResult_t wait_for(ncclComm* c, const std::string& what, Ready&& ready, Blame&& blame) {
  if (ready()) return ncclSuccess;
  ShmHeader& h = header(c);
  const auto start = Clock::now();
  auto last_check = start;
  for (int spin = 0;; ++spin) {
    const uint32_t bell = load(h.bell);
    if (ready()) return ncclSuccess;
    if (c->aborted.load()) return fail(c, ncclSystemError, what + ": the communicator was aborted", false);
    if (load(h.failed) == 1u) {
      return fail(c, ncclRemoteError, what + ": a peer failed: " + std::string(h.fail_text), false);
    }
    if (spin < 16) {
      std::this_thread::yield();
      continue;
    }
    const auto now = Clock::now();
    if (now - last_check >= kCheckEvery) {
      last_check = now;
      const std::vector<int> awaited = blame();
      for (int q : awaited) {
        const std::string why = peer_gone(c, q);
        if (!why.empty()) return fail(c, ncclRemoteError, what + ": " + why, true);
      }
      if (std::chrono::duration<double>(now - start).count() > c->timeout_s) {
        char secs[32];
        std::snprintf(secs, sizeof(secs), "%g", c->timeout_s);
        return fail(c, ncclSystemError,
                    what + ": timed out after " + secs + " s (CUDASIM_NCCL_TIMEOUT_S) waiting for rank(s) " +
                        rank_list(awaited),
                    true);
      }
    }
    std::atomic_ref<uint32_t>(h.waiters).fetch_add(1);
    if (!ready()) futex_wait(&h.bell, bell, 50'000'000);
    std::atomic_ref<uint32_t>(h.waiters).fetch_sub(1);
  }
}

ncclResult_t barrier(ncclComm* c, const std::string& what) {
  const uint64_t k = ++c->barrier_seq;
  store(rank_header(c, c->rank).arrive, k);
  notify(c);
  auto awaited = [c, k] {
    std::vector<int> v;
    for (int q = 0; q < c->nranks; ++q)
      if (load(rank_header(c, q).arrive) < k) v.push_back(q);
    return v;
  };
  return wait_for(
      c, what,
      [c, k] {
        for (int q = 0; q < c->nranks; ++q)
          if (load(rank_header(c, q).arrive) < k) return false;
        return true;
      },
      awaited);
}

std::string describe(const OpDesc& d) {
  return std::string(kind_name(static_cast<Kind>(d.kind))) + "(count " + std::to_string(d.count) + ", " +
         type_name(d.dtype) + ", " + op_name(d.op) + ", root " + std::to_string(d.root) +
         ") as collective #" + std::to_string(d.seq);
}

ncclResult_t run_coll(ncclComm* c, const Coll& op) {
  const size_t es = type_size(op.type), n = uz(c->nranks);
  const int me = c->rank;
  const std::string what =
      std::string(kind_name(op.kind)) + " (collective #" + std::to_string(++c->coll_seq) + ")";
  if (load(header(c).failed) == 1u)
    return fail(c, ncclRemoteError, what + ": a peer failed: " + std::string(header(c).fail_text), false);
  if (op.count == 0) return ncclSuccess;
  const size_t bytes = op.count * es;
  if (n == 1) {  // a copy (an average or any reduction over one rank is the value itself)
    if (op.recv != op.send) std::memmove(op.recv, op.send, bytes);
    return ncclSuccess;
  }
  const size_t per = op.kind == Kind::kReduceScatter ? c->chunk / (es * n) : c->chunk / es;
  const size_t windows = (op.count + per - 1) / per;
  std::vector<const char*> srcs(n);
  for (size_t w = 0; w < windows; ++w) {
    const size_t off = w * per, len = std::min(per, op.count - off);
    const uint64_t parity = (c->barrier_seq + 1) & 1u;
    char* mine = coll_slot(c, me, parity);
    switch (op.kind) {
      case Kind::kAllReduce:
      case Kind::kReduce:
      case Kind::kAllGather:
        std::memcpy(mine, op.send + off * es, len * es);
        break;
      case Kind::kBroadcast:
        if (me == op.root) std::memcpy(mine, op.send + off * es, len * es);
        break;
      case Kind::kReduceScatter:
        for (size_t d = 0; d < n; ++d)
          std::memcpy(mine + d * per * es, op.send + (d * op.count + off) * es, len * es);
        break;
    }
    if (w == 0) {
      rank_header(c, me).desc[parity] = OpDesc{c->coll_seq,
                                               op.count,
                                               static_cast<uint32_t>(op.kind),
                                               static_cast<uint32_t>(op.type),
                                               static_cast<uint32_t>(op.op),
                                               op.root};
    }
    ncclResult_t r = barrier(c, what);
    if (r != ncclSuccess) return r;
    if (w == 0) {
      const OpDesc& a = rank_header(c, me).desc[parity];
      for (int q = 0; q < c->nranks; ++q) {
        const OpDesc& b = rank_header(c, q).desc[parity];
        if (std::memcmp(&a, &b, sizeof(OpDesc)) != 0) {
          return fail(c, ncclInvalidUsage,
                      what + ": ranks called different collectives: rank " + std::to_string(me) + " " +
                          describe(a) + ", rank " + std::to_string(q) + " " + describe(b),
                      false);
        }
      }
    }
    switch (op.kind) {
      case Kind::kAllReduce:
      case Kind::kReduce:
        if (op.kind == Kind::kReduce && me != op.root) break;
        for (size_t q = 0; q < n; ++q) srcs[q] = coll_slot(c, static_cast<int>(q), parity);
        cudasim_nccl::reduce_into(op.recv + off * es, srcs, len, op.type, op.op);
        break;
      case Kind::kAllGather:
        for (size_t q = 0; q < n; ++q)
          std::memmove(op.recv + (q * op.count + off) * es, coll_slot(c, static_cast<int>(q), parity),
                       len * es);
        break;
      case Kind::kBroadcast:
        std::memmove(op.recv + off * es, coll_slot(c, op.root, parity), len * es);
        break;
      case Kind::kReduceScatter:
        for (size_t q = 0; q < n; ++q)
          srcs[q] = coll_slot(c, static_cast<int>(q), parity) + uz(me) * per * es;
        cudasim_nccl::reduce_into(op.recv + off * es, srcs, len, op.type, op.op);
        break;
    }
  }
  return ncclSuccess;
}

// All sends and receives of one group, progressed together. Per peer, sends (and receives) are
// matched in call order.
ncclResult_t run_p2p(ncclComm* c, std::vector<P2p>& ops) {
  const int me = c->rank;
  const std::string what = "send/recv group";
  if (load(header(c).failed) == 1u)
    return fail(c, ncclRemoteError, what + ": a peer failed: " + std::string(header(c).fail_text), false);
  // heads: for every op still open, whether it is the first open one of its kind and peer.
  auto is_head = [&ops](size_t i) {
    for (size_t j = 0; j < i; ++j)
      if (ops[j].is_send == ops[i].is_send && ops[j].peer == ops[i].peer && ops[j].done < ops[j].bytes)
        return false;
    return true;
  };
  auto can_move = [&](size_t i) {
    const P2p& o = ops[i];
    Channel& ch = o.is_send ? channel(c, me, o.peer) : channel(c, o.peer, me);
    const uint64_t sent = load(ch.sent), consumed = load(ch.consumed);
    return o.is_send ? sent == consumed : sent > consumed;
  };
  for (;;) {
    bool open = false, moved = false;
    for (size_t i = 0; i < ops.size(); ++i) {
      P2p& o = ops[i];
      if (o.done >= o.bytes) continue;
      open = true;
      if (!is_head(i) || !can_move(i)) continue;
      if (o.is_send) {
        Channel& ch = channel(c, me, o.peer);
        const size_t len = std::min(c->p2p_chunk, o.bytes - o.done);
        std::memcpy(p2p_slot(c, me, o.peer), o.ptr + o.done, len);
        ch.total = o.bytes;
        ch.offset = o.done;
        ch.len = len;
        store(ch.sent, load(ch.sent) + 1);
        o.done += len;
      } else {
        Channel& ch = channel(c, o.peer, me);
        if (ch.total != o.bytes || ch.offset != o.done) {
          return fail(c, ncclInvalidUsage,
                      what + ": rank " + std::to_string(o.peer) + " sent " + std::to_string(ch.total) +
                          " bytes but rank " + std::to_string(me) + " posted a receive of " +
                          std::to_string(o.bytes),
                      true);
        }
        std::memcpy(o.ptr + o.done, p2p_slot(c, o.peer, me), ch.len);
        o.done += ch.len;
        store(ch.consumed, load(ch.consumed) + 1);
      }
      moved = true;
      notify(c);
    }
    if (!open) return ncclSuccess;
    if (moved) continue;
    const ncclResult_t r = wait_for(
        c, what,
        [&] {
          for (size_t i = 0; i < ops.size(); ++i)
            if (ops[i].done < ops[i].bytes && is_head(i) && can_move(i)) return true;
          return false;
        },
        [&] {
          std::vector<int> v;
          for (const P2p& o : ops)
            if (o.done < o.bytes && std::find(v.begin(), v.end(), o.peer) == v.end()) v.push_back(o.peer);
          return v;
        });
    if (r != ncclSuccess) return r;
  }
}

ncclResult_t do_init(ncclComm* c) {
  const size_t n = uz(c->nranks);
  c->off_ranks = (sizeof(ShmHeader) + 63) / 64 * 64;
  c->off_channels = c->off_ranks + n * sizeof(RankHeader);
  c->off_coll = (c->off_channels + n * n * sizeof(Channel) + kShmAlign - 1) / kShmAlign * kShmAlign;
  c->p2p_chunk =
      std::max(kShmAlign, std::min<size_t>(c->chunk, kP2pBudget / (n * n)) / kShmAlign * kShmAlign);
  c->off_p2p = c->off_coll + n * 2 * c->chunk;
  c->map_bytes = c->off_p2p + n * n * c->p2p_chunk;
  const int fd = shm_open(c->shm_name.c_str(), O_RDWR | O_CREAT, 0600);
  if (fd < 0)
    return fail(c, ncclSystemError, "shm_open(" + c->shm_name + "): " + std::strerror(errno), false);
  void* p = MAP_FAILED;
  if (ftruncate(fd, static_cast<off_t>(c->map_bytes)) == 0)
    p = mmap(nullptr, c->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int err = errno;
  close(fd);
  if (p == MAP_FAILED) {
    shm_unlink(c->shm_name.c_str());
    return fail(c, ncclSystemError,
                "mapping " + std::to_string(c->map_bytes) + " bytes of /dev/shm" + c->shm_name + ": " +
                    std::strerror(err),
                false);
  }
  c->base = static_cast<char*>(p);
  c->mapped.store(c->base);
  RankHeader& mine = rank_header(c, c->rank);
  uint32_t zero = 0;
  if (!std::atomic_ref<uint32_t>(mine.joined).compare_exchange_strong(zero, 1u)) {
    shm_unlink(c->shm_name.c_str());
    return fail(c, ncclInvalidUsage, "two processes joined as rank " + std::to_string(c->rank), true);
  }
  store(mine.pid, static_cast<int32_t>(getpid()));
  std::atomic_ref<uint32_t>(header(c).attached).fetch_add(1);
  notify(c);
  const ncclResult_t r = wait_for(
      c, "ncclCommInitRank", [c] { return load(header(c).attached) >= static_cast<uint32_t>(c->nranks); },
      [c] {
        std::vector<int> v;
        for (int q = 0; q < c->nranks; ++q)
          if (!load(rank_header(c, q).joined)) v.push_back(q);
        return v;
      });
  // Unlinked once all mapped it (the name is no longer needed), or at once on a failure, so a
  // caller that never destroys a failed communicator leaks nothing either.
  shm_unlink(c->shm_name.c_str());
  if (r != ncclSuccess) return r;
  c->init_done = true;
  return ncclSuccess;
}

// Runs fn now (blocking communicator) or on the communicator's thread (non-blocking).
ncclResult_t submit(ncclComm* c, std::function<ncclResult_t()> fn) {
  if (const int e = c->error.load()) return static_cast<ncclResult_t>(e);
  if (c->blocking) return fn();
  c->pending.fetch_add(1);
  {
    std::lock_guard<std::mutex> lock(c->mu);
    c->queue.push_back(std::move(fn));
  }
  c->cv.notify_one();
  return ncclInProgress;
}

void worker_loop(ncclComm* c) {
  for (;;) {
    std::function<ncclResult_t()> fn;
    {
      std::unique_lock<std::mutex> lock(c->mu);
      c->cv.wait(lock, [c] { return c->stop || !c->queue.empty(); });
      if (c->queue.empty()) return;
      fn = std::move(c->queue.front());
      c->queue.pop_front();
    }
    if (c->error.load() == 0 && !c->aborted.load()) fn();  // fn records its failure itself
    c->pending.fetch_sub(1);
  }
}

void stop_worker(ncclComm* c, bool drop_queue) {
  if (!c->worker.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(c->mu);
    c->stop = true;
    if (drop_queue) {
      c->pending.fetch_sub(static_cast<int>(c->queue.size()));
      c->queue.clear();
    }
  }
  c->cv.notify_all();
  c->worker.join();
}

void release(ncclComm* c) {
  if (c->base) {
    store(rank_header(c, c->rank).departed, 1u);
    notify(c, true);
    munmap(c->base, c->map_bytes);
  }
  if (!c->init_done) shm_unlink(c->shm_name.c_str());  // a failed init: nobody else may unlink it
  delete c;
}

struct CallGuard {
  ncclComm* c;
  explicit CallGuard(ncclComm* comm) : c(comm) { c->in_calls.fetch_add(1); }
  ~CallGuard() { c->in_calls.fetch_sub(1); }
  CallGuard(const CallGuard&) = delete;
  CallGuard& operator=(const CallGuard&) = delete;
};

// --- groups ------------------------------------------------------------------------------------
struct Pending {
  ncclComm* comm;
  bool is_coll;
  Coll coll;
  P2p p2p;
};
thread_local int g_depth = 0;
thread_local std::vector<Pending> g_ops;

ncclResult_t run_group(ncclComm* c, std::vector<Coll> colls, std::vector<P2p> p2ps) {
  return submit(c, [c, colls = std::move(colls), p2ps = std::move(p2ps)]() mutable {
    for (const Coll& op : colls) {
      const ncclResult_t r = run_coll(c, op);
      if (r != ncclSuccess) return r;
    }
    return p2ps.empty() ? ncclSuccess : run_p2p(c, p2ps);
  });
}

ncclResult_t add_coll(ncclComm* c, const Coll& op) {
  if (!c) return arg_error(std::string(kind_name(op.kind)) + ": comm is NULL");
  if (type_size(op.type) == 0) return arg_error(std::string(kind_name(op.kind)) + ": unknown data type");
  if (static_cast<int>(op.op) < 0 || op.op >= ncclNumOps)
    return arg_error(std::string(kind_name(op.kind)) + ": unknown reduction");
  const bool needs_root = op.kind == Kind::kBroadcast || op.kind == Kind::kReduce;
  if (needs_root && (op.root < 0 || op.root >= c->nranks))
    return arg_error(std::string(kind_name(op.kind)) + ": root " + std::to_string(op.root) + " out of range");
  const bool send_used = op.kind != Kind::kBroadcast || op.root == c->rank;
  const bool recv_used = op.kind != Kind::kReduce || op.root == c->rank;
  if (op.count > 0 && ((send_used && !op.send) || (recv_used && !op.recv)))
    return arg_error(std::string(kind_name(op.kind)) + ": NULL buffer");
  if (g_depth > 0) {
    g_ops.push_back(Pending{c, true, op, P2p{}});
    return ncclSuccess;
  }
  CallGuard guard(c);
  return run_group(c, {op}, {});
}

ncclResult_t add_p2p(ncclComm* c, const P2p& op, size_t count, ncclDataType_t type) {
  const char* name = op.is_send ? "ncclSend" : "ncclRecv";
  if (!c) return arg_error(std::string(name) + ": comm is NULL");
  if (type_size(type) == 0) return arg_error(std::string(name) + ": unknown data type");
  if (op.peer < 0 || op.peer >= c->nranks)
    return arg_error(std::string(name) + ": peer " + std::to_string(op.peer) + " out of range");
  if (count > 0 && !op.ptr) return arg_error(std::string(name) + ": NULL buffer");
  P2p p = op;
  p.bytes = count * type_size(type);
  if (g_depth > 0) {
    g_ops.push_back(Pending{c, false, Coll{}, p});
    return ncclSuccess;
  }
  CallGuard guard(c);
  return run_group(c, {}, {p});
}

}  // namespace

// --- API ---------------------------------------------------------------------------------------
extern "C" {

ncclResult_t ncclGetVersion(int* version) {
  if (!version) return arg_error("ncclGetVersion: NULL argument");
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* unique_id) {
  if (!unique_id) return arg_error("ncclGetUniqueId: NULL argument");
  std::random_device rd;
  const uint64_t a = (uint64_t(rd()) << 32) | rd(), b = (uint64_t(rd()) << 32) | rd();
  IdPayload id{};
  std::memcpy(id.magic, kIdMagic, sizeof(id.magic));
  std::snprintf(id.name, sizeof(id.name), "/cudasim-nccl-%d-%016llx%08llx", static_cast<int>(getpid()),
                static_cast<unsigned long long>(a), static_cast<unsigned long long>(b & 0xffffffffu));
  id.chunk = env_chunk();
  std::memset(unique_id->internal, 0, sizeof(unique_id->internal));
  std::memcpy(unique_id->internal, &id, sizeof(id));
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId comm_id, int rank,
                                    ncclConfig_t* config) {
  if (!comm) return arg_error("ncclCommInitRank: comm is NULL");
  *comm = nullptr;
  if (nranks < 1 || nranks > kMaxRanks)
    return arg_error("ncclCommInitRank: nranks " + std::to_string(nranks) + " out of range");
  if (rank < 0 || rank >= nranks)
    return arg_error("ncclCommInitRank: rank " + std::to_string(rank) + " out of range");
  IdPayload id;
  std::memcpy(&id, comm_id.internal, sizeof(id));
  id.name[sizeof(id.name) - 1] = '\0';
  if (std::memcmp(id.magic, kIdMagic, sizeof(id.magic)) != 0 || id.name[0] != '/' || id.chunk < kShmAlign)
    return arg_error("ncclCommInitRank: not an id from cudasim's ncclGetUniqueId");
  auto* c = new ncclComm;
  c->rank = rank;
  c->nranks = nranks;
  c->blocking = !(config && config->blocking == 0);
  c->chunk = id.chunk;
  c->timeout_s = env_timeout_s();
  // nranks is part of the name: ranks that disagree on it never share (and mis-size) a segment.
  c->shm_name = std::string(id.name) + "-n" + std::to_string(nranks);
  const std::string name = config && config->commName ? config->commName : "";
  c->label = "cudasim NCCL" + (name.empty() ? std::string() : " comm '" + name + "'") + " rank " +
             std::to_string(rank) + " of " + std::to_string(nranks);
  *comm = c;
  if (c->blocking) return do_init(c);
  c->worker = std::thread(worker_loop, c);
  return submit(c, [c] { return do_init(c); });
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId comm_id, int rank) {
  return ncclCommInitRankConfig(comm, nranks, comm_id, rank, nullptr);
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  if (!comm) return arg_error("ncclCommFinalize: comm is NULL");
  CallGuard guard(comm);
  return submit(comm, [] { return ncclSuccess; });
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (!comm) return arg_error("ncclCommDestroy: comm is NULL");
  stop_worker(comm, false);  // queued operations still run
  release(comm);
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (!comm) return arg_error("ncclCommAbort: comm is NULL");
  comm->aborted.store(true);
  if (char* base = comm->mapped.load()) futex_wake_all(&reinterpret_cast<ShmHeader*>(base)->bell);
  stop_worker(comm, true);  // its operation sees the abort and returns
  while (comm->in_calls.load() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  // Peers waiting for this rank fail now, with this rank named.
  if (comm->base) fail(comm, ncclSystemError, "aborted by ncclCommAbort", true);
  release(comm);
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async_error) {
  if (!comm || !async_error) return arg_error("ncclCommGetAsyncError: NULL argument");
  const int e = comm->error.load();
  *async_error = e != 0                     ? static_cast<ncclResult_t>(e)
                 : comm->pending.load() > 0 ? ncclInProgress
                                            : ncclSuccess;
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  if (!comm || !count) return arg_error("ncclCommCount: NULL argument");
  *count = comm->nranks;
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  if (!comm || !rank) return arg_error("ncclCommUserRank: NULL argument");
  *rank = comm->rank;
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error";
    case ncclSystemError:
      return "unhandled system error (timeout, abort, shared memory)";
    case ncclInternalError:
      return "internal error";
    case ncclInvalidArgument:
      return "invalid argument";
    case ncclInvalidUsage:
      return "invalid usage";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInProgress:
      return "NCCL operation in progress";
    default:
      return "unknown result code";
  }
}

const char* ncclGetLastError(ncclComm_t comm) {
  thread_local std::string copy;
  if (comm) {
    std::lock_guard<std::mutex> lock(comm->err_mu);
    copy = comm->last_error;
  } else {
    std::lock_guard<std::mutex> lock(g_last_mu);
    copy = g_last_error;
  }
  return copy.c_str();
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  cudasim::flush_stream(stream);  // the op reads what the stream's queued work wrote
  return add_coll(comm, Coll{Kind::kAllReduce, static_cast<const char*>(sendbuff),
                             static_cast<char*>(recvbuff), count, datatype, op, -1});
}

ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  cudasim::flush_stream(stream);  // the op reads what the stream's queued work wrote
  return add_coll(comm, Coll{Kind::kReduce, static_cast<const char*>(sendbuff), static_cast<char*>(recvbuff),
                             count, datatype, op, root});
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                           int root, ncclComm_t comm, cudaStream_t stream) {
  cudasim::flush_stream(stream);  // the op reads what the stream's queued work wrote
  return add_coll(comm, Coll{Kind::kBroadcast, static_cast<const char*>(sendbuff),
                             static_cast<char*>(recvbuff), count, datatype, ncclSum, root});
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream) {
  cudasim::flush_stream(stream);  // the op reads what the stream's queued work wrote
  return add_coll(comm, Coll{Kind::kReduceScatter, static_cast<const char*>(sendbuff),
                             static_cast<char*>(recvbuff), recvcount, datatype, op, -1});
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
  cudasim::flush_stream(stream);  // the op reads what the stream's queued work wrote
  return add_coll(comm, Coll{Kind::kAllGather, static_cast<const char*>(sendbuff),
                             static_cast<char*>(recvbuff), sendcount, datatype, ncclSum, -1});
}

ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  cudasim::flush_stream(stream);  // the op reads what the stream's queued work wrote
  return add_p2p(comm, P2p{true, peer, static_cast<char*>(const_cast<void*>(sendbuff)), 0}, count, datatype);
}

ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  cudasim::flush_stream(stream);  // the op reads what the stream's queued work wrote
  return add_p2p(comm, P2p{false, peer, static_cast<char*>(recvbuff), 0}, count, datatype);
}

ncclResult_t ncclGroupStart(void) {
  ++g_depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void) {
  if (g_depth == 0) {
    set_global_error("ncclGroupEnd without ncclGroupStart");
    return ncclInvalidUsage;
  }
  if (--g_depth > 0) return ncclSuccess;
  std::vector<Pending> ops;
  ops.swap(g_ops);
  std::vector<ncclComm*> comms;  // in order of first use
  for (const Pending& p : ops)
    if (std::find(comms.begin(), comms.end(), p.comm) == comms.end()) comms.push_back(p.comm);
  ncclResult_t result = ncclSuccess;
  for (ncclComm* c : comms) {
    std::vector<Coll> colls;
    std::vector<P2p> p2ps;
    for (const Pending& p : ops) {
      if (p.comm != c) continue;
      if (p.is_coll)
        colls.push_back(p.coll);
      else
        p2ps.push_back(p.p2p);
    }
    CallGuard guard(c);
    const ncclResult_t r = run_group(c, std::move(colls), std::move(p2ps));
    if (r != ncclSuccess && (result == ncclSuccess || result == ncclInProgress)) result = r;
  }
  return result;
}

}  // extern "C"
