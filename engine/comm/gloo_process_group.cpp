// The Gloo backend: one gloo::rendezvous::Context per group over one shared TCP device, connected
// through our TCP store, running the algorithms of gloo_ring.cpp.
//
// Non-obvious decisions:
// - The device binds the local address that routes to MASTER_ADDR (a UDP connect trick), so the
//   same command works on loopback and across hosts; FLOTILLA_GLOO_HOSTNAME or FLOTILLA_GLOO_IFACE
//   override it (like GLOO_SOCKET_IFNAME) on machines with several networks.
// - Aborting a group closes its connections (Context::closeConnections, so peers fail at once) and
//   wakes this process's own waits through gloo_ring::PeerWatch (close() alone would leave a p2p
//   wait on the caller's thread to sit out its whole timeout); PeerWatch also notices a peer that
//   dies in the middle of a message, which Gloo does not report to that message's wait.
// - Transfers are posted from the caller's thread (their slots cannot collide with queued
//   collectives), so a pipeline stage can post a send and a receive and wait for both.
#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <atomic>
#include <cstdlib>

#include "engine/comm/backends.h"
#include "engine/comm/gloo_peer_watch.h"
#include "engine/comm/gloo_ring.h"
#include "engine/comm/socket_io.h"
#include "engine/comm/tcp_store.h"
#include "engine/core/error.h"

namespace flotilla::comm {
namespace {

// Gloo's rendezvous store interface on top of our TcpStore.
class GlooStoreAdapter final : public gloo::rendezvous::Store {
 public:
  explicit GlooStoreAdapter(TcpStore& store) : store_(store) {}
  void set(const std::string& key, const std::vector<char>& data) override { store_.set(key, data); }
  std::vector<char> get(const std::string& key) override { return store_.get(key); }
  void wait(const std::vector<std::string>& keys) override { store_.wait(keys, store_.timeout()); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    store_.wait(keys, timeout);
  }

 private:
  TcpStore& store_;
};

// What every Gloo group of this process shares.
struct GlooShared {
  std::shared_ptr<Rendezvous> rv;
  std::shared_ptr<gloo::transport::Device> device;
};

std::shared_ptr<gloo::transport::Device> make_device(const std::string& master_addr) {
  gloo::transport::tcp::attr attr;
  if (const char* iface = std::getenv("FLOTILLA_GLOO_IFACE"); iface != nullptr && *iface != '\0') {
    attr.iface = iface;
  } else if (const char* host = std::getenv("FLOTILLA_GLOO_HOSTNAME"); host != nullptr && *host != '\0') {
    attr.hostname = host;
  } else {
    attr.hostname = local_address_toward(master_addr);
    if (attr.hostname.empty()) attr.hostname = "127.0.0.1";
  }
  try {
    return gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    throw Error(ExitCode::kComm, "gloo: cannot open a TCP device on '" +
                                     (attr.iface.empty() ? attr.hostname : attr.iface) + "': " + e.what() +
                                     " (set FLOTILLA_GLOO_HOSTNAME or FLOTILLA_GLOO_IFACE)");
  }
}

class GlooProcessGroup final : public ProcessGroup {
 public:
  GlooProcessGroup(std::shared_ptr<GlooShared> shared, const std::string& name, int rank,
                   std::vector<int> world_ranks, Millis timeout, const std::string& prefix)
      : ProcessGroup(name, rank, world_ranks, timeout), shared_(std::move(shared)) {
    auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, static_cast<int>(world_ranks.size()));
    ctx->setTimeout(timeout);
    GlooStoreAdapter adapter(*shared_->rv->store);
    gloo::rendezvous::PrefixStore prefixed(prefix, adapter);
    try {
      ctx->connectFullMesh(prefixed, shared_->device);
    } catch (const Error& e) {
      throw Error(ExitCode::kComm, "creating group " + name + " (" + members_text() + "): " + e.what());
    } catch (const std::exception& e) {
      throw Error(ExitCode::kComm, "creating group " + name + " (" + members_text() +
                                       "): gloo could not connect: " + e.what());
    }
    ctx_ = std::move(ctx);
    watch_ = std::make_unique<gloo_ring::PeerWatch>(*ctx_, *this);
  }

  ~GlooProcessGroup() override {
    shutdown();
    watch_.reset();
  }

  const char* backend() const override { return "gloo"; }

 protected:
  void run(Op& op) override { gloo_ring::run_collective(*ctx_, *this, op, scratch_, *watch_); }

  bool transfers_on_caller_thread() const override { return true; }

  class GlooTransfer final : public PendingTransfer {
   public:
    explicit GlooTransfer(GlooProcessGroup& group) : group_(group) {}
    void wait(Op& op) override {
      if (send) gloo_ring::wait_send(*send, op.send_peer, group_, op, *group_.watch_);
      if (recv) gloo_ring::wait_recv(*recv, op.recv_peer, group_, op, *group_.watch_);
    }
    std::unique_ptr<gloo::transport::UnboundBuffer> send, recv;

   private:
    GlooProcessGroup& group_;
  };

  std::unique_ptr<PendingTransfer> start_transfer(Op& op) override {
    auto t = std::make_unique<GlooTransfer>(*this);
    const int me = world_rank_of(rank());
    if (watch_->aborted()) throw Error(ExitCode::kComm, op.label + ": " + watch_->cause());
    try {
      // Post the receive first: a send completes only once the peer has posted its receive.
      if (op.recv_peer >= 0 && op.recv_bytes > 0) {
        t->recv = ctx_->createUnboundBuffer(op.recv_data, op.recv_bytes);
        t->recv->recv(op.recv_peer,
                      gloo_ring::transfer_slot(world_rank_of(op.recv_peer), me, op.recv_seq, op.recv_bytes),
                      0, op.recv_bytes);
      }
      if (op.send_peer >= 0 && op.send_bytes > 0) {
        t->send = ctx_->createUnboundBuffer(const_cast<void*>(op.send_data), op.send_bytes);
        t->send->send(op.send_peer,
                      gloo_ring::transfer_slot(me, world_rank_of(op.send_peer), op.send_seq, op.send_bytes),
                      0, op.send_bytes);
      }
    } catch (const gloo::Exception& e) {
      throw Error(ExitCode::kComm, op.label + ": the connection already failed: " + e.what());
    }
    return t;
  }

  std::unique_ptr<ProcessGroup> make_subgroup(const std::vector<int>& members, const std::string& name,
                                              const std::string& prefix) override {
    std::vector<int> world;
    int my_index = -1;
    for (size_t i = 0; i < members.size(); ++i) {
      world.push_back(world_rank_of(members[i]));
      if (members[i] == rank()) my_index = static_cast<int>(i);
    }
    if (members.size() == 1) return make_solo_group(name, world[0], timeout());
    return std::make_unique<GlooProcessGroup>(shared_, name, my_index, world, timeout(), prefix);
  }

  void abort_connections() noexcept override {
    if (watch_) watch_->abort_all("aborted because another operation on this group failed");
    if (!ctx_) return;
    try {
      ctx_->closeConnections();
    } catch (...) {
      // Closing is best effort: the waits above already fail.
    }
  }

 private:
  std::shared_ptr<GlooShared> shared_;
  std::shared_ptr<gloo::rendezvous::Context> ctx_;
  gloo_ring::Scratch scratch_;
  std::unique_ptr<gloo_ring::PeerWatch> watch_;  // after ctx_: destroyed first
};

}  // namespace

std::unique_ptr<ProcessGroup> make_gloo_world(std::shared_ptr<Rendezvous> rv, Millis timeout) {
  auto shared = std::make_shared<GlooShared>();
  shared->device = make_device(rv->master_addr);
  shared->rv = std::move(rv);
  std::vector<int> world(static_cast<size_t>(shared->rv->world_size));
  for (int i = 0; i < shared->rv->world_size; ++i) world[static_cast<size_t>(i)] = i;
  const int rank = shared->rv->world_rank;
  return std::make_unique<GlooProcessGroup>(shared, "world", rank, world, timeout, "group/world/1");
}

}  // namespace flotilla::comm
