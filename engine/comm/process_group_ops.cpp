// ProcessGroup's public operations (thin wrappers that build an Op and submit it), sub-group
// creation, and the one-rank group. The machinery they rely on is in process_group.cpp.
//
// Non-obvious decision: sub-group store prefixes count creations per (name, world members) in a
// process-wide table, so two groups with the same members and name (say, a re-created "dp" group)
// never reuse a prefix, and every member computes the same prefix without talking to the others.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "engine/comm/process_group.h"
#include "engine/core/error.h"

namespace flotilla::comm {
namespace {

std::mutex g_prefix_mutex;
std::map<std::string, int>& prefix_counts() {
  static std::map<std::string, int> counts;
  return counts;
}

// Test-only fault (docs/reliability.md C6): FLOTILLA_TEST_FAIL_COLLECTIVE="R:N" makes the Nth all_reduce
// (1-based, counted over every group of the process) on world rank R fail with Error(kComm), on a
// first attempt only (FLOTILLA_RESTART_COUNT unset or 0), so a test sees the failure reported and
// the restart succeed. Never set outside tests.
void maybe_fail_injected(OpKind kind) {
  static const char* spec = std::getenv("FLOTILLA_TEST_FAIL_COLLECTIVE");
  if (spec == nullptr || kind != OpKind::kAllReduce) return;
  static std::atomic<int64_t> seen{0};
  const char* rank_env = std::getenv("RANK");
  const char* restart_env = std::getenv("FLOTILLA_RESTART_COUNT");
  const long rank = rank_env ? std::atol(rank_env) : 0;
  long want_rank = -1, want_n = -1;
  if (std::sscanf(spec, "%ld:%ld", &want_rank, &want_n) != 2) return;
  if (rank != want_rank || (restart_env && std::atol(restart_env) != 0)) return;
  if (++seen == want_n)
    throw Error(ExitCode::kComm, "all_reduce #" + std::to_string(want_n) + " on rank " +
                                     std::to_string(rank) +
                                     ": injected collective failure (FLOTILLA_TEST_FAIL_COLLECTIVE)");
}

}  // namespace

// --- public operations -------------------------------------------------------------------------
std::unique_ptr<Work> ProcessGroup::collective(OpKind kind, DType dtype, void* data, const void* input,
                                               size_t count, int root, Millis timeout, bool blocking) {
  Op op;
  op.kind = kind;
  op.dtype = dtype;
  op.data = data;
  op.input = input;
  op.count = count;
  op.root = root;
  op.timeout = timeout;
  maybe_fail_injected(kind);
  if (kind == OpKind::kBroadcast && (root < 0 || root >= size())) {
    throw Error(ExitCode::kInternal, "broadcast on group " + name_ + ": root " + std::to_string(root) +
                                         " is not a rank of the group (size " + std::to_string(size()) + ")");
  }
  return std::make_unique<Work>(submit(std::move(op), blocking));
}

void ProcessGroup::all_reduce(float* data, size_t count, Millis timeout) {
  collective(OpKind::kAllReduce, DType::kFloat32, data, nullptr, count, 0, timeout, true)->wait();
}
void ProcessGroup::all_reduce(double* data, size_t count, Millis timeout) {
  collective(OpKind::kAllReduce, DType::kFloat64, data, nullptr, count, 0, timeout, true)->wait();
}
void ProcessGroup::all_reduce(int64_t* data, size_t count, Millis timeout) {
  collective(OpKind::kAllReduce, DType::kInt64, data, nullptr, count, 0, timeout, true)->wait();
}
void ProcessGroup::reduce_scatter(const float* in, float* out, size_t count, Millis timeout) {
  collective(OpKind::kReduceScatter, DType::kFloat32, out, in, count, 0, timeout, true)->wait();
}
void ProcessGroup::all_gather(const float* in, float* out, size_t count, Millis timeout) {
  collective(OpKind::kAllGather, DType::kFloat32, out, in, count, 0, timeout, true)->wait();
}
void ProcessGroup::broadcast(float* data, size_t count, int root, Millis timeout) {
  collective(OpKind::kBroadcast, DType::kFloat32, data, nullptr, count, root, timeout, true)->wait();
}
void ProcessGroup::broadcast(double* data, size_t count, int root, Millis timeout) {
  collective(OpKind::kBroadcast, DType::kFloat64, data, nullptr, count, root, timeout, true)->wait();
}
void ProcessGroup::broadcast(int64_t* data, size_t count, int root, Millis timeout) {
  collective(OpKind::kBroadcast, DType::kInt64, data, nullptr, count, root, timeout, true)->wait();
}
void ProcessGroup::broadcast_bytes(void* data, size_t bytes, int root, Millis timeout) {
  collective(OpKind::kBroadcast, DType::kByte, data, nullptr, bytes, root, timeout, true)->wait();
}
void ProcessGroup::barrier(Millis timeout) {
  collective(OpKind::kBarrier, DType::kByte, nullptr, nullptr, 0, 0, timeout, true)->wait();
}
std::unique_ptr<Work> ProcessGroup::all_reduce_async(float* data, size_t count, Millis timeout) {
  return collective(OpKind::kAllReduce, DType::kFloat32, data, nullptr, count, 0, timeout, false);
}
std::unique_ptr<Work> ProcessGroup::reduce_scatter_async(const float* in, float* out, size_t count,
                                                         Millis timeout) {
  return collective(OpKind::kReduceScatter, DType::kFloat32, out, in, count, 0, timeout, false);
}
std::unique_ptr<Work> ProcessGroup::all_gather_async(const float* in, float* out, size_t count,
                                                     Millis timeout) {
  return collective(OpKind::kAllGather, DType::kFloat32, out, in, count, 0, timeout, false);
}

void ProcessGroup::check_peer(int peer, const char* what) const {
  if (peer < 0 || peer >= size() || peer == rank_) {
    throw Error(ExitCode::kInternal, std::string(what) + " on group " + name_ + " (rank " +
                                         std::to_string(rank_) + " of " + std::to_string(size()) +
                                         "): peer " + std::to_string(peer) +
                                         " must be another rank of the group");
  }
}

std::unique_ptr<Work> ProcessGroup::transfer(const void* send_data, size_t send_bytes, int send_peer,
                                             void* recv_data, size_t recv_bytes, int recv_peer,
                                             Millis timeout) {
  if (send_peer >= 0) check_peer(send_peer, "send");
  if (recv_peer >= 0) check_peer(recv_peer, "recv");
  Op op;
  op.kind = OpKind::kSendRecv;
  op.dtype = DType::kByte;
  op.send_data = send_data;
  op.send_bytes = send_bytes;
  op.send_peer = send_peer;
  op.recv_data = recv_data;
  op.recv_bytes = recv_bytes;
  op.recv_peer = recv_peer;
  op.timeout = timeout;
  return std::make_unique<Work>(submit(std::move(op), false));
}

void ProcessGroup::send(const float* data, size_t count, int peer, Millis timeout) {
  transfer(data, count * sizeof(float), peer, nullptr, 0, -1, timeout)->wait();
}
void ProcessGroup::recv(float* data, size_t count, int peer, Millis timeout) {
  transfer(nullptr, 0, -1, data, count * sizeof(float), peer, timeout)->wait();
}
void ProcessGroup::send_bytes(const void* data, size_t bytes, int peer, Millis timeout) {
  transfer(data, bytes, peer, nullptr, 0, -1, timeout)->wait();
}
void ProcessGroup::recv_bytes(void* data, size_t bytes, int peer, Millis timeout) {
  transfer(nullptr, 0, -1, data, bytes, peer, timeout)->wait();
}
std::unique_ptr<Work> ProcessGroup::send_async(const float* data, size_t count, int peer, Millis timeout) {
  return transfer(data, count * sizeof(float), peer, nullptr, 0, -1, timeout);
}
std::unique_ptr<Work> ProcessGroup::recv_async(float* data, size_t count, int peer, Millis timeout) {
  return transfer(nullptr, 0, -1, data, count * sizeof(float), peer, timeout);
}
void ProcessGroup::send_recv(const float* send_data, size_t send_count, int send_peer, float* recv_data,
                             size_t recv_count, int recv_peer, Millis timeout) {
  transfer(send_data, send_count * sizeof(float), send_peer, recv_data, recv_count * sizeof(float), recv_peer,
           timeout)
      ->wait();
}

std::unique_ptr<ProcessGroup> ProcessGroup::new_group(const std::vector<int>& members,
                                                      const std::string& name) {
  bool has_self = false;
  std::string world_list;
  for (size_t i = 0; i < members.size(); ++i) {
    const int m = members[i];
    if (m < 0 || m >= size() || (i > 0 && m <= members[i - 1])) {
      throw Error(ExitCode::kInternal, "new_group '" + name + "' on group " + name_ +
                                           ": members must be ascending ranks of the group (size " +
                                           std::to_string(size()) + ")");
    }
    has_self = has_self || m == rank_;
    if (i > 0) world_list += ",";
    world_list += std::to_string(world_rank_of(m));
  }
  if (!has_self) {
    throw Error(ExitCode::kInternal, "new_group '" + name + "' on group " + name_ + ": rank " +
                                         std::to_string(rank_) + " is not among the members");
  }
  std::string prefix = "group/" + name + "/" + world_list;
  {
    std::lock_guard<std::mutex> lock(g_prefix_mutex);
    const int nth = ++prefix_counts()[prefix];
    prefix += '/';
    prefix += std::to_string(nth);
  }
  return make_subgroup(members, name, prefix);
}

// --- the one-rank group ------------------------------------------------------------------------
namespace {

class SoloProcessGroup final : public ProcessGroup {
 public:
  SoloProcessGroup(const std::string& name, int world_rank, Millis timeout)
      : ProcessGroup(name, 0, {world_rank}, timeout) {}
  ~SoloProcessGroup() override { shutdown(); }
  const char* backend() const override { return "solo"; }

 protected:
  void run(Op& op) override {
    const size_t bytes = op.count * dtype_size(op.dtype);
    if ((op.kind == OpKind::kReduceScatter || op.kind == OpKind::kAllGather) && op.data != op.input &&
        bytes > 0) {
      std::memmove(op.data, op.input, bytes);
    }
  }
  std::unique_ptr<ProcessGroup> make_subgroup(const std::vector<int>&, const std::string& name,
                                              const std::string&) override {
    return make_solo_group(name, world_rank_of(0), timeout());
  }
  void abort_connections() noexcept override {}
};

}  // namespace

std::unique_ptr<ProcessGroup> make_solo_group(const std::string& name, int world_rank, Millis timeout) {
  return std::make_unique<SoloProcessGroup>(name, world_rank, timeout);
}

}  // namespace flotilla::comm
