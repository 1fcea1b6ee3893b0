// flotilla-worker bench: training speed and MFU of a preset against this machine's measured peak.
//
// Non-obvious decision: the peak is measured in the same run with the same thread count (the
// best of OpenBLAS's own threading and our OpenMP split, on 2048^3 before the steps and 4096^3
// after them), so MFU is a ratio of two numbers taken on the same machine state, not a datasheet
// figure; taking the best of both measurements keeps MFU conservative on a noisy machine. Model FLOPs use
// PaLM's 6N + 12*L*C*T per token (N = all parameters except the position table, the LM head
// counted through the tied wte); the 6N + 6*L*C*T variant (causal attention counted once) is
// reported alongside. The big peak measurement runs after the peak RSS is read, so its 200 MB of
// matrices do not show up in the model's peak RSS.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/backend/registry.h"
#include "engine/cli/args.h"
#include "engine/cli/commands.h"
#include "engine/config/presets.h"
#include "engine/core/error.h"
#include "engine/core/rng.h"
#include "engine/cpu/matmul.h"
#include "engine/cpu/simd.h"
#include "engine/plan/planner.h"
#if defined(FLOTILLA_HAVE_CUDA)
#include "engine/cuda/bench_cuda.h"
#endif
#include "engine/model/gpt.h"
#include "engine/train/adamw.h"

namespace flotilla::cli {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// CPU seconds the whole machine spent busy (all processes), from /proc/stat; < 0 if unavailable.
double machine_busy_seconds() {
  std::ifstream in("/proc/stat");
  std::string cpu;
  long long user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  if (!(in >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal) || cpu != "cpu")
    return -1;
  return static_cast<double>(user + nice + system + irq + softirq + steal) /
         static_cast<double>(sysconf(_SC_CLK_TCK));
}

double own_cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

struct StepTimes {
  std::vector<double> total, forward, backward, optimizer;
};

const char* kHelp =
    "Usage: flotilla-worker bench [--preset tiny|small|gpt2-124m|...] [--device cpu] [--threads N]\n"
    "                             [--batch B] [--seq T] [--steps S] [--warmup W] [--profile] [--json]\n\n"
    "Measures, in one run, training steps of a GPT-2 preset on the CPU (forward, backward, global\n"
    "norm clipping and AdamW on random tokens; median of S steps after W warm-up steps) and the\n"
    "machine's fp32 matmul peak (best sgemm on 2048^3 and 4096^3 with the same threads), then prints\n"
    "ms/step, tokens/s, model FLOP/s and MFU = model FLOP/s / measured peak.\n"
    "FLOPs per token: PaLM 6N + 12*L*C*T (used for MFU) and 6N + 6*L*C*T, N = parameters without\n"
    "the position embeddings (the tied LM head counted once through wte).\n"
    "Defaults: --preset small --batch 8 --seq 256 --steps 10 --warmup 2 --threads 0 (all cores),\n"
    "vocabulary 50257. --profile adds time per kernel family; --json prints one JSON object.\n";

}  // namespace

int cmd_bench(const CommandArgs& argv) {
  Args args(argv);
  if (args.flag("--help")) {
    std::fputs(kHelp, stdout);
    return 0;
  }
#if defined(FLOTILLA_HAVE_CUDA)
  if (Args(argv).value_or("--device", "cpu") == "cuda")
    return cuda::cmd_bench_cuda(argv);  // engine/cuda/bench_cuda.cpp
#endif
  const std::string preset_name = args.value_or("--preset", "small");
  const std::string device = args.value_or("--device", "cpu");
  const int threads = static_cast<int>(args.int_or("--threads", 0));
  const int B = static_cast<int>(args.int_or("--batch", 8));
  const int T = static_cast<int>(args.int_or("--seq", 256));
  const int steps = static_cast<int>(args.int_or("--steps", 10));
  const int warmup = static_cast<int>(args.int_or("--warmup", 2));
  const bool profile = args.flag("--profile");
  const bool json = args.flag("--json");
  args.finish("bench");

  const auto preset = find_model_preset(preset_name);
  if (!preset) {
    std::string names;
    for (const auto& p : model_presets()) names += (names.empty() ? "" : ", ") + std::string(p.name);
    throw_usage("unknown preset '" + preset_name + "' (presets: " + names + ")");
  }
  if (B < 1 || T < 1 || steps < 1 || warmup < 0 || threads < 0)
    throw_usage("--batch, --seq and --steps must be >= 1, --warmup and --threads >= 0");

  Backend& backend = get_backend(device);
  backend.set_threads(threads);

  ModelSection shape = preset->shape;
  if (!preset->sets_vocab) shape.vocab_size = 50257;  // GPT-2's tokenizer
  shape.max_seq_len = std::max(preset->sets_vocab ? shape.max_seq_len : 1024, T);
  const ModelDims d = dims_from_config(shape);

  // First peak measurement on small matrices (48 MB, below any model's footprint so it cannot
  // set the peak RSS); the second, after the steps, on 4096^3. The larger of the two is the peak.
  if (!json) std::fprintf(stderr, "measuring the sgemm peak (2048^3, %d threads)...\n", backend.threads());
  const double peak_before = cpu::sgemm_peak_gflops(2048, 4, backend.threads());

  GptModel model(d);
  model.init_random(1337);
  AdamW opt(model.num_params());
  const auto ranges = gpt_decay_ranges(d);
  const OptimHyper hyper;
  const size_t N = static_cast<size_t>(B) * static_cast<size_t>(T);
  std::vector<int32_t> tokens(N + 1);
  Rng rng(42);
  for (auto& t : tokens) t = static_cast<int32_t>(rng.below(static_cast<uint64_t>(d.vocab_size)));

  StepTimes times;
  float first_loss = 0, last_loss = 0;
  // Other processes' CPU use during the timed steps: on a shared machine it explains a low figure.
  double busy0 = 0, own0 = 0;
  Clock::time_point timed0;
  for (int s = 0; s < warmup + steps; ++s) {
    if (s == warmup) {
      backend.reset_profile();
      busy0 = machine_busy_seconds();
      own0 = own_cpu_seconds();
      timed0 = Clock::now();
    }
    backend.set_profiling(profile && s >= warmup);
    const auto t0 = Clock::now();
    model.zero_grad();
    const float loss = model.forward(tokens.data(), tokens.data() + 1, B, T);
    const double t_fwd = seconds_since(t0);
    model.backward(1.0f);
    const double t_bwd = seconds_since(t0) - t_fwd;
    const float norm = global_grad_norm(model.grads(), model.num_params());
    if (norm > 1.0f) scale_grads(model.grads(), model.num_params(), 1.0f / norm);
    opt.step(model.params(), model.grads(), ranges, 1e-4f, hyper, s + 1);
    backend.synchronize();
    const double t_all = seconds_since(t0);
    if (s == 0) first_loss = loss;
    last_loss = loss;
    if (s >= warmup) {
      times.total.push_back(t_all);
      times.forward.push_back(t_fwd);
      times.backward.push_back(t_bwd);
      times.optimizer.push_back(t_all - t_fwd - t_bwd);
    }
    if (!json)
      std::fprintf(stderr, "%s step %d/%d: %.1f ms, loss %.4f\n", s < warmup ? "warm-up" : "bench", s + 1,
                   warmup + steps, t_all * 1e3, loss);
  }
  backend.set_profiling(false);
  const double timed_wall = seconds_since(timed0);
  const double busy1 = machine_busy_seconds();
  const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  const double other_load = busy0 < 0 || busy1 < 0 || cpus < 1
                                ? 0.0
                                : std::max(0.0, (busy1 - busy0 - (own_cpu_seconds() - own0)) /
                                                    (timed_wall * static_cast<double>(cpus)));
  const auto kernel_times = backend.profile();

  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  const double peak_rss_mib = static_cast<double>(ru.ru_maxrss) / 1024.0;
  const double activation_mib = static_cast<double>(model.activation_bytes()) / (1024.0 * 1024.0);

  if (!json) std::fprintf(stderr, "measuring the sgemm peak (4096^3, %d threads)...\n", backend.threads());
  const double peak_gflops = std::max(peak_before, cpu::sgemm_peak_gflops(4096, 3, backend.threads()));

  // One truth for the model's FLOPs: the planner's formulas (docs/planner.md).
  const FlopsPerToken fpt = flops_per_token(d, T);
  const double flops_palm = fpt.palm;
  const double flops_causal = fpt.llmc;
  const double step_s = median(times.total);
  const double tokens_per_s = static_cast<double>(N) / step_s;
  const double model_gflops = flops_palm * tokens_per_s / 1e9;
  const double mfu = model_gflops / peak_gflops;

  if (json) {
    nlohmann::json j;
    j["preset"] = preset_name;
    j["device"] = device;
    j["arch"] = arch_name(d.arch);
    j["n_layer"] = d.n_layer;
    j["n_head"] = d.n_head;
    j["n_embd"] = d.n_embd;
    j["vocab_size"] = d.vocab_size;
    j["batch"] = B;
    j["seq_len"] = T;
    j["threads"] = backend.threads();
    j["simd"] = cpu::simd_level();
    j["blas_core"] = cpu::blas_core_name();
    j["blas"] = cpu::blas_description();
    j["steps"] = steps;
    j["warmup"] = warmup;
    j["parameters"] = num_parameters_unpadded(d);
    j["flops_parameters"] = static_cast<double>(fpt.n_palm);
    j["flops_per_token_palm"] = flops_palm;
    j["flops_per_token_6n_6lct"] = flops_causal;
    j["step_ms_median"] = step_s * 1e3;
    j["forward_ms_median"] = median(times.forward) * 1e3;
    j["backward_ms_median"] = median(times.backward) * 1e3;
    j["optimizer_ms_median"] = median(times.optimizer) * 1e3;
    j["step_ms_min"] = *std::min_element(times.total.begin(), times.total.end()) * 1e3;
    j["other_cpu_load"] = other_load;
    j["tokens_per_s"] = tokens_per_s;
    j["model_gflops"] = model_gflops;
    j["peak_gflops"] = peak_gflops;
    j["mfu"] = mfu;
    j["mfu_6n_6lct"] = flops_causal * tokens_per_s / 1e9 / peak_gflops;
    j["peak_rss_mib"] = peak_rss_mib;
    j["activation_mib"] = activation_mib;
    j["first_loss"] = first_loss;
    j["last_loss"] = last_loss;
    if (profile) {
      nlohmann::json k = nlohmann::json::object();
      for (const auto& kt : kernel_times) k[kt.family] = kt.seconds * 1e3 / steps;
      j["kernel_ms_per_step"] = k;
    }
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("bench: preset %s (%s, %.1fM parameters), B=%d T=%d, vocab %d\n", preset_name.c_str(),
              describe_dims(d).c_str(), static_cast<double>(num_parameters_unpadded(d)) / 1e6, B, T,
              d.vocab_size);
  std::printf("backend: %s\n", backend.describe().c_str());
  std::printf(
      "step: %.1f ms median of %d, best %.1f (forward %.1f, backward %.1f, optimizer %.1f), loss %.3f -> "
      "%.3f\n",
      step_s * 1e3, steps, *std::min_element(times.total.begin(), times.total.end()) * 1e3,
      median(times.forward) * 1e3, median(times.backward) * 1e3, median(times.optimizer) * 1e3, first_loss,
      last_loss);
  std::printf(
      "throughput: %.0f tokens/s, %.1f GFLOP/s model (PaLM 6N+12LCT = %.1f MFLOP/token; "
      "6N+6LCT = %.1f)\n",
      tokens_per_s, model_gflops, flops_palm / 1e6, flops_causal / 1e6);
  std::printf("peak: %.1f GFLOP/s measured sgemm (best of 2048^3 and 4096^3), %d threads, BLAS kernel %s\n",
              peak_gflops, backend.threads(), cpu::blas_core_name().c_str());
  std::printf("MFU: %.1f%% (PaLM), %.1f%% (6N+6LCT)\n", mfu * 100,
              flops_causal * tokens_per_s / 1e9 / peak_gflops * 100);
  std::printf("memory: peak RSS %.0f MiB, activations %.0f MiB\n", peak_rss_mib, activation_mib);
  std::printf("other processes used %.0f%% of the CPUs during the timed steps%s\n", other_load * 100,
              other_load > 0.05 ? ": the figures above understate this machine; rerun when it is idle" : "");
  if (profile) {
    std::printf("time per step by kernel family:\n");
    double sum = 0;
    for (const auto& kt : kernel_times) sum += kt.seconds;
    for (const auto& kt : kernel_times)
      std::printf("  %-22s %8.1f ms  %5.1f%%  (%ld calls)\n", kt.family.c_str(), kt.seconds * 1e3 / steps,
                  sum > 0 ? kt.seconds / sum * 100 : 0.0, kt.calls / steps);
  }
  return 0;
}

}  // namespace flotilla::cli
