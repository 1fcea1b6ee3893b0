// Ring reduce-scatter / all-gather / all-reduce, chain broadcast and dissemination barrier on
// Gloo's unbound buffers (see gloo_ring.h for why these are ours and not gloo::allreduce).
//
// Ring conventions (n ranks, r = this rank, left = r-1, right = r+1, indices mod n):
//   reduce-scatter step s (0..n-2): send chunk r-s-1 to the right, receive chunk r-s-2 from the
//     left and add it to the local chunk; after n-1 steps rank r holds the full sum of chunk r,
//     accumulated as x[c] + (... + (x[c+2] + x[c+1])), the same order on every run;
//   all-gather step s: send chunk r-s to the right, receive chunk r-s-1 from the left.
// all_reduce = reduce-scatter + all-gather over chunks of ceil(count/n) elements rounded up to 16
// (aligned vector loops; the same chunks as reduce_scatter when count = n * 16k), so each rank
// sends 2(n-1)/n of the buffer. At kSmallBytes or less in all, all_reduce and reduce_scatter
// instead exchange directly and sum in rank order (one round trip instead of 2(n-1) steps).
#include "engine/comm/gloo_ring.h"

#include <gloo/common/error.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "engine/comm/gloo_peer_watch.h"
#include "engine/core/error.h"

namespace flotilla::comm::gloo_ring {
namespace {

using Clock = std::chrono::steady_clock;
using UBuf = std::unique_ptr<gloo::transport::UnboundBuffer>;

uint64_t mix(uint64_t h, uint64_t v) {
  // splitmix64 finaliser over (h ^ v): a cheap, well-spread combine.
  uint64_t z = h ^ (v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2));
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

std::string fmt_seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g s", s);
  return buf;
}

// Gloo's message without its "[file:line] " prefix and trailing advice.
std::string gloo_text(const char* what) {
  std::string s = what;
  if (!s.empty() && s[0] == '[') {
    const size_t close = s.find("] ");
    if (close != std::string::npos) s = s.substr(close + 2);
  }
  const size_t dot = s.find(". ");
  if (dot != std::string::npos) s = s.substr(0, dot);
  return s;
}

[[noreturn]] void throw_wait_failure(const char* what, bool receiving, int peer, const ProcessGroup& group,
                                     const ProcessGroup::Op& op) {
  const std::string text = what;
  const std::string peer_text = "peer " + group.peer_label(peer);
  std::string why;
  if (text.find("Timed out waiting") != std::string::npos) {
    why = "timed out after " + fmt_seconds(std::chrono::duration<double>(op.timeout).count()) +
          (receiving ? " waiting for data from " : " waiting for ") + peer_text +
          (receiving ? "" : " to receive") +
          " (it is stopped, hung or slower than the timeout, or it called a different collective)";
  } else if (text.find("Application timeout") != std::string::npos) {
    why = "aborted because another wait on this group timed out";
  } else if (text.find("closed") != std::string::npos || text.find("reset") != std::string::npos ||
             text.find("Broken pipe") != std::string::npos) {
    why = peer_text +
          " closed the connection (it exited, crashed or failed its own operation; gloo: " + gloo_text(what) +
          ")";
  } else {
    why = "transport error with " + peer_text + ": " + gloo_text(what);
  }
  throw Error(ExitCode::kComm, op.label + ": " + why);
}

Millis left_until(Clock::time_point deadline) {
  const auto ms = std::chrono::duration_cast<Millis>(deadline - Clock::now());
  return std::max(ms, Millis(1));
}

template <typename T>
void add_into(T* dst, const T* local, const T* in, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = local[i] + in[i];
}

class Ring {
 public:
  Ring(gloo::Context& ctx, const ProcessGroup& group, const ProcessGroup::Op& op, Scratch& scratch,
       PeerWatch& watch)
      : ctx_(ctx), group_(group), op_(op), scratch_(scratch), watch_(watch), n_(ctx.size), r_(ctx.rank) {
    uint64_t h = mix(0x666c6f74696c6c61ull, op.seq);
    h = mix(h, static_cast<uint64_t>(op.kind));
    h = mix(h, static_cast<uint64_t>(op.dtype));
    h = mix(h, op.count);
    h = mix(h, static_cast<uint64_t>(op.root));
    slot_base_ = (h & 0xffffffull) << 39;  // bit 63 clear: transfers use the other half
  }

  void run() {
    switch (op_.kind) {
      case OpKind::kAllReduce:
        if (op_.dtype == DType::kFloat32) return all_reduce(static_cast<float*>(op_.data));
        if (op_.dtype == DType::kFloat64) return all_reduce(static_cast<double*>(op_.data));
        if (op_.dtype == DType::kInt64) return all_reduce(static_cast<int64_t*>(op_.data));
        break;
      case OpKind::kReduceScatter:
        if (op_.dtype == DType::kFloat32) return reduce_scatter();
        break;
      case OpKind::kAllGather: {
        const size_t bytes = op_.count * dtype_size(op_.dtype);
        char* out = static_cast<char*>(op_.data);
        if (op_.input != out + bytes * static_cast<size_t>(r_) && bytes > 0) {
          std::memcpy(out + bytes * static_cast<size_t>(r_), op_.input, bytes);
        }
        return ring_gather(
            out, 0, [bytes](int c) { return bytes * static_cast<size_t>(c); },
            [bytes](int) { return bytes; });
      }
      case OpKind::kBroadcast:
        return broadcast(static_cast<char*>(op_.data), op_.count * dtype_size(op_.dtype));
      case OpKind::kBarrier:
        return barrier();
      case OpKind::kSendRecv:
        break;
    }
    throw Error(ExitCode::kInternal, op_.label + ": " + dtype_name(op_.dtype) + " is not supported by gloo");
  }

 private:
  int mod(int x) const { return ((x % n_) + n_) % n_; }
  // Layout: 24-bit op fingerprint | 3-bit phase | 16-bit ring step | 20-bit segment.
  uint64_t slot(uint32_t phase, uint32_t step, uint32_t segment) const {
    return slot_base_ | (static_cast<uint64_t>(phase) << 36) | (static_cast<uint64_t>(step & 0xffff) << 20) |
           (segment & 0xfffff);
  }
  void post_recv(UBuf& b, int peer, uint64_t slot, size_t nbytes) {
    try {
      b->recv(peer, slot, 0, nbytes);
    } catch (const std::exception& e) {
      throw_wait_failure(e.what(), true, peer, group_, op_);
    }
  }
  void post_send(UBuf& b, int peer, uint64_t slot) {
    try {
      b->send(peer, slot, 0, b->size);
    } catch (const std::exception& e) {
      throw_wait_failure(e.what(), false, peer, group_, op_);
    }
  }
  UBuf buffer(const void* p, size_t bytes) { return ctx_.createUnboundBuffer(const_cast<void*>(p), bytes); }
  void wait_r(UBuf& b, int peer) { wait_recv(*b, peer, group_, op_, watch_); }
  void wait_s(UBuf& b, int peer) { wait_send(*b, peer, group_, op_, watch_); }

  // One reduce-scatter step: send send_n elements at send_src to the right while receiving recv_n
  // from the left in segments, writing dst[i] = local[i] + received[i] (dst may equal local).
  template <typename T>
  void reduce_step(const T* send_src, size_t send_n, const T* local, T* dst, size_t recv_n, uint32_t step) {
    const int right = mod(r_ + 1), left = mod(r_ - 1);
    const size_t seg = kSegmentBytes / sizeof(T);
    const size_t send_segs = (send_n + seg - 1) / seg, recv_segs = (recv_n + seg - 1) / seg;
    auto seg_len = [seg](size_t total, size_t k) { return std::min(seg, total - k * seg); };
    if (scratch_.segments.size() < kDepth * kSegmentBytes) scratch_.segments.resize(kDepth * kSegmentBytes);
    T* tmp = reinterpret_cast<T*>(scratch_.segments.data());

    std::vector<UBuf> recvs(std::min(kDepth, recv_segs));
    for (size_t d = 0; d < recvs.size(); ++d) {
      recvs[d] = buffer(tmp + d * seg, seg * sizeof(T));
      post_recv(recvs[d], left, slot(0, step, static_cast<uint32_t>(d)), seg_len(recv_n, d) * sizeof(T));
    }
    std::vector<UBuf> sends(send_segs);
    for (size_t k = 0; k < send_segs; ++k) {
      sends[k] = buffer(send_src + k * seg, seg_len(send_n, k) * sizeof(T));
      post_send(sends[k], right, slot(0, step, static_cast<uint32_t>(k)));
    }
    for (size_t k = 0; k < recv_segs; ++k) {
      const size_t d = k % kDepth;
      wait_r(recvs[d], left);
      add_into(dst + k * seg, local + k * seg, tmp + d * seg, seg_len(recv_n, k));
      if (k + kDepth < recv_segs) {
        post_recv(recvs[d], left, slot(0, step, static_cast<uint32_t>(k + kDepth)),
                  seg_len(recv_n, k + kDepth) * sizeof(T));
      }
    }
    for (auto& s : sends) wait_s(s, right);
  }

  // n-1 all-gather steps over `base`: chunk c lives at offset(c), length(c) bytes.
  template <typename Offset, typename Length>
  void ring_gather(char* base, uint32_t phase, Offset offset, Length length) {
    const int right = mod(r_ + 1), left = mod(r_ - 1);
    for (int s = 0; s + 1 < n_; ++s) {
      const int send_c = mod(r_ - s), recv_c = mod(r_ - s - 1);
      UBuf recv, send;
      if (length(recv_c) > 0) {
        recv = buffer(base + offset(recv_c), length(recv_c));
        post_recv(recv, left, slot(phase + 1, static_cast<uint32_t>(s), 0), recv->size);
      }
      if (length(send_c) > 0) {
        send = buffer(base + offset(send_c), length(send_c));
        post_send(send, right, slot(phase + 1, static_cast<uint32_t>(s), 0));
      }
      if (recv) wait_r(recv, left);
      if (send) wait_s(send, right);
    }
  }

  // Small operations (kSmallBytes or less in all): one exchange instead of a ring, for latency.
  // Rank r sends block k of `in` to rank k (all_reduce: the whole buffer to everybody) and sums the
  // n contributions to its own block in rank order, ((x0 + x1) + x2) + ..., the same on every rank
  // (and, for two ranks, the same bits as the ring, since a + b == b + a).
  template <typename T>
  void direct_reduce(const T* in, T* out, size_t block, bool whole) {
    const auto n = static_cast<size_t>(n_);
    std::vector<T> received((n - 1) * block), acc(block);
    auto slot_of = [this](int p) { return static_cast<size_t>(p < r_ ? p : p - 1); };
    auto contribution = [&](int k) -> const T* {
      if (k != r_) return received.data() + slot_of(k) * block;
      return whole ? in : in + block * static_cast<size_t>(r_);
    };
    std::vector<UBuf> recvs(n), sends(n);
    for (int p = 0; p < n_; ++p) {
      if (p == r_) continue;
      recvs[static_cast<size_t>(p)] = buffer(received.data() + slot_of(p) * block, block * sizeof(T));
      post_recv(recvs[static_cast<size_t>(p)], p, slot(5, 0, 0), block * sizeof(T));
    }
    for (int p = 0; p < n_; ++p) {
      if (p == r_) continue;
      sends[static_cast<size_t>(p)] =
          buffer(whole ? in : in + block * static_cast<size_t>(p), block * sizeof(T));
      post_send(sends[static_cast<size_t>(p)], p, slot(5, 0, 0));
    }
    for (int p = 0; p < n_; ++p) {
      if (p != r_) wait_r(recvs[static_cast<size_t>(p)], p);
    }
    for (int p = 0; p < n_; ++p) {
      if (p != r_) wait_s(sends[static_cast<size_t>(p)], p);
    }
    std::memcpy(acc.data(), contribution(0), block * sizeof(T));
    for (int k = 1; k < n_; ++k) add_into(acc.data(), acc.data(), contribution(k), block);
    std::memcpy(out, acc.data(), block * sizeof(T));
  }

  template <typename T>
  void all_reduce(T* data) {
    const size_t count = op_.count;
    if (n_ == 1 || count == 0) return;
    if (count * sizeof(T) <= kSmallBytes) return direct_reduce<T>(data, data, count, true);
    // Equal chunks of ceil(count/n) rounded up to 16 elements (the last one shorter, maybe empty):
    // for count = n * c with c a multiple of 16 this is exactly reduce_scatter's chunking, so
    // all_reduce == all_gather(reduce_scatter) bit for bit (ZeRO and plain DP sum alike).
    const auto n = static_cast<size_t>(n_);
    const size_t chunk = ((count + n - 1) / n + 15) / 16 * 16;
    auto begin = [count, chunk](int c) -> size_t { return std::min(count, chunk * static_cast<size_t>(c)); };
    auto len = [&begin](int c) { return begin(c + 1) - begin(c); };
    for (int s = 0; s + 1 < n_; ++s) {
      const int send_c = mod(r_ - s - 1), recv_c = mod(r_ - s - 2);
      reduce_step(data + begin(send_c), len(send_c), data + begin(recv_c), data + begin(recv_c), len(recv_c),
                  static_cast<uint32_t>(s));
    }
    ring_gather(
        reinterpret_cast<char*>(data), 0, [&begin](int c) { return begin(c) * sizeof(T); },
        [&len](int c) { return len(c) * sizeof(T); });
  }

  void reduce_scatter() {
    const size_t c = op_.count;
    const auto* in = static_cast<const float*>(op_.input);
    auto* out = static_cast<float*>(op_.data);
    if (c == 0) return;
    if (n_ == 1) {
      if (in != out) std::memmove(out, in, c * sizeof(float));
      return;
    }
    if (c * sizeof(float) * static_cast<size_t>(n_) <= kSmallBytes)
      return direct_reduce<float>(in, out, c, false);
    const bool in_place = out == in + c * static_cast<size_t>(r_);
    const size_t need = in_place ? 2 * c : c;
    if (scratch_.partial.size() < need) scratch_.partial.resize(need);
    // P(s): where step s writes its partial sums; the last step writes out, consecutive steps differ.
    auto partial = [&](int s) -> float* {
      if (s == n_ - 2) return out;
      if (in_place) return scratch_.partial.data() + c * static_cast<size_t>(s % 2);
      return (n_ - 2 - s) % 2 == 0 ? out : scratch_.partial.data();
    };
    for (int s = 0; s + 1 < n_; ++s) {
      const float* send_src = s == 0 ? in + c * static_cast<size_t>(mod(r_ - 1)) : partial(s - 1);
      const float* local = in + c * static_cast<size_t>(mod(r_ - s - 2));
      reduce_step(send_src, c, local, partial(s), c, static_cast<uint32_t>(s));
    }
  }

  // Pipelined chain from root: root -> root+1 -> ... in segments.
  void broadcast(char* data, size_t bytes) {
    if (n_ == 1 || bytes == 0) return;
    const int pos = mod(r_ - op_.root);
    const int prev = mod(r_ - 1), next = mod(r_ + 1);
    const size_t segs = (bytes + kSegmentBytes - 1) / kSegmentBytes;
    auto seg_len = [bytes](size_t k) { return std::min(kSegmentBytes, bytes - k * kSegmentBytes); };
    std::vector<UBuf> bufs(segs);
    for (size_t k = 0; k < segs; ++k) bufs[k] = buffer(data + k * kSegmentBytes, seg_len(k));
    if (pos > 0) {
      for (size_t k = 0; k < segs; ++k)
        post_recv(bufs[k], prev, slot(3, 0, static_cast<uint32_t>(k)), bufs[k]->size);
    }
    for (size_t k = 0; k < segs; ++k) {
      if (pos > 0) wait_r(bufs[k], prev);
      if (pos < n_ - 1) post_send(bufs[k], next, slot(3, 0, static_cast<uint32_t>(k)));
    }
    if (pos < n_ - 1) {
      for (auto& b : bufs) wait_s(b, next);
    }
  }

  // Dissemination barrier: ceil(log2 n) rounds; round k talks to r +- 2^k.
  void barrier() {
    char out_byte = 1, in_byte = 0;
    uint32_t round = 0;
    for (int k = 1; k < n_; k <<= 1, ++round) {
      const int to = mod(r_ + k), from = mod(r_ - k);
      UBuf recv = buffer(&in_byte, 1), send = buffer(&out_byte, 1);
      post_recv(recv, from, slot(4, round, 0), 1);
      post_send(send, to, slot(4, round, 0));
      wait_r(recv, from);
      wait_s(send, to);
    }
  }

  gloo::Context& ctx_;
  const ProcessGroup& group_;
  const ProcessGroup::Op& op_;
  Scratch& scratch_;
  PeerWatch& watch_;
  int n_, r_;
  uint64_t slot_base_ = 0;
};

}  // namespace

void run_collective(gloo::Context& ctx, const ProcessGroup& group, const ProcessGroup::Op& op,
                    Scratch& scratch, PeerWatch& watch) {
  if (watch.aborted()) throw Error(ExitCode::kComm, op.label + ": " + watch.cause());
  try {
    Ring(ctx, group, op, scratch, watch).run();
  } catch (const Error&) {
    throw;
  } catch (const gloo::Exception& e) {
    // Thrown when posting to a pair that already failed (no wait involved): peer unknown here.
    throw Error(ExitCode::kComm, op.label + ": transport failure: " + gloo_text(e.what()));
  }
}

uint64_t transfer_slot(int src, int dst, uint64_t seq, size_t bytes) {
  uint64_t h = mix(0x7032702d736c6f74ull, static_cast<uint64_t>(src));
  h = mix(h, static_cast<uint64_t>(dst));
  h = mix(h, seq);
  h = mix(h, bytes);
  return h | (1ull << 63);
}

namespace {
void wait_one(gloo::transport::UnboundBuffer& buf, bool receiving, int peer, const ProcessGroup& group,
              const ProcessGroup::Op& op, PeerWatch& watch) {
  bool completed = false;
  {
    PeerWatch::Scope scope(watch, buf);
    if (!scope.aborted()) {
      try {
        completed = receiving ? buf.waitRecv(nullptr, left_until(op.deadline))
                              : buf.waitSend(nullptr, left_until(op.deadline));
      } catch (const std::exception& e) {
        throw_wait_failure(e.what(), receiving, peer, group, op);
      }
    }
  }
  if (!completed) throw Error(ExitCode::kComm, op.label + ": " + watch.cause());
}
}  // namespace

void wait_recv(gloo::transport::UnboundBuffer& buf, int peer, const ProcessGroup& group,
               const ProcessGroup::Op& op, PeerWatch& watch) {
  wait_one(buf, true, peer, group, op, watch);
}

void wait_send(gloo::transport::UnboundBuffer& buf, int peer, const ProcessGroup& group,
               const ProcessGroup::Op& op, PeerWatch& watch) {
  wait_one(buf, false, peer, group, op, watch);
}

}  // namespace flotilla::comm::gloo_ring
