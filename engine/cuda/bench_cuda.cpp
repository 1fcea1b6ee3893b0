// bench --device cuda: GPT-2 training throughput on one GPU, MFU against a peak measured in the
// same run. Non-obvious decisions: the peak is the best of cuBLASLt bf16 (or fp32) 8192^3 GEMMs
// timed with CUDA events in this process (not a datasheet figure), so MFU is a ratio of two
// numbers taken on the same GPU, clocks and driver; the micro-batch is the largest of a
// descending list whose predicted footprint (GpuTrainer::predicted_bytes) fits in cudaMemGetInfo's
// free memory with a 10% margin, and the prediction is printed next to the measured use.
#include "engine/cuda/bench_cuda.h"
#include "engine/plan/planner.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "engine/backend/registry.h"
#include "engine/cli/args.h"
#include "engine/config/presets.h"
#include "engine/core/error.h"
#include "engine/core/rng.h"
#include "engine/cuda/context.h"
#include "engine/cuda/cuda_backend.h"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/gpu_trainer.h"
#include "engine/cuda/matmul.h"

namespace flotilla::cuda {
namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

double gemm_peak_tflops(Context& ctx, int n, bool bf16_type, int reps) {
  const size_t count = static_cast<size_t>(n) * static_cast<size_t>(n);
  const size_t es = bf16_type ? 2 : 4;
  void* buf = nullptr;
  check_cuda(cudaMalloc(&buf, 3 * count * es), "cudaMalloc (peak GEMM)");
  check_cuda(cudaMemsetAsync(buf, 0, 3 * count * es, ctx.stream()), "cudaMemsetAsync (peak GEMM)");
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  check_cuda(cudaEventCreate(&e0), "cudaEventCreate");
  check_cuda(cudaEventCreate(&e1), "cudaEventCreate");
  double best = 0;
  auto run = [&] {
    if (bf16_type) {
      auto* p = static_cast<bf16*>(buf);
      gemm<bf16>(ctx, p + 2 * count, p, p + count, n, n, n, true, false, 0.0f);
    } else {
      auto* p = static_cast<float*>(buf);
      gemm<float>(ctx, p + 2 * count, p, p + count, n, n, n, true, false, 0.0f);
    }
  };
  run();  // warm-up (heuristic, clocks)
  for (int r = 0; r < reps; ++r) {
    check_cuda(cudaEventRecord(e0, ctx.stream()), "cudaEventRecord");
    run();
    check_cuda(cudaEventRecord(e1, ctx.stream()), "cudaEventRecord");
    check_cuda(cudaEventSynchronize(e1), "cudaEventSynchronize");
    float ms = 0;
    check_cuda(cudaEventElapsedTime(&ms, e0, e1), "cudaEventElapsedTime");
    best = std::max(best, 2.0 * n * static_cast<double>(n) * n / (static_cast<double>(ms) * 1e-3) / 1e12);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaFree(buf);
  return best;
}

int cmd_bench_cuda(const std::vector<std::string>& argv) {
  cli::Args args(argv);
  const std::string preset_name = args.value_or("--preset", "gpt2-124m");
  args.value_or("--device", "cuda");
  const std::string dtype = args.value_or("--dtype", "bf16");
  const int batch_arg = static_cast<int>(args.int_or("--batch", 0));  // 0: largest that fits
  const int T = static_cast<int>(args.int_or("--seq", 1024));
  const int steps = static_cast<int>(args.int_or("--steps", 10));
  const int warmup = static_cast<int>(args.int_or("--warmup", 3));
  const bool json = args.flag("--json");
  args.finish("bench");
  if (dtype != "bf16" && dtype != "fp32") throw_usage("--dtype must be bf16 or fp32");
  if (T < 1 || steps < 1 || warmup < 0 || batch_arg < 0) throw_usage("--seq and --steps must be >= 1");
  const auto preset = find_model_preset(preset_name);
  if (!preset) throw_usage("unknown preset '" + preset_name + "'");
  const bool use_bf16 = dtype == "bf16";

  auto& be = dynamic_cast<CudaBackend&>(get_backend("cuda"));
  Context& ctx = be.context();
  ModelSection shape = preset->shape;
  if (!preset->sets_vocab) shape.vocab_size = 50257;  // GPT-2's tokenizer
  shape.max_seq_len = std::max(preset->sets_vocab ? shape.max_seq_len : 1024, T);
  const ModelDims d = dims_from_config(shape);

  if (!json)
    std::fprintf(stderr, "measuring the %s GEMM peak (%d^3)...\n", use_bf16 ? "bf16" : "fp32", kPeakGemmN);
  const double peak_tflops = gemm_peak_tflops(ctx, kPeakGemmN, use_bf16, 5);

  size_t free_b = 0, total_b = 0;
  check_cuda(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
  int B = batch_arg;
  if (B == 0) {
    for (int cand : {64, 48, 32, 24, 16, 12, 8, 4, 2, 1}) {
      if (static_cast<double>(GpuTrainer::predicted_bytes(d, cand, T, use_bf16)) <
          0.9 * static_cast<double>(free_b)) {
        B = cand;
        break;
      }
    }
    if (B == 0) throw Error(ExitCode::kOutOfMemory, "bench: not even micro-batch 1 fits in GPU memory");
  }
  const size_t predicted = GpuTrainer::predicted_bytes(d, B, T, use_bf16);
  GpuTrainerOptions o;
  o.bf16 = use_bf16;
  GpuTrainer gpt(be, d, B, T, o);
  size_t free_after = 0;
  check_cuda(cudaMemGetInfo(&free_after, &total_b), "cudaMemGetInfo");
  {
    Model init(d);
    init.init_random(1337);
    gpt.set_params(init.params());
  }
  const size_t N = static_cast<size_t>(B) * static_cast<size_t>(T);
  std::vector<int32_t> tokens(N + 1);
  Rng rng(42);
  for (auto& t : tokens) t = static_cast<int32_t>(rng.below(static_cast<uint64_t>(d.vocab_size)));

  std::vector<double> times;
  float first_loss = 0, last_loss = 0;
  AdamWHyper h;
  h.lr = 1e-4f;
  for (int s = 0; s < warmup + steps; ++s) {
    const auto t0 = std::chrono::steady_clock::now();
    const float loss = gpt.forward_backward(tokens.data(), tokens.data() + 1);
    gpt.step(h, 1.0f, s + 1);
    ctx.synchronize();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s == 0) first_loss = loss;
    last_loss = loss;
    if (s >= warmup) times.push_back(dt);
    if (!json)
      std::fprintf(stderr, "%s step %d: %.1f ms, loss %.4f\n", s < warmup ? "warm-up" : "bench", s + 1,
                   dt * 1e3, loss);
  }
  const double flops_palm = flops_per_token(d, T).palm;  // the planner's formula (docs/planner.md)
  const double step_s = median(times);
  const double tokens_per_s = static_cast<double>(N) / step_s;
  const double model_tflops = flops_palm * tokens_per_s / 1e12;
  const double mfu = model_tflops / peak_tflops;
  const double used_gib = static_cast<double>(free_b - free_after) / (1024.0 * 1024.0 * 1024.0);
  const double predicted_gib = static_cast<double>(predicted) / (1024.0 * 1024.0 * 1024.0);
  if (json) {
    nlohmann::json j;
    j["preset"] = preset_name;
    j["device"] = "cuda";
    j["describe"] = be.describe();
    j["dtype"] = dtype;
    j["batch"] = B;
    j["seq_len"] = T;
    j["steps"] = steps;
    j["step_ms_median"] = step_s * 1e3;
    j["tokens_per_s"] = tokens_per_s;
    j["model_tflops"] = model_tflops;
    j["peak_tflops"] = peak_tflops;
    j["peak_gemm_n"] = kPeakGemmN;
    j["mfu"] = mfu;
    j["memory_gib"] = used_gib;
    j["predicted_memory_gib"] = predicted_gib;
    j["first_loss"] = first_loss;
    j["last_loss"] = last_loss;
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("bench: preset %s (%s, %.1fM parameters), %s, B=%d T=%d on %s\n", preset_name.c_str(),
              describe_dims(d).c_str(), static_cast<double>(num_parameters_unpadded(d)) / 1e6, dtype.c_str(),
              B, T, be.describe().c_str());
  std::printf("step: %.1f ms median of %d, loss %.3f -> %.3f\n", step_s * 1e3, steps, first_loss, last_loss);
  std::printf("throughput: %.0f tokens/s, %.1f TFLOP/s model (PaLM 6N+12LCT)\n", tokens_per_s, model_tflops);
  std::printf("peak: %.1f TFLOP/s measured cuBLASLt %s GEMM %d^3\n", peak_tflops, dtype.c_str(), kPeakGemmN);
  std::printf("MFU: %.1f%%\n", mfu * 100);
  std::printf("memory: %.2f GiB allocated by the model (predicted %.2f GiB), %.1f GiB free before\n",
              used_gib, predicted_gib, static_cast<double>(free_b) / (1024.0 * 1024.0 * 1024.0));
  return 0;
}

}  // namespace flotilla::cuda
