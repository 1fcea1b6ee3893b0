// cudasim: streams and events with deferred execution, so a missing event wait shows.
//
// Non-obvious decisions:
// - Device work queued on a stream (kernels, cuBLASLt matmuls, device-to-device copies, memsets)
//   does not run when it is queued. It runs when something needs it: a synchronisation of that
//   stream, of an event recorded on it, or of the device; a copy that touches host memory on that
//   stream; a stream that waits on an event recorded on it, when that wait itself runs; an NCCL
//   call on it. So work on one stream reaches another only through cudaStreamWaitEvent, as on a
//   GPU, and a consumer that forgot the wait reads what the producer has not written yet (the
//   adversarial schedule, every time, instead of a race that a fast GPU rarely loses).
// - A wait runs its producer only up to the event it waits for (the record generation at the
//   time of the wait), not past it.
// - The legacy default stream (a null stream) runs its work at once, after the queued work of
//   every blocking stream; streams created with cudaStreamNonBlocking (the engine's, NCCL's) do not
//   synchronise with it, as on a GPU, so an event recorded on the null stream does not fence them.
//   cudaDeviceSynchronize and cudaFree run everything.
// - One recursive mutex serialises execution (the simulated device runs one piece of work at a
//   time), whichever host thread drives it; queues have their own locks.
// - CUDASIM_STREAMS=eager runs everything when it is queued (the old behaviour), for comparison.
// - Errors found while deferred work runs are sticky, process-wide, and returned by the next
//   synchronisation (and cudaGetLastError), as a GPU reports asynchronous errors.
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include <cuda_runtime.h>

namespace cudasim {
cudaError_t take_sticky_error();  // runtime.cpp: the pending error, cleared
cudaError_t record_error(cudaError_t e, const std::string& why);

namespace {

struct StreamState {
  unsigned flags = 0;
  std::mutex mu;
  std::deque<std::function<void()>> queue;
};

struct EventState {
  std::atomic<uint64_t> recorded{0};    // records issued
  std::atomic<uint64_t> done{0};        // records whose marker has run
  std::shared_ptr<StreamState> stream;  // where the latest record was queued (null: the null stream)
  std::chrono::steady_clock::time_point at;
  std::mutex mu;  // guards stream and at
};

struct Registry {
  std::mutex mu;
  std::set<std::shared_ptr<StreamState>> streams;
};
Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: streams may be released from static destructors
  return *r;
}
std::recursive_mutex& exec_mutex() {
  static std::recursive_mutex* m = new std::recursive_mutex;
  return *m;
}

bool eager() {
  static const bool e = [] {
    const char* v = std::getenv("CUDASIM_STREAMS");
    return v != nullptr && std::strcmp(v, "eager") == 0;
  }();
  return e;
}

// Runs s's queued work in order until `until` says stop (checked before each item) or the queue
// is empty.
void drain(const std::shared_ptr<StreamState>& s, const std::function<bool()>& until) {
  std::lock_guard<std::recursive_mutex> exec(exec_mutex());
  for (;;) {
    if (until && until()) return;
    std::function<void()> work;
    {
      std::lock_guard<std::mutex> lock(s->mu);
      if (s->queue.empty()) return;
      work = std::move(s->queue.front());
      s->queue.pop_front();
    }
    work();
  }
}

// Every stream's queued work (the device), or only that of blocking streams (what the legacy
// null stream waits for: streams created with cudaStreamNonBlocking do not synchronise with it).
void drain_all(bool blocking_only = false) {
  std::lock_guard<std::recursive_mutex> exec(exec_mutex());
  std::set<std::shared_ptr<StreamState>> all;
  {
    std::lock_guard<std::mutex> lock(registry().mu);
    all = registry().streams;
  }
  // Work on one stream may wait for another; draining each in turn runs everything either way.
  for (const auto& s : all)
    if (!blocking_only || (s->flags & cudaStreamNonBlocking) == 0) drain(s, nullptr);
}

// Runs the producer of event record `gen` up to that record's marker.
void run_until(const std::shared_ptr<EventState>& e, uint64_t gen) {
  std::shared_ptr<StreamState> s;
  {
    std::lock_guard<std::mutex> lock(e->mu);
    s = e->stream;
  }
  if (s) drain(s, [&] { return e->done.load() >= gen; });
}

}  // namespace
}  // namespace cudasim

struct CUstream_st {
  std::shared_ptr<cudasim::StreamState> state;
};
struct CUevent_st {
  std::shared_ptr<cudasim::EventState> state;
};

namespace cudasim {

void enqueue(cudaStream_t stream, std::function<void()> work) {
  if (stream == nullptr || eager()) {
    if (stream == nullptr && !eager()) drain_all(true);
    std::lock_guard<std::recursive_mutex> exec(exec_mutex());
    work();
    return;
  }
  std::lock_guard<std::mutex> lock(stream->state->mu);
  stream->state->queue.push_back(std::move(work));
}

void flush_stream(cudaStream_t stream) {
  if (stream == nullptr)
    drain_all(true);
  else
    drain(stream->state, nullptr);
}

void flush_all() { drain_all(); }

}  // namespace cudasim

using namespace cudasim;

cudaError_t cudaStreamCreate(cudaStream_t* s) { return cudaStreamCreateWithFlags(s, 0); }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags) {
  auto state = std::make_shared<StreamState>();
  state->flags = flags;
  {
    std::lock_guard<std::mutex> lock(registry().mu);
    registry().streams.insert(state);
  }
  *s = new CUstream_st{state};
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  if (s == nullptr) return record_error(cudaErrorInvalidResourceHandle, "cudaStreamDestroy(null)");
  drain(s->state, nullptr);  // queued work still completes, as on a GPU
  {
    std::lock_guard<std::mutex> lock(registry().mu);
    registry().streams.erase(s->state);
  }
  delete s;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  flush_stream(s);
  return take_sticky_error();
}
cudaError_t cudaDeviceSynchronize() {
  drain_all();
  return take_sticky_error();
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned) {
  if (e == nullptr) return record_error(cudaErrorInvalidResourceHandle, "cudaStreamWaitEvent(null)");
  const uint64_t gen = e->state->recorded.load();
  if (gen == 0) return cudaSuccess;  // never recorded: nothing to wait for
  std::shared_ptr<EventState> ev = e->state;
  enqueue(s, [ev, gen] { run_until(ev, gen); });
  return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, 0); }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) {
  *e = new CUevent_st{std::make_shared<EventState>()};
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete e;  // a pending record still completes: its marker holds the state
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  if (e == nullptr) return record_error(cudaErrorInvalidResourceHandle, "cudaEventRecord(null)");
  std::shared_ptr<EventState> ev = e->state;
  const uint64_t gen = ev->recorded.fetch_add(1) + 1;
  {
    std::lock_guard<std::mutex> lock(ev->mu);
    ev->stream = s != nullptr && !eager() ? s->state : nullptr;
  }
  enqueue(s, [ev, gen] {
    {
      std::lock_guard<std::mutex> lock(ev->mu);
      ev->at = std::chrono::steady_clock::now();
    }
    uint64_t d = ev->done.load();
    while (d < gen && !ev->done.compare_exchange_weak(d, gen)) {
    }
  });
  return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t e) {
  if (e == nullptr) return record_error(cudaErrorInvalidResourceHandle, "cudaEventQuery(null)");
  // The simulated device makes progress when asked: run the producer up to the latest record.
  run_until(e->state, e->state->recorded.load());
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  const cudaError_t q = cudaEventQuery(e);
  if (q != cudaSuccess) return q;
  return take_sticky_error();
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (start != nullptr) run_until(start->state, start->state->recorded.load());
  if (end != nullptr) run_until(end->state, end->state->recorded.load());
  if (start == nullptr || end == nullptr || start->state->done.load() == 0 || end->state->done.load() == 0)
    return record_error(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime of an unrecorded event");
  std::chrono::steady_clock::time_point a, b;
  {
    std::lock_guard<std::mutex> lock(start->state->mu);
    a = start->state->at;
  }
  {
    std::lock_guard<std::mutex> lock(end->state->mu);
    b = end->state->at;
  }
  *ms = std::chrono::duration<float, std::milli>(b - a).count();
  return cudaSuccess;
}
