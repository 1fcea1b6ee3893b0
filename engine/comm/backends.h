// Factories of the concrete backends (internal to engine/comm: only rendezvous.cpp calls them).
// Declared without backend headers so that this builds where Gloo or NCCL is absent; each factory
// is defined in its backend's file, which compiles only where that library is present
// (FLOTILLA_HAVE_GLOO, FLOTILLA_HAVE_NCCL).
#pragma once

#include <memory>
#include <string>

#include "engine/comm/process_group.h"

namespace flotilla::comm {

class TcpStore;
class TcpStoreServer;

// What every group of a run shares: the store client, and on rank 0 the store server.
struct Rendezvous {
  std::unique_ptr<TcpStoreServer> server;  // rank 0 only; outlives every group through shared_ptr
  std::unique_ptr<TcpStore> store;
  std::string master_addr;
  int master_port = 0;
  int world_rank = 0;
  int world_size = 1;
  int local_rank = 0;
  ~Rendezvous();
};

std::unique_ptr<ProcessGroup> make_gloo_world(std::shared_ptr<Rendezvous> rv, Millis timeout);
std::unique_ptr<ProcessGroup> make_nccl_world(std::shared_ptr<Rendezvous> rv, Millis timeout);
// True when the NCCL backend can run here (a CUDA device is visible).
bool nccl_usable();

}  // namespace flotilla::comm
