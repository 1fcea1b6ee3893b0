// ProcessGroup's backend-independent half: submission, the ordered communication thread, Work,
// timeouts, time accounting, the last-operation record and group poisoning (see process_group.h).
//
// Non-obvious decision: Work::wait does not trust the backend to honour its deadline. It waits at
// most timeout + slack after the operation started, then declares the backend hung, poisons the
// group and throws, so a stuck transport (or an ncclCommAbort that never returns) can delay a
// rank's error report by the slack but never hide it.
#include "engine/comm/process_group.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <set>

#include "engine/core/error.h"

namespace flotilla::comm {

namespace detail {
struct OpState {
  ProcessGroup* group = nullptr;
  ProcessGroup::Op op;
  std::mutex m;
  std::condition_variable cv;
  bool started = false;
  bool done = false;
  std::string error;
  SteadyTime start{};
  std::unique_ptr<ProcessGroup::PendingTransfer> pending;  // caller-thread transfers
};
}  // namespace detail

namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(SteadyTime a, SteadyTime b) { return std::chrono::duration<double>(b - a).count(); }

std::string fmt_seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), s < 10 ? "%.3g s" : "%.0f s", s);
  return buf;
}

// Slack granted to a backend beyond an operation's deadline before Work::wait calls it hung.
Millis hang_slack(Millis timeout) { return Millis(5000) + timeout / 10; }

std::mutex g_registry_mutex;
std::set<ProcessGroup*>& registry() {
  static std::set<ProcessGroup*> groups;
  return groups;
}

}  // namespace

size_t dtype_size(DType t) {
  switch (t) {
    case DType::kFloat32:
      return 4;
    case DType::kFloat64:
    case DType::kInt64:
      return 8;
    case DType::kByte:
      return 1;
  }
  return 1;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kFloat32:
      return "float32";
    case DType::kFloat64:
      return "float64";
    case DType::kInt64:
      return "int64";
    case DType::kByte:
      return "bytes";
  }
  return "?";
}

const char* op_name(OpKind k) {
  switch (k) {
    case OpKind::kAllReduce:
      return "all_reduce";
    case OpKind::kReduceScatter:
      return "reduce_scatter";
    case OpKind::kAllGather:
      return "all_gather";
    case OpKind::kBroadcast:
      return "broadcast";
    case OpKind::kBarrier:
      return "barrier";
    case OpKind::kSendRecv:
      return "send/recv";
  }
  return "?";
}

OpStats CommStats::total() const {
  OpStats t;
  for (const auto& s : per_op) {
    t.count += s.count;
    t.bytes += s.bytes;
    t.busy_s += s.busy_s;
    t.wait_s += s.wait_s;
  }
  return t;
}

std::string CollectiveRecord::describe() const {
  if (!started) return "no operation yet on group " + group;
  std::string s = op + " #" + std::to_string(seq) + (peer.empty() ? "" : " " + peer) + " on group " + group +
                  " (rank " + std::to_string(rank) + " of " + std::to_string(size) + ")";
  if (!finished) return s + " running for " + fmt_seconds(seconds);
  return s + (failed ? " failed after " : " finished in ") + fmt_seconds(seconds);
}

std::vector<CollectiveRecord> collective_records() {
  std::vector<CollectiveRecord> out;
  {
    std::lock_guard<std::mutex> lock(g_registry_mutex);
    for (ProcessGroup* g : registry()) {
      CollectiveRecord r = g->last_record();
      if (r.started) out.push_back(std::move(r));
    }
  }
  std::sort(out.begin(), out.end(), [](const CollectiveRecord& a, const CollectiveRecord& b) {
    if (a.finished != b.finished) return !a.finished;
    return a.start < b.start;
  });
  return out;
}

// ---------------------------------------------------------------------------------------------
Work::Work(std::shared_ptr<detail::OpState> state) : state_(std::move(state)) {}

Work::~Work() {
  if (!waited_ && state_) state_->group->wait_state(*state_, /*rethrow=*/false);
}

void Work::wait() {
  if (waited_) return;
  waited_ = true;
  state_->group->wait_state(*state_, /*rethrow=*/true);
}

bool Work::done() const {
  std::lock_guard<std::mutex> lock(state_->m);
  return state_->done;
}

// ---------------------------------------------------------------------------------------------
ProcessGroup::ProcessGroup(std::string name, int rank, std::vector<int> world_ranks, Millis timeout)
    : name_(std::move(name)), rank_(rank), world_ranks_(std::move(world_ranks)), timeout_(timeout) {
  sent_to_.assign(world_ranks_.size(), 0);
  received_from_.assign(world_ranks_.size(), 0);
  record_.group = name_;
  record_.rank = rank_;
  record_.size = size();
  std::lock_guard<std::mutex> lock(g_registry_mutex);
  registry().insert(this);
}

ProcessGroup::~ProcessGroup() {
  shutdown();
  std::lock_guard<std::mutex> lock(g_registry_mutex);
  registry().erase(this);
}

void ProcessGroup::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  queue_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::string ProcessGroup::op_label(OpKind kind, uint64_t seq) const {
  return std::string(op_name(kind)) + " #" + std::to_string(seq) + " on group " + name_ + " (rank " +
         std::to_string(rank_) + " of " + std::to_string(size()) + ")";
}

std::string ProcessGroup::peer_label(int group_rank) const {
  std::string s = "rank " + std::to_string(group_rank);
  if (group_rank >= 0 && group_rank < size() && world_rank_of(group_rank) != group_rank) {
    s += " (world rank " + std::to_string(world_rank_of(group_rank)) + ")";
  }
  return s;
}

CommStats ProcessGroup::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

CollectiveRecord ProcessGroup::last_record() const {
  std::lock_guard<std::mutex> lock(mutex_);
  CollectiveRecord r = record_;
  if (r.started && !r.finished) r.seconds = seconds_between(r.start, Clock::now());
  return r;
}

std::unique_ptr<ProcessGroup::PendingTransfer> ProcessGroup::start_transfer(Op& op) {
  throw Error(ExitCode::kInternal, op.label + ": backend " + backend() + " does not post transfers itself");
}

void ProcessGroup::fail(const std::string& message) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (failure_.empty()) failure_ = message;
  }
  abort_connections();
}

// --- submission --------------------------------------------------------------------------------
std::shared_ptr<detail::OpState> ProcessGroup::submit(Op op, bool blocking) {
  auto state = std::make_shared<detail::OpState>();
  state->group = this;
  if (op.timeout.count() < 0) op.timeout = timeout_;
  op.timeout = std::clamp(op.timeout, Millis(1), Millis(std::chrono::hours(24 * 365)));
  const bool transfer = op.kind == OpKind::kSendRecv;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (transfer) {
      op.seq = ++transfer_seq_;
      if (op.send_peer >= 0) op.send_seq = ++sent_to_[static_cast<size_t>(op.send_peer)];
      if (op.recv_peer >= 0) op.recv_seq = ++received_from_[static_cast<size_t>(op.recv_peer)];
      std::string who;
      if (op.send_peer >= 0) who += "to " + peer_label(op.send_peer);
      if (op.recv_peer >= 0) who += std::string(who.empty() ? "" : ", ") + "from " + peer_label(op.recv_peer);
      op.label = std::string(op.send_peer >= 0 && op.recv_peer >= 0 ? "send/recv"
                             : op.send_peer >= 0                    ? "send"
                                                                    : "recv") +
                 " #" + std::to_string(op.seq) + " " + who + " on group " + name_ + " (rank " +
                 std::to_string(rank_) + " of " + std::to_string(size()) + ")";
    } else {
      op.seq = ++seq_;
      op.label = op_label(op.kind, op.seq);
    }
    if (!failure_.empty()) {
      throw Error(ExitCode::kComm, op.label + ": not started: the group failed earlier: " + failure_);
    }
  }
  op.backend_token = on_submit();
  state->op = std::move(op);

  if (transfer && transfers_on_caller_thread()) {
    execute(*state);  // posts the transfer; wait_state() completes it
    return state;
  }
  {
    std::unique_lock<std::mutex> lock(mutex_);
    if (blocking && queue_.empty() && !busy_) {
      // Idle queue: run here, in order, without waking the communication thread.
      busy_ = true;
      lock.unlock();
      const auto t0 = Clock::now();
      execute(*state);
      lock.lock();
      busy_ = false;
      stats_.per_op[static_cast<int>(state->op.kind)].wait_s += seconds_between(t0, Clock::now());
      lock.unlock();
      queue_cv_.notify_all();
      return state;
    }
    queue_.push_back(state);
    if (!thread_.joinable()) thread_ = std::thread([this] { comm_loop(); });
  }
  queue_cv_.notify_all();
  return state;
}

void ProcessGroup::comm_loop() {
  for (;;) {
    std::shared_ptr<detail::OpState> state;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      queue_cv_.wait(lock, [&] { return (stopping_ || !queue_.empty()) && !busy_; });
      if (queue_.empty()) return;  // stopping, and everything queued has run
      state = queue_.front();
      queue_.pop_front();
      busy_ = true;
    }
    execute(*state);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      busy_ = false;
    }
    queue_cv_.notify_all();  // an inline caller may be waiting for the queue to drain
  }
}

// Runs (or, for caller-thread transfers, posts) one operation; records and accounts for it.
void ProcessGroup::execute(detail::OpState& state) {
  Op& op = state.op;
  const auto start = Clock::now();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    record_.op = op.kind == OpKind::kSendRecv ? op.label.substr(0, op.label.find(' ')) : op_name(op.kind);
    record_.seq = op.seq;
    record_.peer.clear();
    if (op.kind == OpKind::kSendRecv) {
      const size_t a = op.label.find(' ', op.label.find('#'));
      const size_t b = op.label.find(" on group ");
      if (a != std::string::npos && b != std::string::npos && b > a)
        record_.peer = op.label.substr(a + 1, b - a - 1);
    }
    record_.start = start;
    record_.started = true;
    record_.finished = false;
    record_.failed = false;
    record_.seconds = 0;
    const size_t bytes =
        op.kind == OpKind::kSendRecv        ? op.send_bytes + op.recv_bytes
        : op.kind == OpKind::kAllGather     ? op.count * dtype_size(op.dtype) * static_cast<size_t>(size())
        : op.kind == OpKind::kReduceScatter ? op.count * dtype_size(op.dtype) * static_cast<size_t>(size())
                                            : op.count * dtype_size(op.dtype);
    auto& s = stats_.per_op[static_cast<int>(op.kind)];
    s.count += 1;
    s.bytes += bytes;
  }
  op.deadline = start + op.timeout;
  {
    std::lock_guard<std::mutex> lock(state.m);
    state.started = true;
    state.start = start;
  }
  std::string error;
  {
    std::string earlier;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      earlier = failure_;
    }
    if (!earlier.empty()) error = op.label + ": not started: the group failed earlier: " + earlier;
  }
  if (error.empty()) {
    try {
      if (op.kind == OpKind::kSendRecv && transfers_on_caller_thread()) {
        state.pending = start_transfer(op);
      } else {
        run(op);
      }
    } catch (const Error& e) {
      error = e.what();
    } catch (const std::exception& e) {
      error = op.label + ": " + e.what();
    }
  }
  if (!error.empty()) fail(error);
  const bool finished_now = !state.pending || !error.empty();
  if (finished_now) {
    const double busy = seconds_between(start, Clock::now());
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stats_.per_op[static_cast<int>(op.kind)].busy_s += busy;
      if (record_.seq == op.seq && record_.start == start) {
        record_.finished = true;
        record_.failed = !error.empty();
        record_.seconds = busy;
      }
    }
    {
      std::lock_guard<std::mutex> lock(state.m);
      state.done = true;
      state.error = error;
    }
    state.cv.notify_all();
  }
}

void ProcessGroup::wait_state(detail::OpState& state, bool rethrow) {
  const auto t0 = Clock::now();
  std::string error;
  if (state.pending) {
    // A caller-thread transfer: complete it here.
    std::unique_ptr<PendingTransfer> pending = std::move(state.pending);
    try {
      pending->wait(state.op);
    } catch (const Error& e) {
      error = e.what();
    } catch (const std::exception& e) {
      error = state.op.label + ": " + e.what();
    }
    if (!error.empty()) fail(error);
    const double busy = seconds_between(state.start, Clock::now());
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stats_.per_op[static_cast<int>(state.op.kind)].busy_s += busy;
      if (record_.seq == state.op.seq && record_.start == state.start) {
        record_.finished = true;
        record_.failed = !error.empty();
        record_.seconds = busy;
      }
    }
    std::lock_guard<std::mutex> lock(state.m);
    state.done = true;
    state.error = error;
  } else {
    std::unique_lock<std::mutex> lock(state.m);
    while (!state.done) {
      state.cv.wait_for(lock, Millis(200));
      if (state.done || !state.started) continue;
      if (Clock::now() > state.start + state.op.timeout + hang_slack(state.op.timeout)) {
        error = state.op.label + ": did not finish within its timeout of " +
                fmt_seconds(std::chrono::duration<double>(state.op.timeout).count()) +
                " plus slack: the communication backend is hung (peer stopped without closing its "
                "connection?)";
        lock.unlock();
        fail(error);
        lock.lock();
        break;
      }
    }
    if (error.empty()) error = state.error;
  }
  const double waited = seconds_between(t0, Clock::now());
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.per_op[static_cast<int>(state.op.kind)].wait_s += waited;
  }
  if (!error.empty() && rethrow) throw Error(ExitCode::kComm, error);
}

std::string ProcessGroup::members_text() const {
  std::string s = "world ranks ";
  for (int i = 0; i < size(); ++i) {
    if (i > 0) s += ",";
    s += std::to_string(world_rank_of(i));
  }
  return s;
}

}  // namespace flotilla::comm
