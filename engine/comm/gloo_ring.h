// Collective algorithms written on Gloo's TCP transport (unbound buffers, slots, per-wait
// timeouts). Internal to the Gloo backend; compiled only where Gloo is present.
//
// Non-obvious decision: we use Gloo's transport but not gloo::allreduce & co. Owning the algorithm
// gives (1) a fixed, documented summation order (ring reduce-scatter, chunk c summed starting at
// rank c+1 around the ring to rank c), so two runs of one layout are bitwise identical; (2) the
// peer of every wait, so a failure names "peer rank 0" instead of an address; (3) a real
// bandwidth-optimal reduce-scatter with any count (Gloo's ReduceScatterHalvingDoubling uses the
// legacy pair buffers and int counts); (4) slots derived from (seq, op, dtype, count), so ranks that
// disagree on the collective time out with a hint instead of tripping an assertion inside Gloo's
// event loop thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>

#include "engine/comm/process_group.h"

namespace flotilla::comm::gloo_ring {

// Transfer size of one pipelined piece; kDepth pieces are in flight per ring step.
constexpr size_t kSegmentBytes = 1u << 20;
constexpr size_t kDepth = 4;
// all_reduce / reduce_scatter of at most this many bytes in all: direct exchange, not the ring.
constexpr size_t kSmallBytes = 64u << 10;

class PeerWatch;

// Reusable memory of one group (touched only by the thread running its current operation).
struct Scratch {
  std::vector<char> segments;  // kDepth receive segments
  std::vector<float> partial;  // reduce_scatter partial sums: up to 2 * count
};

// Runs one collective of `group` over ctx (the group's Gloo context; ctx.rank == group.rank()).
// Throws flotilla::Error(kComm) naming the op, the peer and what happened.
void run_collective(gloo::Context& ctx, const ProcessGroup& group, const ProcessGroup::Op& op,
                    Scratch& scratch, PeerWatch& registry);

// Slot of the n-th transfer (seq, 1-based) from world rank src to world rank dst of `bytes`:
// distinct from every collective slot; a size disagreement gives a different slot (a timeout with
// a hint rather than a crash).
uint64_t transfer_slot(int src, int dst, uint64_t seq, size_t bytes);

// Waits for a posted receive / send on buf (peer = group rank) until op.deadline, translating Gloo's
// exceptions into Error(kComm) naming the op and the peer. `watch` can cut the wait short when a
// peer's connection dies (see gloo_peer_watch.h).
void wait_recv(gloo::transport::UnboundBuffer& buf, int peer, const ProcessGroup& group,
               const ProcessGroup::Op& op, PeerWatch& registry);
void wait_send(gloo::transport::UnboundBuffer& buf, int peer, const ProcessGroup& group,
               const ProcessGroup::Op& op, PeerWatch& registry);

}  // namespace flotilla::comm::gloo_ring
