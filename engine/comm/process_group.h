// ProcessGroup: collectives and point-to-point transfers among the ranks of one group (the world,
// or a DP / TP / PP group of the rank grid), each with a timeout, implemented on Gloo (CPU
// buffers, TCP) and NCCL (device buffers; host buffers are staged).
//
// Non-obvious decisions:
// - The public operations are non-virtual and live here: sequence numbers, the queue, timeouts,
//   time accounting, the last-collective record and error wrapping are the same for every backend.
//   Backends implement the documented protected hooks at the bottom (run_collective, ...).
// - Collectives run in submission order through one queue per group, drained by a communication
//   thread. Collectives must be issued in the same order on every rank of a group, and a single
//   ordered queue makes "async all_reduce, then a blocking one" safe by construction. A blocking
//   call finding the queue idle runs in the caller's thread (same order, two thread hand-offs
//   fewer: small tensor-parallel all-reduces are latency-bound).
// - A failure poisons the group: the backend closes/aborts its connections so that every peer's
//   pending operation fails at once (no rank blocks in the next collective, docs/reliability.md C6), and
//   every later operation on the group fails immediately with the original cause.
// - Messages name the operation, its sequence number, the group, this rank and the peer:
//   "all_reduce #412 on group dp (rank 1 of 2): peer rank 0 closed the connection ...".
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace flotilla::comm {

using Millis = std::chrono::milliseconds;
using SteadyTime = std::chrono::steady_clock::time_point;

// Pass as `timeout` to use the group's default (config parallel.timeout_s).
constexpr Millis kGroupTimeout{-1};

enum class DType : uint8_t { kFloat32, kFloat64, kInt64, kByte };
size_t dtype_size(DType t);
const char* dtype_name(DType t);

enum class OpKind : uint8_t { kAllReduce, kReduceScatter, kAllGather, kBroadcast, kBarrier, kSendRecv };
constexpr int kOpKinds = 6;
const char* op_name(OpKind k);  // "all_reduce", "reduce_scatter", ...

// Time and volume per operation kind, cumulative since the group was created.
struct OpStats {
  uint64_t count = 0;
  uint64_t bytes = 0;  // payload bytes of this rank's buffer(s) (nccl-tests' "size")
  double busy_s = 0;   // wall time the operations spent executing
  double wait_s = 0;   // wall time callers were blocked on them (blocking calls + Work::wait)
};
struct CommStats {
  OpStats per_op[kOpKinds];
  OpStats total() const;
};

// The newest operation of a group, for stall reports ("rank 1 stuck in all_reduce #412 on
// group dp for 31 s") and the launcher's root-cause report.
struct CollectiveRecord {
  std::string op;     // "all_reduce", "send/recv", ...
  std::string group;  // "dp"
  uint64_t seq = 0;   // 1-based; collectives and transfers are numbered separately
  int rank = 0, size = 1;
  std::string peer;      // transfers: "to rank 1", "from rank 0"; empty for collectives
  SteadyTime start{};    // when it began executing
  bool started = false;  // false: nothing ran yet
  bool finished = false;
  bool failed = false;
  double seconds = 0;  // running time so far, or total when finished
  // "all_reduce #412 on group dp (rank 1 of 2) running for 31.2 s" / "... finished in 0.004 s".
  std::string describe() const;
};

// The last record of every live group of this process that has run anything: unfinished ones
// first, oldest first (the stuck operation of a stall report is element 0).
std::vector<CollectiveRecord> collective_records();

namespace detail {
struct OpState;
}

// A pending operation. wait() blocks until it completes and throws Error(kComm) if it failed.
// Destroying an unwaited Work waits for it (the operation may still be using the caller's
// buffers) but does not throw; the failure still poisons the group.
class Work {
 public:
  explicit Work(std::shared_ptr<detail::OpState> state);
  ~Work();
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;

  void wait();
  bool done() const;  // completed (successfully or not) without blocking

 private:
  std::shared_ptr<detail::OpState> state_;
  bool waited_ = false;
};

class ProcessGroup {
 public:
  virtual ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return static_cast<int>(world_ranks_.size()); }
  const std::string& name() const { return name_; }  // "world", "dp", "tp", "pp", ...
  // World rank of member `group_rank` (members are listed in world order by the caller).
  int world_rank_of(int group_rank) const { return world_ranks_.at(static_cast<size_t>(group_rank)); }
  const std::vector<int>& world_ranks() const { return world_ranks_; }
  virtual const char* backend() const = 0;  // "gloo", "nccl", "solo"

  Millis timeout() const { return timeout_; }
  void set_timeout(Millis timeout) { timeout_ = timeout; }
  // Device backends (NCCL): the cudaStream_t on which the caller produces and consumes buffers.
  // Each operation first waits for the work queued on it at submission; completion is host-side
  // (wait() returns when the result is in place). Default: the legacy default stream. NCCL also
  // takes host buffers: they are staged through a device scratch buffer (nccl_staging.h), copied
  // back when the collective is done. Host backends ignore the stream.
  virtual void set_device_stream(void* cuda_stream) {}

  // --- Collectives (every rank of the group calls them, in the same order, with the same sizes).
  // Sum over the group, in place. The summation order is fixed by the backend for a given group
  // size and count, so two runs with the same layout give bitwise identical results.
  void all_reduce(float* data, size_t count, Millis timeout = kGroupTimeout);
  void all_reduce(double* data, size_t count, Millis timeout = kGroupTimeout);
  void all_reduce(int64_t* data, size_t count, Millis timeout = kGroupTimeout);
  // in: [size() * count] (chunk r for rank r); out: [count] = sum over ranks of chunk rank().
  // in and out must not overlap, except out == in + rank() * count.
  void reduce_scatter(const float* in, float* out, size_t count, Millis timeout = kGroupTimeout);
  // in: [count]; out: [size() * count], chunk r from rank r. in may be out + rank() * count.
  void all_gather(const float* in, float* out, size_t count, Millis timeout = kGroupTimeout);
  void broadcast(float* data, size_t count, int root, Millis timeout = kGroupTimeout);
  void broadcast(double* data, size_t count, int root, Millis timeout = kGroupTimeout);
  void broadcast(int64_t* data, size_t count, int root, Millis timeout = kGroupTimeout);
  void broadcast_bytes(void* data, size_t bytes, int root, Millis timeout = kGroupTimeout);
  void barrier(Millis timeout = kGroupTimeout);

  // Non-blocking variants for overlapping communication with compute (data-parallel gradient
  // buckets). The buffers must stay untouched until wait() returns.
  std::unique_ptr<Work> all_reduce_async(float* data, size_t count, Millis timeout = kGroupTimeout);
  std::unique_ptr<Work> reduce_scatter_async(const float* in, float* out, size_t count,
                                             Millis timeout = kGroupTimeout);
  std::unique_ptr<Work> all_gather_async(const float* in, float* out, size_t count,
                                         Millis timeout = kGroupTimeout);

  // --- Point to point, to a peer rank of this group. A send completes when the peer has
  // received it (rendezvous, like NCCL): when two ranks exchange at once, use send_recv() or the
  // async variants and wait both, or they deadlock. Transfers to one peer match in call order;
  // issue them from one thread per group.
  void send(const float* data, size_t count, int peer, Millis timeout = kGroupTimeout);
  void recv(float* data, size_t count, int peer, Millis timeout = kGroupTimeout);
  void send_bytes(const void* data, size_t bytes, int peer, Millis timeout = kGroupTimeout);
  void recv_bytes(void* data, size_t bytes, int peer, Millis timeout = kGroupTimeout);
  std::unique_ptr<Work> send_async(const float* data, size_t count, int peer, Millis timeout = kGroupTimeout);
  std::unique_ptr<Work> recv_async(float* data, size_t count, int peer, Millis timeout = kGroupTimeout);
  // Sends to send_peer and receives from recv_peer together (a pipeline stage's exchange).
  void send_recv(const float* send_data, size_t send_count, int send_peer, float* recv_data,
                 size_t recv_count, int recv_peer, Millis timeout = kGroupTimeout);

  // --- Sub-groups. `members` are ranks of this group, ascending, and must include rank(); every
  // member calls new_group with the same list and name, in the same order relative to other
  // new_group calls with that list. Non-members do not take part. Each sub-group has its own
  // connections and store prefix.
  std::unique_ptr<ProcessGroup> new_group(const std::vector<int>& members, const std::string& name);

  // --- Accounting.
  CommStats stats() const;
  CollectiveRecord last_record() const;
  // "all_reduce #412 on group dp (rank 1 of 2)": the prefix of every error message.
  std::string op_label(OpKind kind, uint64_t seq) const;
  // "rank 3" or "rank 1 (world rank 3)" when group and world ranks differ.
  std::string peer_label(int group_rank) const;

  // --- Backend interface.
  // One queued operation, as the backend sees it. Pointers are host memory for Gloo and device
  // memory for NCCL.
  struct Op {
    OpKind kind = OpKind::kBarrier;
    DType dtype = DType::kFloat32;
    uint64_t seq = 0;             // collective sequence number (same on every rank of the group)
    void* data = nullptr;         // all_reduce/broadcast: in/out; reduce_scatter/all_gather: out
    const void* input = nullptr;  // reduce_scatter/all_gather input
    size_t count = 0;             // elements (reduce_scatter/all_gather: per rank)
    int root = 0;                 // broadcast
    // send/recv: either part may be empty (bytes == 0 and peer < 0).
    const void* send_data = nullptr;
    size_t send_bytes = 0;
    int send_peer = -1;
    uint64_t send_seq = 0;  // n-th transfer from this rank to send_peer (1-based)
    void* recv_data = nullptr;
    size_t recv_bytes = 0;
    int recv_peer = -1;
    uint64_t recv_seq = 0;  // n-th transfer from recv_peer to this rank (1-based)
    SteadyTime deadline{};  // set when the operation starts executing
    Millis timeout{0};
    std::shared_ptr<void> backend_token;  // from on_submit()
    std::string label;                    // op_label(...) for messages
  };

 protected:
  // "world ranks 0,2": the members, for error messages of the backends.
  std::string members_text() const;
  // world_ranks: the world rank of each member, in group-rank order. rank: this process's group rank.
  ProcessGroup(std::string name, int rank, std::vector<int> world_ranks, Millis timeout);

  // Executes one operation to completion, or throws (flotilla::Error with a full message, or any
  // exception, which the base wraps with the op label). Called one at a time, in submission
  // order, on the group's communication thread or (a blocking call on an idle queue) the caller's
  // thread. Must return or throw by op.deadline (plus a little slack). For kSendRecv the backend
  // decides whether transfers run here (NCCL) or through start_transfer() (see
  // transfers_on_caller_thread()).
  virtual void run(Op& op) = 0;

  // True when point-to-point transfers are posted from the caller's thread via start_transfer()
  // instead of the ordered queue (Gloo: transfers use their own slots and cannot disturb queued
  // collectives). Default false.
  virtual bool transfers_on_caller_thread() const { return false; }

  // A transfer posted without blocking; wait() completes it or throws by op.deadline.
  class PendingTransfer {
   public:
    virtual ~PendingTransfer() = default;
    virtual void wait(Op& op) = 0;
  };
  // Posts op's send and/or receive and returns at once. Only called when
  // transfers_on_caller_thread() is true.
  virtual std::unique_ptr<PendingTransfer> start_transfer(Op& op);

  // Creates the sub-group over `members` (ranks of this group; size >= 2) with a fresh store
  // prefix `prefix` (unique per run and per group). Blocking; every member calls it.
  virtual std::unique_ptr<ProcessGroup> make_subgroup(const std::vector<int>& members,
                                                      const std::string& name, const std::string& prefix) = 0;

  // Tears down this group's connections after a failure so that peers fail fast. Must be safe to
  // call from any thread, while run() is executing, and more than once.
  virtual void abort_connections() noexcept = 0;

  // Called in the caller's thread when an operation is submitted (NCCL: record an event on the
  // caller's stream). The result travels in Op::backend_token. run() may execute in the caller's
  // thread too (a blocking call on an idle queue), never concurrently with another run().
  virtual std::shared_ptr<void> on_submit() { return nullptr; }

  // Stops the communication thread after the queued operations finish. Backends call it first in
  // their destructor, before tearing down what run() uses.
  void shutdown();

 private:
  friend class Work;
  friend struct detail::OpState;
  std::shared_ptr<detail::OpState> submit(Op op, bool blocking);
  void execute(detail::OpState& state);
  void comm_loop();
  void fail(const std::string& message);
  void finish_wait(detail::OpState& state, double waited_s);
  void wait_state(detail::OpState& state, bool rethrow);
  void check_peer(int peer, const char* what) const;
  std::unique_ptr<Work> transfer(const void* send_data, size_t send_bytes, int send_peer, void* recv_data,
                                 size_t recv_bytes, int recv_peer, Millis timeout);
  std::unique_ptr<Work> collective(OpKind kind, DType dtype, void* data, const void* input, size_t count,
                                   int root, Millis timeout, bool blocking);

  std::string name_;
  int rank_;
  std::vector<int> world_ranks_;
  Millis timeout_;

  mutable std::mutex mutex_;  // guards everything below
  std::condition_variable queue_cv_;
  std::deque<std::shared_ptr<detail::OpState>> queue_;
  std::thread thread_;
  bool stopping_ = false;
  bool busy_ = false;                    // an operation is executing (comm thread or inline)
  uint64_t seq_ = 0;                     // collectives submitted
  uint64_t transfer_seq_ = 0;            // transfers submitted (for records only)
  std::vector<uint64_t> sent_to_;        // per peer: transfers sent (matching order)
  std::vector<uint64_t> received_from_;  // per peer: transfers received
  std::string failure_;                  // first failure message; non-empty = poisoned
  CommStats stats_;
  CollectiveRecord record_;
  std::vector<std::pair<std::string, int>> subgroup_counts_;
};

// A group of one rank (single-process runs, degree-1 groups of a rank grid): collectives are
// copies or no-ops, transfers are errors.
std::unique_ptr<ProcessGroup> make_solo_group(const std::string& name, int world_rank, Millis timeout);

}  // namespace flotilla::comm
