// The NCCL backend: device buffers, one non-blocking communicator and one CUDA stream per group,
// the unique id carried by the rendezvous store. Compiled only where CUDA and NCCL are present.
//
// Non-obvious decisions:
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

#include "engine/core/error.h"
#include "engine/launch/gpu_pinning.h"
#include "engine/parallel/backends.h"
#include "engine/parallel/tcp_store.h"

namespace flotilla::parallel {
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
    {
      std::lock_guard<std::mutex> lock(nccl_mutex_);
      if (aborted_)
        throw Error(ExitCode::kComm, op.label + ": the NCCL communicator was aborted after a failure");
      const ncclResult_t r = launch(op);
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
  ncclResult_t launch(const Op& op) {
    const ncclDataType_t type = nccl_type(op.dtype);
    switch (op.kind) {
      case OpKind::kAllReduce:
        return ncclAllReduce(op.data, op.data, op.count, type, ncclSum, comm_, stream_);
      case OpKind::kReduceScatter:
        return ncclReduceScatter(op.input, op.data, op.count, type, ncclSum, comm_, stream_);
      case OpKind::kAllGather:
        return ncclAllGather(op.input, op.data, op.count, type, comm_, stream_);
      case OpKind::kBroadcast:
        return ncclBroadcast(op.data, op.data, op.count, type, op.root, comm_, stream_);
      case OpKind::kBarrier:
        // NCCL has no barrier: a one-element all-reduce every rank must join.
        return ncclAllReduce(barrier_buf_, barrier_buf_, 1, ncclInt32, ncclSum, comm_, stream_);
      case OpKind::kSendRecv: {
        ncclResult_t r = ncclGroupStart();
        if (r != ncclSuccess) return r;
        if (op.send_peer >= 0 && op.send_bytes > 0) {
          r = ncclSend(op.send_data, op.send_bytes, ncclUint8, op.send_peer, comm_, stream_);
        }
        if ((r == ncclSuccess || r == ncclInProgress) && op.recv_peer >= 0 && op.recv_bytes > 0) {
          r = ncclRecv(op.recv_data, op.recv_bytes, ncclUint8, op.recv_peer, comm_, stream_);
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

}  // namespace flotilla::parallel
