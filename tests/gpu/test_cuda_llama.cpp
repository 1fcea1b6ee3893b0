// The Llama architecture on the GPU (the one Model on the CUDA backend) against transformers: the
// three golden models in fp32 with the CPU test's checks and tolerances (tests/tools/hf_golden.h),
// then in bf16 storage, where the loss stays within 2% of the CPU fp32 model's and the whole
// gradient within 5% (relative L2) of it. Skips without a device.
#include <cmath>

#include "engine/backend/registry.h"
#include "gpu_test_util.h"
#include "hf_golden.h"

using namespace flotilla;

int main() {
  if (gpu_test::skip_without_gpu()) return flotilla_test::summary("test_cuda_llama");
  Backend& gpu = get_backend("cuda");
  for (const char* name : {"llama", "qwen2", "qwen3"}) {
    const hf_golden::Golden g = hf_golden::load(name);
    ModelOptions o;
    o.keep_gelu = true;
    Model m(g.dims, {}, &gpu, o);
    hf_golden::check_model(g, m);
    // bf16 storage: one forward and backward against the CPU fp32 model on the same batch.
    const hf_golden::Reference ref(g.dir);
    const std::vector<int32_t> inputs = ref.i32("inputs"), targets = ref.i32("targets");
    Model cpu(g.dims);
    cpu.set_params_from_full(g.full.data());
    cpu.zero_grad();
    const float want = cpu.forward(inputs.data(), targets.data(), 2, 16);
    cpu.backward(1.0f);
    const std::vector<float> want_g = hf_golden::grads_of(cpu);
    o.dtype = DType::kBF16;
    Model half(g.dims, {}, &gpu, o);
    half.set_params_from_full(g.full.data());
    half.zero_grad();
    const float got = half.forward(inputs.data(), targets.data(), 2, 16);
    half.backward(1.0f);
    CHECK_MSG(std::fabs(got - want) <= 2e-2 * std::fabs(want), "%s bf16: loss %.5f vs fp32 %.5f", name, got,
              want);
    // Whole-model bf16 rounding compounds through the layers: compare the gradient as a vector
    // (relative L2 error), not element by element against a one-kernel tolerance.
    const std::vector<float> got_g = hf_golden::grads_of(half);
    double diff = 0, norm = 0;
    for (size_t i = 0; i < want_g.size(); ++i) {
      diff += (double(got_g[i]) - want_g[i]) * (double(got_g[i]) - want_g[i]);
      norm += double(want_g[i]) * want_g[i];
    }
    const double rel = std::sqrt(diff / norm);
    CHECK_MSG(rel <= 5e-2, "%s bf16: gradient relative L2 error %.3g", name, rel);
    std::printf("%-6s bf16: loss %.5f vs fp32 %.5f, gradient relative L2 error %.2e\n", name, got, want, rel);
  }
  return flotilla_test::summary("test_cuda_llama");
}
