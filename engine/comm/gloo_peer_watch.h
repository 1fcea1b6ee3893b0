// PeerWatch: notices a dead peer connection while an operation is in flight, which Gloo alone
// does not (Gloo backend internal).
//
// Non-obvious decision: Gloo's TCP pair signals a connection failure to the operations queued on
// that pair, but not to the one it is in the middle of reading or writing (the receive whose
// header has arrived, the send being flushed). A peer that dies mid-message would leave us waiting
// for the full timeout. So each group keeps one never-completing 1-byte probe receive posted per
// peer (a reserved slot) - a queued operation, hence always signalled - and, while any wait is
// active, a watch thread checks the probes every 50 ms without blocking (abortWaitRecv, then
// waitRecv returns at once, or throws if the pair failed) and wakes all waits naming the dead peers.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>

#include "engine/comm/process_group.h"

namespace flotilla::comm::gloo_ring {

class PeerWatch {
 public:
  // Posts the probes on ctx (connected) and starts the watch thread (idle until a wait begins).
  PeerWatch(gloo::Context& ctx, const ProcessGroup& group);
  ~PeerWatch();
  PeerWatch(const PeerWatch&) = delete;
  PeerWatch& operator=(const PeerWatch&) = delete;

  // Wakes every current and future wait; `cause` becomes the text of their errors.
  void abort_all(const std::string& cause);
  bool aborted() const;
  std::string cause() const;

  // Registers a buffer for the duration of one wait.
  class Scope {
   public:
    Scope(PeerWatch& watch, gloo::transport::UnboundBuffer& buf);
    ~Scope();
    bool aborted() const { return aborted_; }

   private:
    PeerWatch& watch_;
    gloo::transport::UnboundBuffer& buf_;
    bool aborted_ = false;
  };

 private:
  void loop();
  std::vector<int> dead_peers();
  void abort_locked(const std::string& cause);

  gloo::Context& ctx_;
  const ProcessGroup& group_;
  std::vector<char> probe_bytes_;
  std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> probes_;  // [peer], null for self

  mutable std::mutex mutex_;
  std::condition_variable cv_;
  bool aborted_ = false;
  bool stopping_ = false;
  bool idle_ = true;
  std::string cause_;
  std::set<gloo::transport::UnboundBuffer*> waiting_;
  std::thread thread_;
};

}  // namespace flotilla::comm::gloo_ring
