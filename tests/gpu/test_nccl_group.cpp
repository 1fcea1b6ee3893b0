// The NCCL ProcessGroup on one GPU (a world of one rank: NCCL refuses two ranks on one device, so
// the multi-rank sums are covered by the Gloo tests of the same ProcessGroup semantics), and the
// CUDA trainer's bucketed data-parallel path over it. Skips without a device or without NCCL.
//   - host buffers (staged through the group's device scratch): all_reduce of float/double/int64,
//     broadcast_bytes of a string, out-of-place all_gather and reduce_scatter (whose outputs
//     only the staging copy-out can fill), the aliasing in-place forms, a barrier; a 96 MiB
//     all_gather (over the retention limit: the scratch is freed) followed by a small one
//     (re-allocated). send/recv needs a peer and is not tried in a one-rank group;
//   - device buffers (zero copy) and mixed device/host inputs and outputs, the async form with
//     the input written on the caller's stream just before submission (set_device_stream fence);
//   - the CUDA train model (fp32 and bf16): average_grads through a one-rank NCCL group (plain
//     path on the first step, per-layer buckets overlapped with the backward later, a wrong
//     last-micro-step guess discarded) leaves the gradients bit for bit as a model that never
//     calls it: equal grad norms every step and equal parameters after five AdamW steps.
#include <cuda_runtime.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/comm/rendezvous.h"
#include "engine/comm/socket_io.h"
#include "engine/config/config_io.h"
#include "engine/cuda/train_model_cuda.h"
#include "gpu_test_util.h"

namespace fp = flotilla::comm;
using gpu_test::DeviceBuf;

namespace {

std::unique_ptr<fp::ProcessGroup> nccl_world() {
  return fp::init_process_group("nccl", 0, 1, "127.0.0.1", fp::find_free_port(), fp::Millis(60000));
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void test_host_buffers(fp::ProcessGroup& g) {
  CHECK(std::string(g.backend()) == "nccl" && g.size() == 1);
  const auto x = gpu_test::random_vec(1001, 1);
  std::vector<float> ar = x;
  g.all_reduce(ar.data(), ar.size());
  CHECK(same_bits(ar, x));
  double d[3] = {1.5, -2.25, 1e300};
  g.all_reduce(d, 3);
  CHECK(d[0] == 1.5 && d[1] == -2.25 && d[2] == 1e300);
  int64_t i[2] = {7, -(int64_t(1) << 40)};
  g.all_reduce(i, 2);
  CHECK(i[0] == 7 && i[1] == -(int64_t(1) << 40));
  std::string s = "checkpoint step 40 of run nccl";
  g.broadcast_bytes(s.data(), s.size(), 0);
  CHECK(s == "checkpoint step 40 of run nccl");
  // Out of place: only the copy back from the scratch can fill the outputs.
  std::vector<float> out(x.size(), 0.0f);
  g.all_gather(x.data(), out.data(), x.size());
  CHECK(same_bits(out, x));
  std::vector<float> rs(x.size(), 0.0f);
  g.reduce_scatter(x.data(), rs.data(), x.size());
  CHECK(same_bits(rs, x));
  // In place (out == in + rank * count).
  std::vector<float> inplace = x;
  g.all_gather(inplace.data(), inplace.data(), x.size());
  g.reduce_scatter(inplace.data(), inplace.data(), x.size());
  CHECK(same_bits(inplace, x));
  // Larger than the retained scratch (64 MiB), then small operations again.
  std::vector<float> big(size_t(24) << 20, 0.0f);
  for (size_t k = 0; k < big.size(); k += 4099) big[k] = static_cast<float>(k);
  std::vector<float> big_out(big.size(), -1.0f);
  g.all_gather(big.data(), big_out.data(), big.size());
  CHECK(same_bits(big_out, big));
  std::vector<float> after(5, 0.0f);
  g.all_gather(x.data(), after.data(), 5);
  CHECK(after[0] == x[0] && after[4] == x[4]);
  g.barrier();
  const auto st = g.stats().per_op[static_cast<int>(fp::OpKind::kAllGather)];
  CHECK(st.count == 4);
}

void test_device_buffers(fp::ProcessGroup& g) {
  const auto x = gpu_test::random_vec(777, 2);
  DeviceBuf<float> in(x), out(x.size());
  g.all_reduce(in.get(), x.size());
  CHECK(same_bits(in.download(), x));
  g.all_gather(in.get(), out.get(), x.size());
  CHECK(same_bits(out.download(), x));
  // Mixed: device input to a host output, host input to a device output.
  std::vector<float> host_out(x.size(), 0.0f);
  g.all_gather(in.get(), host_out.data(), x.size());
  CHECK(same_bits(host_out, x));
  DeviceBuf<float> out2(x.size());
  g.reduce_scatter(x.data(), out2.get(), x.size());
  CHECK(same_bits(out2.download(), x));
  // Async, with the input produced on the caller's stream right before submission.
  cudaStream_t stream = nullptr;
  flotilla::cuda::check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream (test)");
  g.set_device_stream(stream);
  DeviceBuf<float> src(size_t(1) << 22), dst(size_t(1) << 22);
  flotilla::cuda::check_cuda(cudaMemsetAsync(src.get(), 0x3f, src.size() * sizeof(float), stream),
                             "memset (test)");
  auto work = g.all_gather_async(src.get(), dst.get(), src.size());
  work->wait();
  const auto got = dst.download();
  float want;
  const uint32_t pattern = 0x3f3f3f3fu;
  std::memcpy(&want, &pattern, 4);
  bool all = true;
  for (float v : got) all = all && v == want;
  CHECK_MSG(all, "the async all_gather did not see the input written on the caller's stream");
  g.set_device_stream(nullptr);
  cudaStreamDestroy(stream);
}

std::vector<int32_t> tokens(int seed, int n, int vocab) {
  flotilla::Rng rng(static_cast<uint64_t>(seed));
  std::vector<int32_t> t(static_cast<size_t>(n) + 1);
  for (auto& v : t) v = static_cast<int32_t>(rng.below(static_cast<uint64_t>(vocab)));
  return t;
}

void test_train_buckets(fp::ProcessGroup& g, const char* dtype) {
  flotilla::RunConfig cfg;
  flotilla::apply_overrides(cfg, {"run.device=cuda", "model.preset=tiny", "model.vocab_size=500",
                                  "model.max_seq_len=64", "train.micro_batch=4", "train.seq_len=64",
                                  "train.deterministic=true", std::string("train.dtype=") + dtype});
  const flotilla::ModelDims dims = flotilla::dims_from_config(cfg.model);
  auto ref = flotilla::cuda::make_cuda_train_model(cfg, dims);
  auto dut = flotilla::cuda::make_cuda_train_model(cfg, dims);
  const auto init = gpu_test::random_vec(flotilla::num_parameters(dims), 3, 0.02f);
  ref->set_params(init.data());
  dut->set_params(init.data());
  const int n = cfg.train.micro_batch * cfg.train.seq_len;
  // Micro-steps per step: 2 (plain path, learns 2), 2 (overlapped), 1 (not armed; plain, learns
  // 1), 1 (overlapped), 2 (armed at micro 0, wrong: discarded, plain).
  const int accum[] = {2, 2, 1, 1, 2};
  int batch = 0;
  bool norms_equal = true;
  for (int step = 1; step <= 5; ++step) {
    const int a = accum[step - 1];
    for (int m = 0; m < a; ++m) {
      const auto t = tokens(100 + batch++, n, dims.vocab_size);
      const float lr =
          ref->forward_backward(t.data(), t.data() + 1, 1.0f / static_cast<float>(a), m > 0, nullptr);
      const float ld =
          dut->forward_backward(t.data(), t.data() + 1, 1.0f / static_cast<float>(a), m > 0, nullptr);
      CHECK(std::memcmp(&lr, &ld, 4) == 0);
    }
    dut->average_grads(g);
    const float nr = ref->grad_norm(), nd = dut->grad_norm();
    if (std::memcmp(&nr, &nd, 4) != 0) {
      norms_equal = false;
      std::printf("  %s step %d: grad norm %.9g with average_grads, %.9g without\n", dtype, step, nd, nr);
    }
    flotilla::AdamWHyper h;
    h.lr = 1e-3f;
    ref->update(h, 1.0f, step);
    dut->update(h, 1.0f, step);
  }
  CHECK(norms_equal);
  std::vector<float> pr(init.size()), pd(init.size());
  ref->get_params(pr.data());
  dut->get_params(pd.data());
  CHECK_MSG(same_bits(pr, pd), "%s: parameters differ after 5 steps through the bucketed all-reduce", dtype);
  CHECK(!same_bits(pr, init));
  std::printf("  %s: 5 steps through the one-rank NCCL buckets, bitwise equal\n", dtype);
}

}  // namespace

int main() {
  if (gpu_test::skip_without_gpu()) return flotilla_test::summary("gpu_nccl_group");
  if (!fp::backend_available("nccl")) {  // a CUDA build where CMake found no NCCL
    std::printf("SKIP: this build has no NCCL (FLOTILLA_HAVE_NCCL unset)\n");
    return flotilla_test::summary("gpu_nccl_group");
  }
  auto g = nccl_world();
  test_host_buffers(*g);
  test_device_buffers(*g);
  test_train_buckets(*g, "fp32");
  test_train_buckets(*g, "bf16");
  return flotilla_test::summary("gpu_nccl_group");
}
