// 20 training steps of the tiny GPT on the GPU (GpuTrainer, fp32 and bf16) against Model on the
// CPU from the same initial parameters and batches: losses step by step, and the final parameters
// relative to how far the CPU run moved them. Then determinism: two fresh GPU runs must give the
// same loss bits and parameter bits. Skips without a device.
#include <cmath>
#include <cstring>
#include <vector>

#include "engine/backend/registry.h"
#include "engine/cuda/cuda_backend.h"
#include "engine/cuda/gpu_trainer.h"
#include "engine/model/gpt.h"
#include "engine/train/adamw.h"
#include "gpu_test_util.h"

namespace fc = flotilla::cuda;
using flotilla::ModelDims;

namespace {

constexpr int kSteps = 20, kB = 4, kT = 64;
constexpr float kLr = 1e-3f, kClip = 1.0f;

ModelDims tiny() {
  ModelDims d;
  d.n_layer = 4;
  d.n_head = 4;
  d.n_embd = 256;
  d.vocab_size = 500;
  d.padded_vocab = flotilla::pad_vocab(d.vocab_size);
  d.max_seq_len = kT;
  return d;
}

// Batch s: a fixed pseudo-random token stream with some structure to learn.
std::vector<int32_t> batch(int s, const ModelDims& d) {
  flotilla::Rng rng(1000 + static_cast<uint64_t>(s));
  std::vector<int32_t> t(static_cast<size_t>(kB) * kT + 1);
  for (size_t i = 0; i < t.size(); ++i)
    t[i] = static_cast<int32_t>(i % 7 == 0 ? rng.below(static_cast<uint64_t>(d.vocab_size)) : (i * 13) % 97);
  return t;
}

struct Run {
  std::vector<float> losses, params;
};

Run run_cpu(const ModelDims& d, const std::vector<float>& init) {
  flotilla::get_backend("cpu").set_threads(0);
  flotilla::Model model(d);
  std::memcpy(model.params(), init.data(), init.size() * sizeof(float));
  flotilla::AdamW opt(model.backend(), flotilla::param_groups(model), 0, model.num_params());
  flotilla::AdamWHyper h;
  h.lr = kLr;
  Run r;
  for (int s = 0; s < kSteps; ++s) {
    const auto t = batch(s, d);
    model.zero_grad();
    r.losses.push_back(model.forward(t.data(), t.data() + 1, kB, kT));
    model.backward(1.0f);
    const float norm = flotilla::global_grad_norm(model.grads(), model.num_params());
    if (norm > kClip) flotilla::scale_grads(model.grads(), model.num_params(), kClip / norm);
    opt.step(model.params(), model.grads(), h, s + 1);
  }
  r.params.assign(model.params(), model.params() + model.num_params());
  return r;
}

Run run_gpu(const ModelDims& d, const std::vector<float>& init, bool bf16) {
  auto& be = dynamic_cast<fc::CudaBackend&>(flotilla::get_backend("cuda"));
  fc::GpuTrainerOptions o;
  o.bf16 = bf16;
  o.fuse_gelu = bf16;  // fp32: separate GELU kernel, closest to the CPU sequence
  fc::GpuTrainer gpt(be, d, kB, kT, o);
  gpt.set_params(init.data());
  flotilla::AdamWHyper h;
  h.lr = kLr;
  Run r;
  for (int s = 0; s < kSteps; ++s) {
    const auto t = batch(s, d);
    r.losses.push_back(gpt.forward_backward(t.data(), t.data() + 1));
    gpt.step(h, kClip, s + 1);
  }
  r.params.resize(init.size());
  gpt.get_params(r.params.data());
  return r;
}

void compare_runs(const char* what, const Run& gpu, const Run& cpu, const std::vector<float>& init, double loss_rtol,
                  double param_rel) {
  for (int s = 0; s < kSteps; ++s) {
    const double a = gpu.losses[static_cast<size_t>(s)], b = cpu.losses[static_cast<size_t>(s)];
    CHECK_MSG(std::fabs(a - b) <= loss_rtol * std::fabs(b), "%s step %d: loss %.6f (gpu) vs %.6f (cpu)", what, s + 1,
              a, b);
  }
  double diff = 0, moved = 0;
  for (size_t i = 0; i < init.size(); ++i) {
    diff += std::pow(static_cast<double>(gpu.params[i]) - cpu.params[i], 2);
    moved += std::pow(static_cast<double>(cpu.params[i]) - init[i], 2);
  }
  const double rel = std::sqrt(diff / moved);
  CHECK_MSG(rel <= param_rel, "%s: |p_gpu - p_cpu| / |p_cpu - p0| = %.4f (limit %.3f)", what, rel, param_rel);
  CHECK(cpu.losses.back() < cpu.losses.front());  // the run learns, so the comparison is not vacuous
  std::printf("  %s: loss %.5f -> %.5f (cpu %.5f -> %.5f), parameter drift %.4f of the update\n", what,
              gpu.losses.front(), gpu.losses.back(), cpu.losses.front(), cpu.losses.back(), rel);
}

}  // namespace

int main() {
  if (gpu_test::skip_without_gpu()) return flotilla_test::summary("gpu_cuda_gpt_steps");
  const ModelDims d = tiny();
  std::vector<float> init(flotilla::num_parameters(d));
  {
    flotilla::Model model(d);
    model.init_random(1337);
    std::memcpy(init.data(), model.params(), init.size() * sizeof(float));
  }
  const Run cpu = run_cpu(d, init);
  const Run f32 = run_gpu(d, init, false);
  compare_runs("fp32 gpu vs cpu", f32, cpu, init, 2e-3, 0.05);
  const Run b16 = run_gpu(d, init, true);
  compare_runs("bf16 gpu vs cpu", b16, cpu, init, 3e-2, 0.5);

  // Deterministic mode: a fresh run repeats every bit.
  const Run f32b = run_gpu(d, init, false);
  CHECK(std::memcmp(f32.losses.data(), f32b.losses.data(), f32.losses.size() * sizeof(float)) == 0);
  CHECK(std::memcmp(f32.params.data(), f32b.params.data(), f32.params.size() * sizeof(float)) == 0);
  const Run b16b = run_gpu(d, init, true);
  CHECK(std::memcmp(b16.losses.data(), b16b.losses.data(), b16.losses.size() * sizeof(float)) == 0);
  CHECK(std::memcmp(b16.params.data(), b16b.params.data(), b16.params.size() * sizeof(float)) == 0);
  return flotilla_test::summary("gpu_cuda_gpt_steps");
}
