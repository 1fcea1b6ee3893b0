// Rendezvous: environment parsing, the store, rank check-in, and backend selection.
//
// Non-obvious decision: SIGPIPE is set to ignored here (only if it still has its default action).
// Gloo writes to sockets with writev(), and a peer that died turns the next write into SIGPIPE,
// which would kill this rank silently instead of letting it report "peer rank 1 closed the
// connection". Python ignores SIGPIPE at start-up, which is why PyTorch never has to.
#include "engine/comm/rendezvous.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>

#include "engine/backend/cuda_plugin.h"
#include "engine/comm/backends.h"
#include "engine/comm/tcp_store.h"
#include "engine/core/error.h"

namespace flotilla::comm {
namespace {

using Clock = std::chrono::steady_clock;

int env_int(const char* name, int fallback, int lo, int hi) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  errno = 0;
  const long x = std::strtol(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0' || x < lo || x > hi) {
    throw Error(ExitCode::kUsage, std::string("environment variable ") + name + "='" + v +
                                      "' is not an integer in " + std::to_string(lo) + ".." +
                                      std::to_string(hi));
  }
  return static_cast<int>(x);
}

std::string ranks_text(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) s += ",";
    s += std::to_string(ranks[i]);
  }
  return s;
}

std::string seconds_text(Millis ms) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g s", static_cast<double>(ms.count()) / 1000.0);
  return buf;
}

Millis remaining(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now());
  return left.count() > 0 ? left : Millis(0);
}

void ignore_sigpipe() {
  struct sigaction old {};
  if (sigaction(SIGPIPE, nullptr, &old) == 0 && old.sa_handler == SIG_DFL) {
    struct sigaction sa {};
    sa.sa_handler = SIG_IGN;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGPIPE, &sa, nullptr);
  }
}

// NCCL through the CUDA plugin: loaded, built with NCCL, and a device visible.
bool nccl_runs_here() {
  const cuda_plugin::CudaApi* cuda = cuda_plugin::api();
  return cuda != nullptr && cuda->nccl_usable != nullptr && cuda->nccl_usable();
}

std::string resolve_backend(const std::string& backend) {
  if (backend == "auto") return backend_available("nccl") && nccl_runs_here() ? "nccl" : "gloo";
  if (backend != "gloo" && backend != "nccl") {
    throw Error(ExitCode::kConfig, "parallel.backend = '" + backend + "': use auto, gloo or nccl");
  }
  std::string plugin_problem;
  if (backend == "nccl" && cuda_plugin::built() && cuda_plugin::api(&plugin_problem) == nullptr)
    throw Error(ExitCode::kConfig, "parallel.backend = nccl: " + plugin_problem);
  if (!backend_available(backend)) {
    throw Error(ExitCode::kConfig, "parallel.backend = '" + backend + "': this build has no " + backend +
                                       (backend == "gloo" ? " (install libgloo-dev and rebuild)"
                                                          : " (build with CUDA and NCCL, or use gloo)"));
  }
  if (backend == "nccl" && !nccl_runs_here()) {
    // Checked before the rendezvous, so that every rank reports the cause itself.
    throw Error(
        ExitCode::kConfig,
        "parallel.backend = nccl but no CUDA device is visible: use gloo, or check CUDA_VISIBLE_DEVICES");
  }
  return backend;
}

// Every rank checks in and waits for all others; throws naming the ranks that did not arrive.
void check_in(Rendezvous& rv, Clock::time_point deadline, Millis timeout) {
  TcpStore& store = *rv.store;
  const std::string where = rv.master_addr + ":" + std::to_string(rv.master_port);
  if (rv.world_rank == 0) store.set("world_size", std::to_string(rv.world_size));
  const std::string hosted = store.get_string("world_size", remaining(deadline));
  if (hosted != std::to_string(rv.world_size)) {
    throw Error(ExitCode::kComm, "rendezvous at " + where + ": rank " + std::to_string(rv.world_rank) +
                                     " was started with WORLD_SIZE=" + std::to_string(rv.world_size) +
                                     " but rank 0 hosts a run of " + hosted +
                                     " ranks: start every rank with the same WORLD_SIZE");
  }
  const std::string me = "arrived/" + std::to_string(rv.world_rank);
  if (store.add(me + "/count", 1) > 1) {
    throw Error(ExitCode::kComm, "rendezvous at " + where + ": rank " + std::to_string(rv.world_rank) +
                                     " checked in twice: two processes were started with RANK=" +
                                     std::to_string(rv.world_rank));
  }
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  store.set(me, std::string(host) + " pid " + std::to_string(getpid()));

  std::vector<std::string> keys;
  for (int r = 0; r < rv.world_size; ++r) keys.push_back("arrived/" + std::to_string(r));
  // Wait in short slices so that a rank whose store host (rank 0) gives up first still knows who
  // was missing at that moment and reports the same cause instead of "connection closed".
  std::vector<std::string> missing;
  bool known = false;  // `missing` holds the answer of a slice that timed out
  for (;;) {
    const Millis left = remaining(deadline);
    const Millis slice = rv.world_rank == 0 ? left : std::min(left, Millis(200));
    try {
      missing = store.wait_missing(keys, slice);
      known = true;
    } catch (const Error&) {
      if (!known) throw;
      break;  // rank 0 closed the store: report what was missing when it did
    }
    if (missing.empty() || slice >= left) break;
  }
  if (!missing.empty()) {
    std::vector<int> ranks;
    for (const auto& k : missing) ranks.push_back(std::atoi(k.c_str() + 8));
    throw Error(
        ExitCode::kComm,
        "rendezvous: waiting for rank" + std::string(ranks.size() > 1 ? "s " : " ") + ranks_text(ranks) +
            " of " + std::to_string(rv.world_size) + " at " + where + " for " + seconds_text(timeout) +
            (ranks.size() > 1 ? ": they did not start, or cannot reach this address (see their output)"
                              : ": it did not start, or cannot reach this address (see its output)"));
  }
}

}  // namespace

Rendezvous::~Rendezvous() = default;

DistEnv dist_env_from_environment() {
  DistEnv env;
  env.distributed = std::getenv("WORLD_SIZE") != nullptr;
  env.world_size = env_int("WORLD_SIZE", 1, 1, 1 << 20);
  env.rank = env_int("RANK", 0, 0, env.world_size - 1);
  env.local_world_size = env_int("LOCAL_WORLD_SIZE", env.distributed ? env.world_size : 1, 1, 1 << 20);
  env.local_rank = env_int("LOCAL_RANK", env.rank % env.local_world_size, 0, env.local_world_size - 1);
  if (const char* a = std::getenv("MASTER_ADDR"); a != nullptr && *a != '\0') env.master_addr = a;
  env.master_port = env_int("MASTER_PORT", 29500, 1, 65535);
  return env;
}

bool backend_available(const std::string& backend) {
#if defined(FLOTILLA_HAVE_GLOO)
  if (backend == "gloo") return true;
#endif
  if (backend == "nccl") {
    const cuda_plugin::CudaApi* cuda = cuda_plugin::api();
    return cuda != nullptr && cuda->make_nccl_world != nullptr;
  }
  return false;
}

std::unique_ptr<ProcessGroup> init_process_group(const std::string& backend, int rank, int world_size,
                                                 const std::string& master_addr, int master_port,
                                                 Millis timeout, int local_rank) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    throw Error(ExitCode::kUsage, "init_process_group: rank " + std::to_string(rank) + " of world size " +
                                      std::to_string(world_size) + " is out of range");
  }
  const std::string chosen = resolve_backend(backend);
  if (world_size == 1 && chosen == "gloo") return make_solo_group("world", 0, timeout);
  ignore_sigpipe();

  const auto deadline = Clock::now() + timeout;
  auto rv = std::make_shared<Rendezvous>();
  rv->master_addr = master_addr;
  rv->master_port = master_port;
  rv->world_rank = rank;
  rv->world_size = world_size;
  rv->local_rank = local_rank;
  if (rank == 0) rv->server = std::make_unique<TcpStoreServer>(master_addr, master_port);
  try {
    rv->store = std::make_unique<TcpStore>(master_addr, master_port, timeout);
  } catch (const Error& e) {
    if (rank == 0) throw;
    std::string why = e.what();
    if (why.rfind("rendezvous: ", 0) == 0) why = why.substr(12);
    throw Error(ExitCode::kComm, "rendezvous: waiting for rank 0 of " + std::to_string(world_size) + " at " +
                                     master_addr + ":" + std::to_string(master_port) + " for " +
                                     seconds_text(timeout) + ": " + why);
  }
  check_in(*rv, deadline, timeout);

  if (chosen == "nccl")
    return cuda_plugin::api()->make_nccl_world(rv, timeout);  // resolve_backend checked it
#if defined(FLOTILLA_HAVE_GLOO)
  if (chosen == "gloo") return make_gloo_world(rv, timeout);
#endif
  throw Error(ExitCode::kConfig, "parallel.backend '" + chosen + "' is not built in");
}

std::unique_ptr<ProcessGroup> init_process_group(const std::string& backend, const DistEnv& env,
                                                 Millis timeout) {
  return init_process_group(backend, env.rank, env.world_size, env.master_addr, env.master_port, timeout,
                            env.local_rank);
}

}  // namespace flotilla::comm
