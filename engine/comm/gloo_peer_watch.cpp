// PeerWatch: probe receives and the watch thread (see gloo_peer_watch.h).
#include "engine/comm/gloo_peer_watch.h"

#include <chrono>

#include "engine/core/error.h"

namespace flotilla::comm::gloo_ring {
namespace {

// Reserved slot: phase 7 of the collective slot layout is never used by an operation.
constexpr uint64_t kProbeSlot = 0x7fffffffffffffffull;
constexpr std::chrono::milliseconds kPollEvery{50};

}  // namespace

PeerWatch::PeerWatch(gloo::Context& ctx, const ProcessGroup& group) : ctx_(ctx), group_(group) {
  probe_bytes_.assign(static_cast<size_t>(ctx.size), 0);
  probes_.resize(static_cast<size_t>(ctx.size));
  for (int p = 0; p < ctx.size; ++p) {
    if (p == ctx.rank) continue;
    auto& probe = probes_[static_cast<size_t>(p)];
    probe = ctx.createUnboundBuffer(&probe_bytes_[static_cast<size_t>(p)], 1);
    probe->recv(p, kProbeSlot, 0, 1);
  }
  thread_ = std::thread([this] { loop(); });
}

PeerWatch::~PeerWatch() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void PeerWatch::abort_locked(const std::string& cause) {
  if (aborted_) return;
  aborted_ = true;
  cause_ = cause;
  for (auto* b : waiting_) {
    b->abortWaitRecv();
    b->abortWaitSend();
  }
}

void PeerWatch::abort_all(const std::string& cause) {
  std::lock_guard<std::mutex> lock(mutex_);
  abort_locked(cause);
}

bool PeerWatch::aborted() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return aborted_;
}

std::string PeerWatch::cause() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return cause_.empty() ? "aborted" : cause_;
}

std::vector<int> PeerWatch::dead_peers() {
  std::vector<int> dead;
  for (size_t p = 0; p < probes_.size(); ++p) {
    if (!probes_[p]) continue;
    // With the abort flag set, waitRecv returns false at once, or throws if the pair has failed.
    probes_[p]->abortWaitRecv();
    try {
      probes_[p]->waitRecv(nullptr, std::chrono::milliseconds(60000));
    } catch (const std::exception&) {
      dead.push_back(static_cast<int>(p));
    }
  }
  return dead;
}

void PeerWatch::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    if (aborted_ || waiting_.empty()) {
      idle_ = true;
      cv_.wait(lock);
      idle_ = false;
      continue;
    }
    cv_.wait_for(lock, kPollEvery);
    if (stopping_ || aborted_ || waiting_.empty()) continue;
    lock.unlock();
    const std::vector<int> dead = dead_peers();
    lock.lock();
    if (dead.empty()) continue;
    std::string who;
    for (size_t i = 0; i < dead.size(); ++i) {
      if (i > 0) who += i + 1 == dead.size() ? " and " : ", ";
      who += group_.peer_label(dead[i]);
    }
    if (dead.size() == 1) {
      abort_locked("peer " + who + " closed the connection (it exited, crashed or failed its own operation)");
    } else {
      abort_locked("peers " + who +
                   " closed their connections (they exited, crashed or failed their own operation)");
    }
  }
}

PeerWatch::Scope::Scope(PeerWatch& watch, gloo::transport::UnboundBuffer& buf) : watch_(watch), buf_(buf) {
  std::lock_guard<std::mutex> lock(watch_.mutex_);
  aborted_ = watch_.aborted_;
  if (aborted_) return;
  watch_.waiting_.insert(&buf_);
  if (watch_.idle_) watch_.cv_.notify_one();
}

PeerWatch::Scope::~Scope() {
  std::lock_guard<std::mutex> lock(watch_.mutex_);
  watch_.waiting_.erase(&buf_);
}

}  // namespace flotilla::comm::gloo_ring
