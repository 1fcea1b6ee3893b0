// cudasim: runs a kernel launch on the calling host thread, one fiber per CUDA thread of a block.
//
// Non-obvious decisions:
// - Fibers (ucontext) run until they reach a barrier or end; a warp is released when every live
//   lane waits at its warp barrier, the block when every live thread waits at __syncthreads.
//   Anything else is a real bug on a GPU too (divergent barrier, shuffle with exited lanes) and
//   fails the launch with the kernel, block and reason named, instead of hanging.
// - The switch is a dozen instructions of our own on x86-64 (callee-saved registers and the stack
//   pointer); ucontext elsewhere. glibc's swapcontext makes a system call per switch, and a
//   training step switches millions of times.
// - Blocks run one after another; CUDASIM_ORDER=reverse reverses both the block order and the
//   thread order between barriers, so a kernel whose result depends on either (a missing
//   barrier, two blocks writing one element) gives different bits under the two orders.
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#if defined(__x86_64__)
#define CUDASIM_FAST_SWITCH 1
// cudasim_switch(&save_sp, next_sp): pushes the callee-saved registers, stores the stack pointer,
// loads the other fiber's and pops its registers; `ret` continues where that fiber switched out.
extern "C" void cudasim_switch(void** save_sp, void* next_sp);
asm(R"(
.text
.globl cudasim_switch
.type cudasim_switch,@function
cudasim_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
.size cudasim_switch,.-cudasim_switch
)");
#endif

namespace cudasim {

thread_local ThreadState* g_thread = nullptr;
thread_local uint3 g_block_idx{0, 0, 0};
thread_local dim3 g_block_dim;
thread_local dim3 g_grid_dim;

void check_red_zones(const char* after);  // runtime.cpp

namespace {

constexpr size_t kStackBytes = 128u << 10;

enum class State { kNotStarted, kReady, kBlockWait, kWarpWait, kDone };

struct Thread {
  ThreadState ts;
  State st = State::kNotStarted;
};

// A fiber runs CUDA threads one after another until one of them stops at a barrier; that thread
// keeps the fiber until it ends, and the threads not yet started go to a new fiber. A kernel
// without barriers thus runs a whole block on one fiber, without a switch per thread.
struct Fiber {
#ifdef CUDASIM_FAST_SWITCH
  void* sp = nullptr;
#else
  ucontext_t ctx;
#endif
  int thread = -1;  // the CUDA thread it runs now, -1 when it has no more
};

struct BlockRun {
  std::vector<Thread> threads;
  std::vector<Fiber> fibers;  // reserved to the thread count: never reallocated while running
#ifdef CUDASIM_FAST_SWITCH
  void* sched_sp = nullptr;
#else
  ucontext_t sched;
#endif
  KernelBody body = nullptr;
  void* closure = nullptr;
  Fiber* cur = nullptr;
  int started = 0;  // threads handed to a fiber so far
  int done = 0, block_wait = 0;
  int warp_done[32], warp_wait[32];
  bool reverse = false;
  std::string error;
  uint64_t slots[32][2][32];
};

thread_local BlockRun* g_run = nullptr;

bool reverse_order() {
  static const bool rev = [] {
    const char* e = std::getenv("CUDASIM_ORDER");
    return e != nullptr && std::string(e) == "reverse";
  }();
  return rev;
}

// Stacks for up to 1024 fibers per host thread, each with a guard page below it.
char* stack_of(size_t i) {
  thread_local std::vector<char*> stacks;
  while (stacks.size() <= i) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    void* m = mmap(nullptr, kStackBytes + page, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) return nullptr;
    mprotect(m, page, PROT_NONE);
    stacks.push_back(static_cast<char*>(m) + page);
  }
  return stacks[i];
}

// Fiber f gives the host thread back to the scheduler; returns when the scheduler resumes it.
void to_scheduler(BlockRun* run, Fiber* f) {
#ifdef CUDASIM_FAST_SWITCH
  cudasim_switch(&f->sp, run->sched_sp);
#else
  swapcontext(&f->ctx, &run->sched);
#endif
}

void to_fiber(BlockRun* run, Fiber* f) {
#ifdef CUDASIM_FAST_SWITCH
  cudasim_switch(&run->sched_sp, f->sp);
#else
  swapcontext(&run->sched, &f->ctx);
#endif
}

// The next thread to start (forward or reverse order), marked ready; -1 when all have started.
int take_thread(BlockRun* run) {
  const int n = static_cast<int>(run->threads.size());
  if (run->started >= n) return -1;
  const int t = run->reverse ? n - 1 - run->started : run->started;
  ++run->started;
  run->threads[static_cast<size_t>(t)].st = State::kReady;
  return t;
}

[[noreturn]] void fiber_main() {
  BlockRun* run = g_run;
  Fiber* f = run->cur;
  for (;;) {
    Thread& t = run->threads[static_cast<size_t>(f->thread)];
    g_thread = &t.ts;
    run->body(run->closure);
    t.st = State::kDone;
    ++run->done;
    ++run->warp_done[t.ts.warp];
    f->thread = take_thread(run);
    if (f->thread < 0) break;
  }
  to_scheduler(run, f);
  std::abort();  // a fiber without threads is never resumed
}

// Prepares f to start fiber_main on `stack` at its next to_fiber().
bool start_fiber(BlockRun* run, Fiber* f, char* stack) {
  if (stack == nullptr) return false;
#ifdef CUDASIM_FAST_SWITCH
  (void)run;
  auto top = reinterpret_cast<uintptr_t>(stack + kStackBytes) & ~static_cast<uintptr_t>(15);
  auto* words = reinterpret_cast<void**>(top - 64);  // 6 registers, the entry, a fake return address
  for (int i = 0; i < 6; ++i) words[i] = nullptr;
  words[6] = reinterpret_cast<void*>(&fiber_main);
  words[7] = nullptr;
  f->sp = words;
  return true;
#else
  if (getcontext(&f->ctx) != 0) return false;
  f->ctx.uc_stack.ss_sp = stack;
  f->ctx.uc_stack.ss_size = kStackBytes;
  f->ctx.uc_link = &run->sched;
  makecontext(&f->ctx, reinterpret_cast<void (*)()>(&fiber_main), 0);
  return true;
#endif
}

void yield(State st) {
  BlockRun* run = g_run;
  Fiber* f = run->cur;
  Thread& t = run->threads[static_cast<size_t>(f->thread)];
  t.st = st;
  if (st == State::kWarpWait)
    ++run->warp_wait[t.ts.warp];
  else
    ++run->block_wait;
  to_scheduler(run, f);
}

std::string where(const ThreadState& ts) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "block (%u,%u,%u) thread (%u,%u,%u)", g_block_idx.x, g_block_idx.y,
                g_block_idx.z, ts.tid.x, ts.tid.y, ts.tid.z);
  return buf;
}

// Runs every thread of the current block to completion; false (run.error set) on a fault.
bool run_block(BlockRun& run) {
  const int n = static_cast<int>(run.threads.size());
  const int warps = (n + 31) / 32;
  run.fibers.clear();
  run.started = run.done = run.block_wait = 0;
  for (int w = 0; w < 32; ++w) run.warp_done[w] = run.warp_wait[w] = 0;
  for (;;) {
    // Resume the fibers whose thread may go on, in thread order (or reverse).
    for (size_t k = 0; k < run.fibers.size(); ++k) {
      Fiber& f = run.fibers[run.reverse ? run.fibers.size() - 1 - k : k];
      if (f.thread < 0 || run.threads[static_cast<size_t>(f.thread)].st != State::kReady) continue;
      run.cur = &f;
      g_thread = &run.threads[static_cast<size_t>(f.thread)].ts;
      to_fiber(&run, &f);
      if (!run.error.empty()) return false;
    }
    // Threads not started yet get new fibers until every thread has started.
    while (run.started < n) {
      run.fibers.emplace_back();
      Fiber& f = run.fibers.back();
      f.thread = take_thread(&run);
      if (!start_fiber(&run, &f, stack_of(run.fibers.size() - 1))) {
        run.error = "no memory for the simulator's thread stacks";
        return false;
      }
      run.cur = &f;
      to_fiber(&run, &f);
      if (!run.error.empty()) return false;
    }
    bool released = false;
    for (int w = 0; w < warps; ++w) {
      if (run.warp_wait[w] == 0) continue;
      const int lo = w * 32, size = (lo + 32 < n ? lo + 32 : n) - lo, w_live = size - run.warp_done[w];
      if (run.warp_wait[w] < w_live) continue;  // some lanes still wait at __syncthreads
      if (w_live < size) {
        run.error = "warp " + std::to_string(w) +
                    " shuffles or syncs with a full mask after some of its lanes exited (" +
                    std::to_string(w_live) + " of " + std::to_string(size) + " lanes) at " +
                    where(run.threads[static_cast<size_t>(lo)].ts);
        return false;
      }
      for (int i = lo; i < lo + size; ++i) run.threads[static_cast<size_t>(i)].st = State::kReady;
      run.warp_wait[w] = 0;
      released = true;
    }
    if (released) continue;
    const int live = n - run.done, at_block = run.block_wait;
    if (live == 0) return true;
    if (at_block == live) {
      for (auto& t : run.threads)
        if (t.st == State::kBlockWait) t.st = State::kReady;
      run.block_wait = 0;
      continue;
    }
    run.error = "divergent barriers: " + std::to_string(at_block) + " of " + std::to_string(live) +
                " live threads wait at __syncthreads while the others wait at a warp barrier";
    return false;
  }
}

}  // namespace

void sync_block() { yield(State::kBlockWait); }
void sync_warp() { yield(State::kWarpWait); }
uint64_t* warp_slots(int phase) { return g_run->slots[g_thread->warp][phase]; }

void fail_kernel(const char* why) {
  BlockRun* run = g_run;
  Fiber* f = run->cur;
  run->error = std::string(why) + " at " + where(run->threads[static_cast<size_t>(f->thread)].ts);
  run->threads[static_cast<size_t>(f->thread)].st = State::kDone;
  ++run->done;
  ++run->warp_done[run->threads[static_cast<size_t>(f->thread)].ts.warp];
  f->thread = -1;
  to_scheduler(run, f);
}

cudaError_t run_kernel(const char* name, dim3 grid, dim3 block, KernelBody body, void* closure) {
  const size_t threads = static_cast<size_t>(block.x) * block.y * block.z;
  const char* bad = nullptr;
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || threads == 0)
    bad = "a grid or block dimension is 0";
  else if (threads > 1024)
    bad = "more than 1024 threads per block";
  else if (block.z > 64)
    bad = "block.z > 64";
  else if (grid.y > 65535 || grid.z > 65535)
    bad = "grid.y or grid.z > 65535";
  else if (grid.x > 2147483647u)
    bad = "grid.x > 2^31-1";
  if (bad != nullptr) {
    set_launch_error(cudaErrorInvalidConfiguration, name, bad);
    return cudaErrorInvalidConfiguration;
  }
  BlockRun run;
  run.threads.resize(threads);
  run.fibers.reserve(threads);
  run.body = body;
  run.closure = closure;
  run.reverse = reverse_order();
  for (size_t t = 0; t < threads; ++t) {
    ThreadState& ts = run.threads[t].ts;
    ts.tid = uint3{static_cast<unsigned>(t % block.x), static_cast<unsigned>((t / block.x) % block.y),
                   static_cast<unsigned>(t / (static_cast<size_t>(block.x) * block.y))};
    ts.lane = static_cast<int>(t % 32);
    ts.warp = static_cast<int>(t / 32);
    ts.shuffle_phase = 0;
  }
  BlockRun* saved_run = g_run;
  ThreadState* saved_thread = g_thread;
  g_run = &run;
  g_grid_dim = grid;
  g_block_dim = block;
  const size_t blocks = static_cast<size_t>(grid.x) * grid.y * grid.z;
  cudaError_t result = cudaSuccess;
  for (size_t bi = 0; bi < blocks; ++bi) {
    const size_t b = run.reverse ? blocks - 1 - bi : bi;
    g_block_idx = uint3{static_cast<unsigned>(b % grid.x), static_cast<unsigned>((b / grid.x) % grid.y),
                        static_cast<unsigned>(b / (static_cast<size_t>(grid.x) * grid.y))};
    for (auto& t : run.threads) {
      t.st = State::kNotStarted;
      t.ts.shuffle_phase = 0;
    }
    if (!run_block(run)) {
      set_launch_error(cudaErrorLaunchFailure, name, run.error.c_str());
      result = cudaErrorLaunchFailure;
      break;
    }
  }
  g_run = saved_run;
  g_thread = saved_thread;
  if (result == cudaSuccess) check_red_zones(name);
  return result;
}

}  // namespace cudasim
