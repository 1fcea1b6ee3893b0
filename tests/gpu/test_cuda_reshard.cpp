// Resume on another layout with the CUDA train model (issue 32), through the real launcher: the
// device run's checkpoint is its host mirror in the CPU format (engine/train/device_model.h), so the
// trainer's re-cut (rank 0 gathers the saved shards, every rank cuts its own, then the mirror is
// copied to the device) serves the GPU path too. Each chain is compared with one uninterrupted run
// on its first layout by every step's loss, the final parameters and the rows of tokens read
// (harness: tests/engine/test_reshard_util.h):
//   - dp = 2 -> one GPU -> dp = 2 ZeRO-1, fp32, within 1e-4 / 1e-3;
//   - dp = 2 ZeRO-1 -> dp = 2: bitwise (ZeRO-1 on GPUs gives the unsharded bits, test_cuda_dp);
//   - dp = 2 ZeRO-2 -> one GPU; tp = 2 -> one GPU; pp = 2 -> one GPU;
//   - bf16: dp = 2 -> one GPU (the mirror holds the fp32 master weights), within the bf16 bound;
//   - a GPU dp = 2 checkpoint resumed on one CPU process (Gloo, no device), within 1e-4.
// Needs two GPUs (a one-GPU machine prints SKIP); under the simulator it always runs.
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "tests/engine/test_reshard_util.h"

using namespace reshard_test;

namespace {

constexpr int kSteps = 6;

std::string device_config(const std::string& extra_train = "") {
  std::string c = base_config(kSteps);
  c.replace(c.find("[run]\n"), 6, "[run]\ndevice = \"cuda\"\n");
  c.replace(c.find("[parallel]\n"), 11, "[parallel]\nbackend = \"nccl\"\n");
  c.replace(c.find("[optim]\n"), 8, extra_train + "[optim]\n");
  return c;
}

Layout on_cpu(Layout l) {
  l.sets.insert(l.sets.end(), {"run.device=cpu", "parallel.backend=gloo"});
  l.parallel += " (CPU)";
  return l;
}

ChainResult reference(const std::string& root, const std::string& name, const std::string& cfg,
                      const Layout& l) {
  const ChainResult r = chain_run(root, name, cfg, {l}, {}, kSteps);
  CHECK_MSG(r.run.code == 0 && static_cast<int>(r.run.losses.size()) == kSteps, "%s: %s", name.c_str(),
            r.run.output.c_str());
  return r;
}

}  // namespace

int main() {
  if (gpu_test::skip_without_gpu()) return flotilla_test::summary("gpu_cuda_reshard");
  int devices = 0;
  cudaGetDeviceCount(&devices);
  if (devices < 2) {
    std::printf("SKIP: resuming across GPU layouts needs two devices (%d visible)\n", devices);
    return flotilla_test::summary("gpu_cuda_reshard");
  }
  const std::string root = fresh_dir("gpu-cuda-reshard");
  const std::string cfg = device_config();

  const ChainResult dp2 = reference(root, "dp2", cfg, layout(2));
  expect_chain(root, "dp2-dp1-z1", dp2, cfg, {layout(2), layout(1), layout(2, 1, 1, 1)}, {2, 4}, kSteps);
  expect_chain(root, "dp2-cpu", dp2, cfg, {layout(2), on_cpu(layout(1))}, {3}, kSteps);

  const ChainResult z1 = reference(root, "dp2z1", cfg, layout(2, 1, 1, 1));
  const Compared z1z0 = expect_chain(root, "z1-z0", z1, cfg, {layout(2, 1, 1, 1), layout(2)}, {3}, kSteps);
  CHECK_MSG(z1z0.bitwise, "dp=2 ZeRO-1 -> ZeRO-0 on GPUs should be bitwise");

  const ChainResult z2 = reference(root, "dp2z2", cfg, layout(2, 1, 1, 2));
  expect_chain(root, "z2-dp1", z2, cfg, {layout(2, 1, 1, 2), layout(1)}, {3}, kSteps);

  const ChainResult tp2 = reference(root, "tp2", cfg, layout(1, 2));
  expect_chain(root, "tp2-tp1", tp2, cfg, {layout(1, 2), layout(1)}, {3}, kSteps);

  const ChainResult pp2 = reference(root, "pp2", cfg, layout(1, 1, 2));
  expect_chain(root, "pp2-pp1", pp2, cfg, {layout(1, 1, 2), layout(1)}, {3}, kSteps);

  // bf16: the checkpoint holds the fp32 master weights; the bound is the bf16 one of test_cuda_dp.
  const std::string bf16 = device_config("dtype = \"bf16\"\n");
  const ChainResult b2 = reference(root, "bf16-dp2", bf16, layout(2));
  const ChainResult b21 = chain_run(root, "bf16-dp2-dp1", bf16, {layout(2), layout(1)}, {3}, kSteps);
  CHECK_MSG(b21.run.code == 0, "%s", b21.run.output.c_str());
  const Compared cb = compare(b2, b21);
  std::printf("| %-40s | %d | %.2e | %.2e | %s | rows %s |\n", "bf16 dp=2 (3) -> dp=1", kSteps, cb.loss_rel,
              cb.param_abs, cb.bitwise ? "bitwise" : "no", cb.rows_equal ? "equal" : "DIFFER");
  CHECK_MSG(cb.loss_rel < 3e-2 && cb.rows_equal, "bf16 dp=2 -> dp=1: loss %.3g", cb.loss_rel);
  return flotilla_test::summary("gpu_cuda_reshard");
}
