// Rendezvous: how the ranks of a run find each other, and the entry point that returns the world
// ProcessGroup.
//
// Non-obvious decision: before any backend connects, every rank checks in at the store
// ("arrived/<rank>") and waits for all the others, so a rank that never starts is reported by
// number ("waiting for ranks 2,3 of 4 at 127.0.0.1:29500 for 60 s") instead of surfacing later as
// an anonymous connect timeout inside Gloo or NCCL.
#pragma once

#include <memory>
#include <string>

#include "engine/comm/process_group.h"

namespace flotilla::comm {

// The torchrun-style environment set by `flotilla-worker launch` (or by hand).
struct DistEnv {
  int rank = 0;                           // RANK
  int world_size = 1;                     // WORLD_SIZE
  int local_rank = 0;                     // LOCAL_RANK
  int local_world_size = 1;               // LOCAL_WORLD_SIZE
  std::string master_addr = "127.0.0.1";  // MASTER_ADDR
  int master_port = 29500;                // MASTER_PORT
  bool distributed = false;               // WORLD_SIZE was set (even to 1)
};

// Reads RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT. World 1 when
// WORLD_SIZE is unset. Throws Error(kUsage) naming the variable when a value is malformed or out of
// range (RANK >= WORLD_SIZE, a port outside 1..65535).
DistEnv dist_env_from_environment();

// Creates the world group ("world"): rank 0 hosts the store at master_addr:master_port, every
// rank checks in and waits for all others within `timeout`, then the backend connects.
// backend: "gloo" (CPU buffers), "nccl" (device buffers; cuda device = local_rank % devices) or
// "auto" (nccl where built and a GPU is visible, else gloo). world_size 1 gives a one-rank group
// without any store. Throws Error(kComm) on rendezvous failure, Error(kConfig) for a backend that is
// not built in.
std::unique_ptr<ProcessGroup> init_process_group(const std::string& backend, int rank, int world_size,
                                                 const std::string& master_addr, int master_port,
                                                 Millis timeout, int local_rank = 0);
std::unique_ptr<ProcessGroup> init_process_group(const std::string& backend, const DistEnv& env,
                                                 Millis timeout);

// Which backends this build has: "gloo", "nccl" (compiled in; NCCL also needs a GPU at run time).
bool backend_available(const std::string& backend);

}  // namespace flotilla::comm
