// The NCCL backend: one non-blocking communicator and one CUDA stream per group, the unique id
// carried by the rendezvous store. Compiled only where CUDA and NCCL are present.
//
// Non-obvious decisions:
// - Every operation takes host or device buffers. Device (and managed) buffers go to NCCL as they
//   are (zero copy); host buffers (the trainer's loss mean, stop flags, string and checkpoint
//   broadcasts) are staged through a per-group device scratch buffer: copied in on the group's
//   stream, the collective runs there, and the result is copied out once the collective has
//   completed (polled, so the timeout still holds; a D2H copy into pageable memory blocks the
//   host, so it is issued only after completion). Only the group's stream is waited on. Which
//   buffers are staged, their layout and the scratch size are decided in nccl_staging.h.
// - Communicators are non-blocking (config.blocking = 0): every NCCL call returns at once, and
//   this thread polls ncclCommGetAsyncError and a completion event against the operation's
//   deadline. A blocking communicator would sit inside NCCL with no way to time out, which is how
//   a dead peer becomes a hang (the NCCL watchdog problem).
// - On an error or a timeout the communicator is aborted from a detached thread: ncclCommAbort
//   itself can hang (NVIDIA/nccl#1777), and the error must still reach the caller; the launcher's
//   SIGTERM-then-SIGKILL covers a process that stays stuck. An aborted group is never used again.
// - NCCL cannot say which peer failed, so messages name the group's members instead.
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "engine/comm/backends.h"
#include "engine/comm/nccl_staging.h"
#include "engine/comm/tcp_store.h"
#include "engine/core/error.h"
#include "engine/launch/gpu_pinning.h"

namespace flotilla::comm {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kPollEvery = std::chrono::microseconds(50);

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::kFloat32:
      return ncclFloat32;
    case DType::kFloat64:
      return ncclFloat64;
    case DType::kInt64:
      return ncclInt64;
    case DType::kByte:
      return ncclUint8;
  }
  return ncclUint8;
}

std::string seconds_text(Millis ms) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g s", static_cast<double>(ms.count()) / 1000.0);
  return buf;
}

void check_cuda(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess) throw Error(ExitCode::kComm, what + ": CUDA error: " + cudaGetErrorString(e));
}

namespace staging = nccl_staging;

// Where `p` lives. A pointer CUDA does not know fails the query on older runtimes; that error is
// cleared so it does not surface in an unrelated later check.
staging::PointerKind pointer_kind(const void* p) {
  cudaPointerAttributes a{};
  const cudaError_t e = cudaPointerGetAttributes(&a, p);
  if (e != cudaSuccess) cudaGetLastError();
  return staging::classify(e == cudaSuccess, static_cast<int>(a.type));
}

bool is_host(const void* p, size_t bytes) {
  return p != nullptr && bytes > 0 && staging::needs_staging(pointer_kind(p));
}

// The pointers NCCL is given: the caller's, or their regions of the scratch.
struct Buffers {
  void* data = nullptr;
  const void* input = nullptr;
  const void* send = nullptr;
  void* recv = nullptr;
};

struct NcclShared {
  std::shared_ptr<Rendezvous> rv;
  int device = 0;
};

// The event recorded on the caller's stream at submission (Op::backend_token).
struct SubmitEvent {
  cudaEvent_t event = nullptr;
  ~SubmitEvent() {
    if (event) cudaEventDestroy(event);
  }
};

class NcclProcessGroup final : public ProcessGroup {
 public:
  NcclProcessGroup(std::shared_ptr<NcclShared> shared, const std::string& name, int rank,
                   std::vector<int> world_ranks, Millis timeout, const std::string& prefix)
      : ProcessGroup(name, rank, world_ranks, timeout), shared_(std::move(shared)) {
    const std::string what = "creating NCCL group " + name + " (" + members_text() + ")";
    check_cuda(cudaSetDevice(shared_->device), what);
    const auto deadline = Clock::now() + timeout;

    ncclUniqueId id;
    const std::string key = prefix + "/nccl_unique_id";
    TcpStore& store = *shared_->rv->store;
    if (rank == 0) {
      const ncclResult_t r = ncclGetUniqueId(&id);
      if (r != ncclSuccess)
        throw Error(ExitCode::kComm, what + ": ncclGetUniqueId: " + ncclGetErrorString(r));
      store.set(key, std::vector<char>(reinterpret_cast<const char*>(&id),
                                       reinterpret_cast<const char*>(&id) + sizeof(id)));
    } else {
      const std::vector<char> bytes = store.get(key, timeout);
      if (bytes.size() != sizeof(id))
        throw Error(ExitCode::kComm, what + ": malformed NCCL unique id in the store");
      std::memcpy(&id, bytes.data(), sizeof(id));
    }

    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
#if NCCL_VERSION_CODE >= 21900
    config.commName = this->name().c_str();
#endif
    const ncclResult_t r = ncclCommInitRankConfig(&comm_, size(), id, rank, &config);
    if (r != ncclSuccess && r != ncclInProgress) {
      throw Error(ExitCode::kComm, what + ": ncclCommInitRankConfig: " + ncclGetErrorString(r));
    }
    std::string error = settle(deadline, "initialisation");
    if (!error.empty()) {
      abort_connections();
      throw Error(ExitCode::kComm, what + ": " + error);
    }
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), what);
    check_cuda(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), what);
    check_cuda(cudaMalloc(&barrier_buf_, 256), what);
  }

  ~NcclProcessGroup() override {
    shutdown();
    bool healthy = false;
    {
      std::lock_guard<std::mutex> lock(nccl_mutex_);
      healthy = !aborted_ && comm_ != nullptr;
      if (healthy) aborted_ = true;  // from here on the destructor owns comm_
    }
    if (healthy) {
      cudaSetDevice(shared_->device);
      // Finalize flushes outstanding work; a peer that is gone turns it into an abort.
      ncclResult_t r = ncclCommFinalize(comm_);
      const auto deadline = Clock::now() + std::min(timeout(), Millis(30000));
      ncclResult_t state = r;
      while (r == ncclSuccess || r == ncclInProgress) {
        if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess || state != ncclInProgress) break;
        if (Clock::now() > deadline) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      if (state == ncclSuccess) {
        ncclCommDestroy(comm_);
      } else {
        ncclCommAbort(comm_);
      }
    }
    if (barrier_buf_) cudaFree(barrier_buf_);
    if (scratch_) cudaFree(scratch_);
    if (done_) cudaEventDestroy(done_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  const char* backend() const override { return "nccl"; }

  void set_device_stream(void* cuda_stream) override {
    user_stream_ = static_cast<cudaStream_t>(cuda_stream);
  }

 protected:
  std::shared_ptr<void> on_submit() override {
    auto ev = std::make_shared<SubmitEvent>();
    if (cudaEventCreateWithFlags(&ev->event, cudaEventDisableTiming) != cudaSuccess ||
        cudaEventRecord(ev->event, user_stream_) != cudaSuccess) {
      return nullptr;  // run() then orders nothing; the failure resurfaces in the operation itself
    }
    return ev;
  }

  void run(Op& op) override {
    check_cuda(cudaSetDevice(shared_->device), op.label);
    if (op.backend_token) {
      check_cuda(cudaStreamWaitEvent(stream_, static_cast<SubmitEvent*>(op.backend_token.get())->event, 0),
                 op.label);
    }
    const staging::Plan plan = plan_for(op);
    Buffers buf{op.data, op.input, op.send_data, op.recv_data};
    if (plan.any()) stage_in(op, plan, buf);
    {
      std::lock_guard<std::mutex> lock(nccl_mutex_);
      if (aborted_)
        throw Error(ExitCode::kComm, op.label + ": the NCCL communicator was aborted after a failure");
      const ncclResult_t r = launch(op, buf);
      if (r != ncclSuccess && r != ncclInProgress) {
        throw Error(ExitCode::kComm, op.label + ": NCCL refused the operation: " + ncclGetErrorString(r) +
                                         ": " + ncclGetLastError(comm_));
      }
    }
    std::string error = settle(op.deadline, "enqueue");
    if (error.empty()) {
      check_cuda(cudaEventRecord(done_, stream_), op.label);
      error = wait_done(op);
    }
    if (error.empty() && plan.any()) error = stage_out(op, plan);
    if (!error.empty()) {
      abort_connections();
      throw Error(ExitCode::kComm, op.label + ": " + error);
    }
  }

  std::unique_ptr<ProcessGroup> make_subgroup(const std::vector<int>& members, const std::string& name,
                                              const std::string& prefix) override {
    std::vector<int> world;
    int my_index = -1;
    for (size_t i = 0; i < members.size(); ++i) {
      world.push_back(world_rank_of(members[i]));
      if (members[i] == rank()) my_index = static_cast<int>(i);
    }
    return std::make_unique<NcclProcessGroup>(shared_, name, my_index, world, timeout(), prefix);
  }

  void abort_connections() noexcept override {
    ncclComm_t comm = nullptr;
    {
      std::lock_guard<std::mutex> lock(nccl_mutex_);
      if (aborted_ || comm_ == nullptr) return;
      aborted_ = true;
      comm = comm_;
    }
    const int device = shared_->device;
    std::thread([comm, device] {
      cudaSetDevice(device);
      ncclCommAbort(comm);
    }).detach();
  }

 private:
  // Which of op's buffers are host memory, and their regions of the scratch.
  staging::Plan plan_for(const Op& op) const {
    const size_t es = dtype_size(op.dtype);
    const size_t one = op.count * es, all = one * static_cast<size_t>(size());
    staging::HostFlags host;
    switch (op.kind) {
      case OpKind::kAllReduce:
      case OpKind::kBroadcast:
        host.data = is_host(op.data, one);
        break;
      case OpKind::kReduceScatter:
        host.input = is_host(op.input, all);
        host.data = is_host(op.data, one);
        break;
      case OpKind::kAllGather:
        host.input = is_host(op.input, one);
        host.data = is_host(op.data, all);
        break;
      case OpKind::kSendRecv:
        host.send = op.send_peer >= 0 && is_host(op.send_data, op.send_bytes);
        host.recv = op.recv_peer >= 0 && is_host(op.recv_data, op.recv_bytes);
        break;
      case OpKind::kBarrier:
        break;
    }
    return staging::plan(op.kind, es, op.count, size(), op.send_bytes, op.recv_bytes, host);
  }

  // Grows the scratch to the plan, points `buf` at its regions and queues the host-to-device
  // copies on the group's stream (behind the submission fence already waited on).
  void stage_in(const Op& op, const staging::Plan& plan, Buffers& buf) {
    if (plan.total > scratch_bytes_) {
      const size_t cap = staging::grown_capacity(scratch_bytes_, plan.total);
      // The stream is idle here: every earlier operation waited for its completion.
      if (scratch_) cudaFree(scratch_);
      scratch_ = nullptr;
      scratch_bytes_ = 0;
      check_cuda(cudaMalloc(&scratch_, cap), op.label + ": cudaMalloc of " + std::to_string(cap) +
                                                 " bytes of device scratch for host buffers");
      scratch_bytes_ = cap;
    }
    auto at = [this](const staging::Region& r) { return static_cast<char*>(scratch_) + r.offset; };
    auto in = [&](const staging::Region& r, const void* host) {
      if (r.bytes > 0 && r.copy_in)
        check_cuda(cudaMemcpyAsync(at(r), host, r.bytes, cudaMemcpyHostToDevice, stream_),
                   op.label + ": copying a host buffer to the device");
    };
    in(plan.data, op.data);
    in(plan.input, op.input);
    in(plan.send, op.send_data);
    if (plan.data.bytes > 0) buf.data = at(plan.data);
    if (plan.input.bytes > 0) buf.input = at(plan.input);
    if (plan.send.bytes > 0) buf.send = at(plan.send);
    if (plan.recv.bytes > 0) buf.recv = at(plan.recv);
  }

  // After the collective completed: copies the staged outputs back to the host buffers and waits
  // for this stream only. Frees a scratch larger than the retention limit. Empty on success.
  std::string stage_out(const Op& op, const staging::Plan& plan) {
    auto out = [&](const staging::Region& r, void* host) {
      if (r.bytes > 0 && r.copy_out)
        check_cuda(cudaMemcpyAsync(host, static_cast<char*>(scratch_) + r.offset, r.bytes,
                                   cudaMemcpyDeviceToHost, stream_),
                   op.label + ": copying the result back to a host buffer");
    };
    out(plan.data, op.data);
    out(plan.recv, op.recv_data);
    check_cuda(cudaEventRecord(done_, stream_), op.label);
    std::string error = wait_done(op);
    if (error.empty() && !staging::retain(scratch_bytes_)) {
      cudaFree(scratch_);
      scratch_ = nullptr;
      scratch_bytes_ = 0;
    }
    return error;
  }

  ncclResult_t launch(const Op& op, const Buffers& b) {
    const ncclDataType_t type = nccl_type(op.dtype);
    switch (op.kind) {
      case OpKind::kAllReduce:
        return ncclAllReduce(b.data, b.data, op.count, type, ncclSum, comm_, stream_);
      case OpKind::kReduceScatter:
        return ncclReduceScatter(b.input, b.data, op.count, type, ncclSum, comm_, stream_);
      case OpKind::kAllGather:
        return ncclAllGather(b.input, b.data, op.count, type, comm_, stream_);
      case OpKind::kBroadcast:
        return ncclBroadcast(b.data, b.data, op.count, type, op.root, comm_, stream_);
      case OpKind::kBarrier:
        // NCCL has no barrier: a one-element all-reduce every rank must join.
        return ncclAllReduce(barrier_buf_, barrier_buf_, 1, ncclInt32, ncclSum, comm_, stream_);
      case OpKind::kSendRecv: {
        ncclResult_t r = ncclGroupStart();
        if (r != ncclSuccess) return r;
        if (op.send_peer >= 0 && op.send_bytes > 0) {
          r = ncclSend(b.send, op.send_bytes, ncclUint8, op.send_peer, comm_, stream_);
        }
        if ((r == ncclSuccess || r == ncclInProgress) && op.recv_peer >= 0 && op.recv_bytes > 0) {
          r = ncclRecv(b.recv, op.recv_bytes, ncclUint8, op.recv_peer, comm_, stream_);
        }
        const ncclResult_t end = ncclGroupEnd();
        return r != ncclSuccess && r != ncclInProgress ? r : end;
      }
    }
    return ncclInvalidArgument;
  }

  // Polls the communicator until it leaves ncclInProgress (non-blocking calls). Empty on success.
  std::string settle(Clock::time_point deadline, const char* phase) {
    for (;;) {
      ncclResult_t state = ncclSuccess;
      {
        std::lock_guard<std::mutex> lock(nccl_mutex_);
        if (aborted_) return "aborted because another operation on this group failed";
        const ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
        if (r != ncclSuccess) return std::string("ncclCommGetAsyncError: ") + ncclGetErrorString(r);
        if (state != ncclSuccess && state != ncclInProgress) {
          return std::string("NCCL error during ") + phase + ": " + ncclGetErrorString(state) + ": " +
                 ncclGetLastError(comm_) + " (a peer of " + members_text() + " failed or exited)";
        }
      }
      if (state == ncclSuccess) return {};
      if (Clock::now() > deadline) {
        return std::string("timed out during ") + phase + " after " + seconds_text(timeout()) +
               ": a peer of " + members_text() + " has not joined (stopped, hung or a different collective)";
      }
      std::this_thread::sleep_for(kPollEvery);
    }
  }

  // Waits for the operation's completion event, watching for asynchronous NCCL errors.
  std::string wait_done(const Op& op) {
    for (;;) {
      const cudaError_t q = cudaEventQuery(done_);
      if (q == cudaSuccess) return {};
      if (q != cudaErrorNotReady) return std::string("CUDA error while waiting: ") + cudaGetErrorString(q);
      {
        std::lock_guard<std::mutex> lock(nccl_mutex_);
        if (aborted_) return "aborted because another operation on this group failed";
        ncclResult_t state = ncclSuccess;
        ncclCommGetAsyncError(comm_, &state);
        if (state != ncclSuccess && state != ncclInProgress) {
          return std::string("NCCL error: ") + ncclGetErrorString(state) + ": " + ncclGetLastError(comm_) +
                 " (a peer of " + members_text() + " failed or exited)";
        }
      }
      if (Clock::now() > op.deadline) {
        return "timed out after " + seconds_text(op.timeout) + ": a peer of " + members_text() +
               " has not joined (stopped, hung, or called a different collective)";
      }
      std::this_thread::sleep_for(kPollEvery);
    }
  }

  std::shared_ptr<NcclShared> shared_;
  std::mutex nccl_mutex_;  // serialises NCCL calls on comm_ with abort
  ncclComm_t comm_ = nullptr;
  bool aborted_ = false;
  cudaStream_t stream_ = nullptr;
  cudaStream_t user_stream_ = nullptr;
  cudaEvent_t done_ = nullptr;
  void* barrier_buf_ = nullptr;
  void* scratch_ = nullptr;  // host-buffer staging (nccl_staging.h); used only inside run()
  size_t scratch_bytes_ = 0;
};

}  // namespace

bool nccl_usable() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

std::unique_ptr<ProcessGroup> make_nccl_world(std::shared_ptr<Rendezvous> rv, Millis timeout) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    throw Error(ExitCode::kConfig, "parallel.backend = nccl but no CUDA device is visible on rank " +
                                       std::to_string(rv->world_rank) +
                                       ": use gloo, or check CUDA_VISIBLE_DEVICES");
  }
  auto shared = std::make_shared<NcclShared>();
  shared->device = rank_cuda_device(std::getenv(kCudaDeviceEnv), rv->local_rank, count);  // as CudaBackend
  shared->rv = std::move(rv);
  std::vector<int> world(static_cast<size_t>(shared->rv->world_size));
  for (int i = 0; i < shared->rv->world_size; ++i) world[static_cast<size_t>(i)] = i;
  const int rank = shared->rv->world_rank;
  return std::make_unique<NcclProcessGroup>(shared, "world", rank, world, timeout, "group/world/1");
}

}  // namespace flotilla::comm
