// Host-buffer staging for the NCCL ProcessGroup: which buffers of an operation must travel
// through the group's device scratch buffer, where each one lies in it, and how big the scratch
// grows. Header-only and CUDA-free so the decisions are unit-tested on machines without CUDA
// (tests/engine/test_nccl_staging.cpp); nccl_process_group.cpp applies them.
//
// Non-obvious decisions:
// - Every host buffer of an operation gets its own region of the scratch, even when the caller's
//   host buffers alias (reduce_scatter with out == in + rank * count, all_gather with in == out +
//   rank * count): the collective then runs out of place on the device, and copying the output
//   back gives the in-place result. NCCL's own in-place rule (exact offsets) never has to hold
//   for staged pointers.
// - Managed memory is not staged (NCCL reads it like device memory); pinned host memory
//   (cudaMemoryTypeHost) is staged like pageable memory, because NCCL needs a device pointer and
//   the mapped alias is not guaranteed. A failed pointer query means "not a CUDA allocation": host.
// - The scratch grows geometrically in 1 MiB steps and is kept for reuse up to
//   kStagingRetainBytes; a bigger one (a checkpoint broadcast at resume) is freed after its
//   operation so a one-off does not hold device memory for the rest of the run.
#pragma once

#include <cstddef>
#include <cstdint>

#include "engine/comm/process_group.h"

namespace flotilla::comm::nccl_staging {

// cudaPointerGetAttributes' memory type, mirrored without CUDA headers (same order as
// cudaMemoryType: Unregistered = 0, Host = 1, Device = 2, Managed = 3), plus a failed query.
enum class PointerKind : uint8_t {
  kUnregistered = 0,
  kHost = 1,
  kDevice = 2,
  kManaged = 3,
  kQueryFailed = 4
};

// query_ok: cudaPointerGetAttributes returned cudaSuccess; memory_type: its attributes.type.
inline PointerKind classify(bool query_ok, int memory_type) {
  if (!query_ok) return PointerKind::kQueryFailed;
  switch (memory_type) {
    case 1:
      return PointerKind::kHost;
    case 2:
      return PointerKind::kDevice;
    case 3:
      return PointerKind::kManaged;
    default:
      return PointerKind::kUnregistered;
  }
}

// True when NCCL cannot take the pointer directly and it goes through the scratch.
inline bool needs_staging(PointerKind k) { return k != PointerKind::kDevice && k != PointerKind::kManaged; }

constexpr size_t kStagingAlign = 256;                // region alignment inside the scratch
constexpr size_t kStagingGranule = size_t(1) << 20;  // growth step
constexpr size_t kStagingRetainBytes = size_t(64) << 20;

inline size_t align_up(size_t bytes, size_t to) { return (bytes + to - 1) / to * to; }

// One buffer's region of the scratch. bytes == 0: not staged (device pointer, or nothing to move).
struct Region {
  size_t offset = 0;
  size_t bytes = 0;
  bool copy_in = false;   // host -> scratch before the collective
  bool copy_out = false;  // scratch -> host after it
};

// The regions of one operation, by role. total: scratch bytes the operation needs.
struct Plan {
  Region data;   // all_reduce/broadcast in-out; reduce_scatter/all_gather output
  Region input;  // reduce_scatter/all_gather input
  Region send;   // send/recv
  Region recv;
  size_t total = 0;
  bool any() const { return total > 0; }
};

// Which buffers are host memory (from classify/needs_staging) for one operation.
struct HostFlags {
  bool data = false, input = false, send = false, recv = false;
};

// Lays out the staged regions of `op` in the scratch. group_size: the group's size (reduce_scatter
// input and all_gather output are group_size * count elements).
inline Plan plan(OpKind kind, size_t elem_size, size_t count, int group_size, size_t send_bytes,
                 size_t recv_bytes, const HostFlags& host) {
  Plan p;
  auto place = [&p](Region& r, size_t bytes, bool in, bool out) {
    if (bytes == 0) return;
    r.offset = p.total;
    r.bytes = bytes;
    r.copy_in = in;
    r.copy_out = out;
    p.total += align_up(bytes, kStagingAlign);
  };
  const size_t one = count * elem_size;
  const size_t all = one * static_cast<size_t>(group_size > 0 ? group_size : 1);
  switch (kind) {
    case OpKind::kAllReduce:
    case OpKind::kBroadcast:
      if (host.data) place(p.data, one, true, true);
      break;
    case OpKind::kReduceScatter:
      if (host.input) place(p.input, all, true, false);
      if (host.data) place(p.data, one, false, true);
      break;
    case OpKind::kAllGather:
      if (host.input) place(p.input, one, true, false);
      if (host.data) place(p.data, all, false, true);
      break;
    case OpKind::kSendRecv:
      if (host.send) place(p.send, send_bytes, true, false);
      if (host.recv) place(p.recv, recv_bytes, false, true);
      break;
    case OpKind::kBarrier:
      break;
  }
  return p;
}

// The scratch capacity after an operation needing `needed` bytes finds `current`: unchanged when
// it fits, else the larger of `needed` and twice `current`, rounded up to kStagingGranule.
inline size_t grown_capacity(size_t current, size_t needed) {
  if (needed <= current) return current;
  const size_t want = needed > 2 * current ? needed : 2 * current;
  return align_up(want, kStagingGranule);
}

// Whether a scratch of `capacity` bytes is kept after its operation (else freed at once).
inline bool retain(size_t capacity) { return capacity <= kStagingRetainBytes; }

}  // namespace flotilla::comm::nccl_staging
