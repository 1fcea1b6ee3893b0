// The NCCL group's host-buffer staging decisions (engine/comm/nccl_staging.h), without CUDA:
// - pointer classification: device and managed memory go to NCCL as they are; pageable
//   (unregistered), pinned host memory and pointers CUDA does not know are staged;
// - the layout of each operation kind: which buffers are copied in / out, sizes (group_size x
//   count for the reduce_scatter input and the all_gather output), disjoint 256-byte aligned
//   regions, device buffers left out, aliasing host buffers still getting separate regions;
// - scratch growth (geometric, 1 MiB granules, never shrinking for a smaller operation) and the
//   retention limit.
#include <cstdint>

#include "check.h"
#include "engine/comm/nccl_staging.h"

using namespace flotilla::comm;
using namespace flotilla::comm::nccl_staging;

namespace {

bool disjoint(const Region& a, const Region& b) {
  if (a.bytes == 0 || b.bytes == 0) return true;
  return a.offset + a.bytes <= b.offset || b.offset + b.bytes <= a.offset;
}

void test_classify() {
  CHECK(classify(true, 0) == PointerKind::kUnregistered);
  CHECK(classify(true, 1) == PointerKind::kHost);
  CHECK(classify(true, 2) == PointerKind::kDevice);
  CHECK(classify(true, 3) == PointerKind::kManaged);
  CHECK(classify(false, 2) == PointerKind::kQueryFailed);  // the type of a failed query is ignored
  CHECK(classify(true, 7) == PointerKind::kUnregistered);
  CHECK(needs_staging(PointerKind::kUnregistered));
  CHECK(needs_staging(PointerKind::kHost));
  CHECK(needs_staging(PointerKind::kQueryFailed));
  CHECK(!needs_staging(PointerKind::kDevice));
  CHECK(!needs_staging(PointerKind::kManaged));
}

void test_plans() {
  const HostFlags none{};
  // Device buffers: nothing staged, whatever the kind.
  for (OpKind k : {OpKind::kAllReduce, OpKind::kReduceScatter, OpKind::kAllGather, OpKind::kBroadcast,
                   OpKind::kBarrier, OpKind::kSendRecv})
    CHECK(!plan(k, 4, 1000, 4, 100, 100, none).any());

  HostFlags data;
  data.data = true;
  // all_reduce of 3 doubles on the host: one in-out region of 24 bytes, aligned total.
  Plan ar = plan(OpKind::kAllReduce, 8, 3, 2, 0, 0, data);
  CHECK(ar.data.bytes == 24 && ar.data.offset == 0 && ar.data.copy_in && ar.data.copy_out);
  CHECK(ar.total == 256 && ar.input.bytes == 0);
  Plan bc = plan(OpKind::kBroadcast, 1, 1000, 3, 0, 0, data);
  CHECK(bc.data.bytes == 1000 && bc.data.copy_in && bc.data.copy_out && bc.total == 1024);
  CHECK(!plan(OpKind::kBarrier, 4, 1, 2, 0, 0, data).any());

  // reduce_scatter, both on the host (also the aliasing in-place call): input is size x count and
  // only copied in, output count and only copied out, separate regions.
  HostFlags both;
  both.data = both.input = true;
  Plan rs = plan(OpKind::kReduceScatter, 4, 10, 4, 0, 0, both);
  CHECK(rs.input.bytes == 160 && rs.input.copy_in && !rs.input.copy_out);
  CHECK(rs.data.bytes == 40 && !rs.data.copy_in && rs.data.copy_out);
  CHECK(disjoint(rs.input, rs.data) && rs.data.offset % kStagingAlign == 0);
  CHECK(rs.total == 512);
  // all_gather: input count (in), output size x count (out).
  Plan ag = plan(OpKind::kAllGather, 4, 10, 4, 0, 0, both);
  CHECK(ag.input.bytes == 40 && ag.input.copy_in && !ag.input.copy_out);
  CHECK(ag.data.bytes == 160 && !ag.data.copy_in && ag.data.copy_out);
  CHECK(disjoint(ag.input, ag.data) && ag.total == 512);
  // Mixed: device input, host output: only the output is staged, at offset 0.
  Plan mixed = plan(OpKind::kAllGather, 4, 300, 2, 0, 0, data);
  CHECK(mixed.input.bytes == 0 && mixed.data.bytes == 2400 && mixed.data.offset == 0 && mixed.total == 2560);

  // send/recv: each part by its own flag and byte count; an empty part is not staged.
  HostFlags sr;
  sr.send = sr.recv = true;
  Plan p2p = plan(OpKind::kSendRecv, 1, 0, 2, 300, 700, sr);
  CHECK(p2p.send.bytes == 300 && p2p.send.copy_in && !p2p.send.copy_out);
  CHECK(p2p.recv.bytes == 700 && !p2p.recv.copy_in && p2p.recv.copy_out);
  CHECK(disjoint(p2p.send, p2p.recv) && p2p.total == 512 + 768);
  Plan send_only = plan(OpKind::kSendRecv, 1, 0, 2, 300, 0, sr);
  CHECK(send_only.recv.bytes == 0 && send_only.total == 512);
}

void test_growth() {
  const size_t MiB = size_t(1) << 20;
  CHECK(grown_capacity(0, 0) == 0);
  CHECK(grown_capacity(0, 1) == MiB);
  CHECK(grown_capacity(MiB, 1000) == MiB);             // fits: unchanged
  CHECK(grown_capacity(4 * MiB, MiB) == 4 * MiB);      // never shrinks for a small operation
  CHECK(grown_capacity(MiB, MiB + 1) == 2 * MiB);      // doubles
  CHECK(grown_capacity(MiB, 5 * MiB + 3) == 6 * MiB);  // or the need, rounded to a granule
  size_t cap = 0;
  int grows = 0;
  for (size_t need = 1000; need < 300 * MiB; need = need * 3 / 2) {
    const size_t next = grown_capacity(cap, need);
    CHECK(next >= need && next % MiB == 0);
    if (next != cap) ++grows;
    cap = next;
  }
  CHECK(grows < 20);  // geometric: few reallocations over five orders of magnitude
  CHECK(retain(kStagingRetainBytes) && retain(MiB) && !retain(kStagingRetainBytes + MiB));
}

}  // namespace

int main() {
  test_classify();
  test_plans();
  test_growth();
  return flotilla_test::summary("nccl_staging");
}
