// flotilla-worker bench: training speed and MFU of a preset against this machine's physical peak.
//
// Non-obvious decision: MFU divides by the register-only FMA ceiling of the CPU's widest fp32
// width (engine/cpu/peak.h), measured in the same run with the same threads (the higher of that and
// the machine's kept figure), not by the library's sgemm: an sgemm on a narrow kernel made a
// crippled machine read "MFU 88%" (issue 17). The sgemm (on 2048^3 before the steps and 4096^3
// after them) is reported beside it, as is MFU against it. A ceiling outrun by the sgemm or by the
// model is measured again; still outrun, MFU is not reported (a host sharing the cores made it read
// low). MFU is capped at 100%; the steps and the peak carry the other processes' CPU share, and a
// loaded peak is flagged. Model FLOPs use PaLM's
// 6N + 12*L*C*T per token (N = all parameters except the position table, the LM head counted
// through the tied wte); the 6N + 6*L*C*T variant (causal attention counted once) is reported
// alongside. The big sgemm runs after the peak RSS is read, so its 200 MB of matrices do not show
// up in the model's peak RSS. --dtype bf16 runs the CPU's mixed precision (bf16 matmul operands,
// engine/cpu/matmul_bf16.h) and divides by the bf16 dot-product ceiling instead.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/backend/cuda_plugin.h"
#include "engine/backend/registry.h"
#include "engine/cli/args.h"
#include "engine/cli/commands.h"
#include "engine/config/config_io.h"
#include "engine/config/presets.h"
#include "engine/core/cpu_load.h"
#include "engine/core/error.h"
#include "engine/core/rng.h"
#include "engine/cpu/blas.h"
#include "engine/cpu/matmul.h"
#include "engine/cpu/matmul_bf16.h"
#include "engine/cpu/peak.h"
#include "engine/cpu/peak_cache.h"
#include "engine/cpu/simd.h"
#include "engine/model/gpt.h"
#include "engine/model/lora.h"
#include "engine/plan/planner.h"
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

struct StepTimes {
  std::vector<double> total, forward, backward, optimizer;
};

const char* kHelp =
    "Usage: flotilla-worker bench [--preset tiny|small|gpt2-124m|...] [--device cpu] [--threads N]\n"
    "                             [--batch B] [--seq T] [--steps S] [--warmup W] [--dtype fp32|bf16]\n"
    "                             [--profile] [--json]\n\n"
    "Measures, in one run, training steps of a GPT-2 preset on the CPU (forward, backward, global\n"
    "norm clipping and AdamW on random tokens; median of S steps after W warm-up steps) and the\n"
    "machine's ceilings with the same threads (register-only fp32 FMA at the CPU's widest width, the\n"
    "bf16 dot product where present, and the sgemm on 2048^3 and 4096^3), then prints ms/step,\n"
    "tokens/s, model FLOP/s, MFU = model FLOP/s / the dtype's ceiling (capped at 100%) and the same\n"
    "against the sgemm, the CPU model and the kernel path each matmul runs, with a warning when it\n"
    "is narrower than the CPU or the machine was loaded.\n"
    "FLOPs per token: PaLM 6N + 12*L*C*T (used for MFU) and 6N + 6*L*C*T, N = parameters without\n"
    "the position embeddings (the tied LM head counted once through wte).\n"
    "Defaults: --preset small --batch 8 --seq 256 --steps 10 --warmup 2 --threads 0 (all cores),\n"
    "vocabulary 50257, --dtype fp32. --dtype bf16: CPU mixed precision (bf16 matmul operands on oneDNN,\n"
    "fp32 storage and optimizer; needs AVX512_BF16 or AMX), MFU against the bf16 dot-product ceiling.\n"
    "--profile adds time per kernel family; --json prints one JSON object.\n"
    "--logits-chunk-mb X: MiB of LM-head logits computed at once, as train.logits_chunk_mb (1024; 0 = all).\n"
    "--lora trains LoRA adapters on the frozen preset instead (Llama-family presets; --lora-rank R\n"
    "(16), --lora-alpha A (2R), --lora-targets all-linear|attention|mlp|q_proj,...), with MFU on LoRA's\n"
    "FLOPs (4N + 6N_lora + 12LCT: no weight gradients for the frozen base). --vs-full runs the LoRA\n"
    "bench and full fine-tuning of the same model in two child processes (each its own peak RSS) and\n"
    "prints both, the planner's memory for each and LoRA's step speed-up.\n"
    "--device cuda --lora [--lora-rank R --lora-alpha A --lora-targets T --lora-dropout P] [--config F]:\n"
    "full fine-tuning and LoRA of one model on the GPU at one batch, and their ratios (docs/cuda.md);\n"
    "--qlora (or a --config with lora.base_quant = \"nf4\") adds QLoRA, the same LoRA over the base\n"
    "quantised to 4-bit NF4 (the batch: the largest whose full fine-tuning fits, else LoRA's, else\n"
    "QLoRA's; a run that does not fit at it is reported as not run).\n";

}  // namespace

// --vs-full: the LoRA bench and full fine-tuning of the same model, each in a child process of this
// worker (so each peak RSS is its own), then the comparison and the planner's memory for both.
static int bench_lora_vs_full(const CommandArgs& argv) {
  std::vector<std::string> base;
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string a = argv[i];
    if (a == "--vs-full" || a == "--json" || a == "--lora") continue;
    base.push_back(a);
  }
  std::string preset = "small";
  int B = 8, T = 256;
  for (size_t i = 0; i + 1 < base.size(); ++i) {
    if (base[i] == "--preset") preset = base[i + 1];
    if (base[i] == "--batch") B = std::stoi(base[i + 1]);
    if (base[i] == "--seq") T = std::stoi(base[i + 1]);
  }
  struct Result {
    nlohmann::json j;
    bool ok = false;
  };
  char exe[4096];
  const ssize_t len = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (len <= 0) throw Error(ExitCode::kInternal, "bench --vs-full: cannot find this worker's path");
  const std::string self(exe, static_cast<size_t>(len));
  if (self.find('\'') != std::string::npos) throw_usage("bench --vs-full: the worker's path holds a quote");
  auto run = [&](bool with_lora) {
    std::vector<std::string> args = base;
    if (with_lora) args.push_back("--lora");
    args.push_back("--json");
    std::string cmd = "'" + self + "' bench";
    for (const std::string& a : args) cmd += " '" + a + "'";  // our own argv, quoted: no shell metacharacters
    for (const std::string& a : args)
      if (a.find('\'') != std::string::npos) throw_usage("bench: an argument holds a quote");
    std::fprintf(stderr, "bench --vs-full: %s fine-tuning in a child process...\n",
                 with_lora ? "LoRA" : "full");
    Result r;
    std::string out;
    if (FILE* p = ::popen(cmd.c_str(), "r")) {
      char buf[4096];
      size_t n;
      while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
      r.ok = ::pclose(p) == 0;
    }
    const size_t brace = out.rfind("\n{");
    r.j = nlohmann::json::parse(brace == std::string::npos ? out : out.substr(brace + 1), nullptr, false);
    r.ok = r.ok && r.j.is_object();
    if (!r.ok) throw Error(ExitCode::kInternal, "bench --vs-full: the child bench failed:\n" + out);
    return r;
  };
  const Result lo = run(true), full = run(false);
  // The planner's peak memory for each, on this machine (one rank, the bench's batch).
  auto planned = [&](bool with_lora) {
    RunConfig cfg;
    apply_model_preset(cfg, preset);
    cfg.train.micro_batch = B;
    cfg.train.seq_len = T;
    cfg.model.max_seq_len = std::max(cfg.model.max_seq_len, T);
    cfg.train.dtype = lo.j.value("dtype", "fp32");
    if (with_lora) {
      cfg.lora.enabled = true;
      cfg.lora.rank = lo.j.value("lora_rank", 16);
      cfg.lora.alpha = lo.j.value("lora_alpha", 32.0);
      cfg.lora.targets = lo.j.value("lora_targets", std::string("all-linear"));
      cfg.model.init_from = "(bench)";
    }
    const Plan plan = make_plan(cfg, cpu_profile_nominal(lo.j.value("threads", 1)));
    return static_cast<double>(plan.peak().total()) / (1024.0 * 1024.0);
  };
  const double plan_lora = planned(true), plan_full = planned(false);
  auto mfu_text = [](const nlohmann::json& j) {
    if (!j.contains("mfu") || j["mfu"].is_null()) return std::string("MFU not reported");
    char b[64];
    std::snprintf(b, sizeof b, "MFU %.1f%%", 100.0 * j["mfu"].get<double>());
    return std::string(b);
  };
  std::printf("bench --vs-full: preset %s, B=%d T=%d, %d threads, %s; cpu %s, matmuls %s\n", preset.c_str(),
              B, T, lo.j.value("threads", 0), lo.j.value("dtype", "fp32").c_str(),
              lo.j.value("cpu_model", std::string()).c_str(),
              lo.j.value("sgemm_library", std::string()).c_str());
  const double lora_tps = lo.j.value("tokens_per_s", 0.0), full_tps = full.j.value("tokens_per_s", 0.0);
  std::printf(
      "LoRA r %d (%s), %.2fM trainable: %.0f tokens/s, step %.1f ms (forward %.1f, backward %.1f, optimizer "
      "%.1f), %s; peak RSS %.0f MiB (planner %.0f MiB)\n",
      lo.j.value("lora_rank", 0), lo.j.value("lora_targets", std::string()).c_str(),
      lo.j.value("trainable_parameters", 0.0) / 1e6, lora_tps, lo.j.value("step_ms_median", 0.0),
      lo.j.value("forward_ms_median", 0.0), lo.j.value("backward_ms_median", 0.0),
      lo.j.value("optimizer_ms_median", 0.0), mfu_text(lo.j).c_str(), lo.j.value("peak_rss_mib", 0.0),
      plan_lora);
  std::printf(
      "full fine-tuning, %.2fM trainable: %.0f tokens/s, step %.1f ms (forward %.1f, backward %.1f, "
      "optimizer %.1f), %s; peak RSS %.0f MiB (planner %.0f MiB)\n",
      full.j.value("trainable_parameters", 0.0) / 1e6, full_tps, full.j.value("step_ms_median", 0.0),
      full.j.value("forward_ms_median", 0.0), full.j.value("backward_ms_median", 0.0),
      full.j.value("optimizer_ms_median", 0.0), mfu_text(full.j).c_str(), full.j.value("peak_rss_mib", 0.0),
      plan_full);
  std::printf("LoRA step speed-up: %.2fx full fine-tuning (target >= 1.3x); peak RSS %.2fx of full\n",
              full_tps > 0 ? lora_tps / full_tps : 0.0,
              full.j.value("peak_rss_mib", 0.0) > 0
                  ? lo.j.value("peak_rss_mib", 0.0) / full.j.value("peak_rss_mib", 1.0)
                  : 0.0);
  const double load = std::max(lo.j.value("other_cpu_load", 0.0), full.j.value("other_cpu_load", 0.0));
  if (load > 0.05)
    std::printf(
        "other processes used up to %.0f%% of the CPUs during the timed steps: rerun when the machine is "
        "idle\n",
        load * 100);
  return 0;
}

int cmd_bench(const CommandArgs& argv) {
  Args args(argv);
  if (args.flag("--help")) {
    std::fputs(kHelp, stdout);
    return 0;
  }
  if (Args(argv).value_or("--device", "cpu") == "cuda" && cuda_plugin::built())
    return cuda_plugin::require("bench --device cuda").cmd_bench(argv);  // engine/cuda/bench_cuda.cpp
  const std::string preset_name = args.value_or("--preset", "small");
  const std::string device = args.value_or("--device", "cpu");
  const int threads = static_cast<int>(args.int_or("--threads", 0));
  const int B = static_cast<int>(args.int_or("--batch", 8));
  const int T = static_cast<int>(args.int_or("--seq", 256));
  const int steps = static_cast<int>(args.int_or("--steps", 10));
  const int warmup = static_cast<int>(args.int_or("--warmup", 2));
  const bool profile = args.flag("--profile");
  const bool json = args.flag("--json");
  const std::string dtype = args.value_or("--dtype", "fp32");
  const bool lora = args.flag("--lora");
  const bool vs_full = args.flag("--vs-full");
  const int rank = static_cast<int>(args.int_or("--lora-rank", 16));
  const double alpha = args.double_or("--lora-alpha", 2.0 * rank);
  const std::string targets = args.value_or("--lora-targets", "all-linear");
  const double chunk_mb = args.double_or("--logits-chunk-mb", TrainSection{}.logits_chunk_mb);
  args.finish("bench");
  if (vs_full) return bench_lora_vs_full(argv);
  if (dtype != "fp32" && dtype != "bf16")
    throw_usage("--dtype " + dtype + " is not supported; use fp32 or bf16");
  const bool bf16 = dtype == "bf16";

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
  backend.set_matmul_dtype(bf16 ? DType::kBF16 : DType::kF32);  // refuses bf16 on a CPU without it

  ModelSection shape = preset->shape;
  if (!preset->sets_vocab) shape.vocab_size = 50257;  // GPT-2's tokenizer
  shape.max_seq_len = std::max(preset->sets_vocab ? shape.max_seq_len : 1024, T);
  const ModelDims d = dims_from_config(shape);
  LoraSpec spec;
  if (lora) {
    if (!d.llama())
      throw_usage("--lora trains the Llama family; pick a Llama-family --preset (e.g. smollm2-135m)");
    if (rank < 1) throw_usage("--lora-rank must be at least 1");
    if (!(alpha > 0)) throw_usage("--lora-alpha must be > 0");
    spec.rank = rank;
    spec.alpha = alpha;
    spec.targets = parse_lora_targets(targets);
  }
  ModelOptions model_options;
  model_options.lora = spec;
  if (!(chunk_mb >= 0)) throw_usage("--logits-chunk-mb must be >= 0 (0: the whole logits at once)");
  model_options.logits_chunk_rows =
      logits_chunk_rows(d, ModelShard{}, sizeof(float), chunk_mb, static_cast<long>(B) * T);

  // First peak measurement on small matrices (48 MB, below any model's footprint so it cannot
  // set the peak RSS); the second, after the steps, on 4096^3. The larger of the two is the peak.
  if (!json)
    std::fprintf(stderr, "measuring the FMA ceilings and the sgemm peak (2048^3, %d threads)...\n",
                 backend.threads());
  cpu::CpuPeak ceiling = cpu::measure_cpu_peak(backend.threads(), 0.4, true);
  cpu::store_peak(cpu::peak_cache_path(), ceiling);  // kept for `train` only when trusted
  const double peak_before = ceiling.sgemm_gflops;

  Model model(d, ModelShard{}, nullptr, model_options);
  model.init_random(1337);
  AdamW opt(model.backend(), param_groups(model), 0, model.num_params());
  AdamWHyper hyper;
  hyper.lr = 1e-4f;
  const size_t N = static_cast<size_t>(B) * static_cast<size_t>(T);
  std::vector<int32_t> tokens(N + 1);
  Rng rng(42);
  for (auto& t : tokens) t = static_cast<int32_t>(rng.below(static_cast<uint64_t>(d.vocab_size)));

  StepTimes times;
  float first_loss = 0, last_loss = 0;
  // Other processes' CPU use during the timed steps: on a shared machine it explains a low figure.
  std::optional<LoadWindow> load;
  // This process's CPU seconds over the timed steps: with one thread a busy machine stretches the
  // wall time but not the CPU time (no spinning at barriers), so the planner is checked on it
  // (scripts/plan-vs-measured --cpu-time).
  const auto process_cpu_s = [] {
    rusage r{};
    getrusage(RUSAGE_SELF, &r);
    return static_cast<double>(r.ru_utime.tv_sec + r.ru_stime.tv_sec) +
           static_cast<double>(r.ru_utime.tv_usec + r.ru_stime.tv_usec) * 1e-6;
  };
  double cpu_at_warmup = 0;
  for (int s = 0; s < warmup + steps; ++s) {
    if (s == warmup) {
      backend.reset_profile();
      load.emplace();
      cpu_at_warmup = process_cpu_s();
    }
    backend.set_profiling(profile && s >= warmup);
    const auto t0 = Clock::now();
    model.zero_grad();
    const float loss = model.forward(tokens.data(), tokens.data() + 1, B, T);
    const double t_fwd = seconds_since(t0);
    model.backward(1.0f);
    const double t_bwd = seconds_since(t0) - t_fwd;
    // Clipping at 1.0 as `train` clips (decide_step): the factor is applied as AdamW reads each
    // gradient, not by a separate pass over them (a 121 MB read and write for `small`).
    const float norm = global_grad_norm(model.grads(), model.num_params());
    AdamW::Step update;
    update.params = model.params();
    update.grads = model.grads();
    if (norm > 1.0f) update.grad_scale = static_cast<float>(1.0 / static_cast<double>(norm));
    opt.step(update, hyper, s + 1);
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
  const double cpu_s_per_step = (process_cpu_s() - cpu_at_warmup) / steps;
  const double other_load = load ? load->other_load() : 0.0;
  const auto kernel_times = backend.profile();

  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  const double peak_rss_mib = static_cast<double>(ru.ru_maxrss) / 1024.0;
  const double activation_mib = static_cast<double>(model.activation_bytes()) / (1024.0 * 1024.0);

  if (!json) std::fprintf(stderr, "measuring the sgemm peak (4096^3, %d threads)...\n", backend.threads());
  const double peak_gflops = std::max(peak_before, cpu::sgemm_peak_gflops(4096, 3, backend.threads()));

  // One truth for the model's FLOPs: the planner's formulas (docs/planner.md).
  const FlopsPerToken fpt = flops_per_token(d, T, spec);
  const double flops_palm = fpt.palm;
  const double flops_causal = fpt.llmc;
  const double step_s = median(times.total);
  const double tokens_per_s = static_cast<double>(N) / step_s;
  const double model_gflops = flops_palm * tokens_per_s / 1e9;
  // The ceiling is the larger of this run's reading and the machine's kept one, measured again when
  // something in this run outran it (the sgemm, or the model itself): a core shared at the host
  // reads low and no counter of this OS shows it (engine/cpu/peak.h). If it is still outrun, MFU is
  // not reported: a capped 100% would be a number that cannot be true.
  const auto merge = [&ceiling](const cpu::CpuPeak& p) {
    ceiling.fp32_fma_gflops = std::max(ceiling.fp32_fma_gflops, p.fp32_fma_gflops);
    ceiling.bf16_dot_gflops = std::max(ceiling.bf16_dot_gflops, p.bf16_dot_gflops);
  };
  const std::string kept_at = cpu::peak_cache_path();
  const auto kept = cpu::load_cached_peak(kept_at, ceiling.cpu_model, ceiling.threads);
  if (kept) merge(*kept);
  const auto outrun = [&] {
    return ceiling.fp32_fma_gflops < peak_gflops || model_gflops > cpu::ceiling_flops(ceiling, dtype) / 1e9;
  };
  int remeasured = 0;
  for (; remeasured < 2 && outrun(); ++remeasured) {
    if (!json)
      std::fprintf(stderr, "the FMA ceiling read below this run's own speed: measuring it again...\n");
    cpu::CpuPeak again = cpu::measure_cpu_peak(backend.threads(), 0.8, false);
    again.sgemm_gflops = peak_gflops;
    again.contended = again.fp32_fma_gflops < peak_gflops;
    cpu::store_peak(kept_at, again);
    merge(again);
  }
  const bool ceiling_low = outrun();
  const double fma_gflops = ceiling.fp32_fma_gflops;
  const double ceiling_gflops = cpu::ceiling_flops(ceiling, dtype) / 1e9;  // the dtype's ceiling
  const double mfu = ceiling_low ? 0.0 : cpu::mfu_ratio(model_gflops, ceiling_gflops);
  const double mfu_causal =
      ceiling_low ? 0.0 : cpu::mfu_ratio(flops_causal * tokens_per_s / 1e9, ceiling_gflops);
  const double of_sgemm = peak_gflops > 0 ? model_gflops / peak_gflops : 0.0;
  const cpu::BlasInfo& blas = cpu::blas_info();
  const cpu::CpuFeatures& features = cpu::cpu_features();
  const cpu::KernelChoice cpu_choice = cpu::choose_kernel_path(features);  // the CPU's own widest paths
  const bool narrow = static_cast<int>(blas.sgemm_path) < static_cast<int>(cpu_choice.fp32);

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
    j["dtype"] = dtype;
    j["simd"] = cpu::simd_level();
    j["blas_core"] = cpu::blas_core_name();
    j["blas"] = cpu::blas_description();
    j["cpu_model"] = features.brand;
    j["cpu_features"] = cpu::describe_features(features);
    j["kernel_path_widest"] = cpu::kernel_path_name(cpu_choice.widest);
    j["matmul_path"] = cpu::kernel_path_name(blas.sgemm_path);
    j["matmul_path_narrower_than_cpu"] = narrow;
    j["sgemm_library"] = blas.sgemm_library;
    j["sgemm_choice"] = blas.sgemm_choice;
    if (bf16) j["bf16_matmul_path"] = cpu::bf16_matmul_path();
    j["mfu_ceiling_gflops"] = ceiling_gflops;
    j["fp32_fma_gflops"] = fma_gflops;
    j["fp32_isa"] = ceiling.fp32_isa;
    j["bf16_dot_gflops"] = ceiling.bf16_dot_gflops;
    j["peak_other_cpu_load"] = ceiling.other_load;
    j["steps"] = steps;
    j["warmup"] = warmup;
    j["parameters"] = num_parameters_unpadded(d);
    j["trainable_parameters"] = lora ? lora_parameter_count(d, spec) : num_parameters_unpadded(d);
    j["training"] = lora ? "lora" : "full";
    if (lora) {
      j["lora_rank"] = rank;
      j["lora_alpha"] = alpha;
      j["lora_targets"] = lora_targets_text(spec.targets);
    }
    j["flops_parameters"] = static_cast<double>(fpt.n_palm);
    j["flops_per_token_palm"] = flops_palm;
    j["flops_per_token_6n_6lct"] = flops_causal;
    j["step_ms_median"] = step_s * 1e3;
    j["forward_ms_median"] = median(times.forward) * 1e3;
    j["backward_ms_median"] = median(times.backward) * 1e3;
    j["optimizer_ms_median"] = median(times.optimizer) * 1e3;
    j["step_ms_min"] = *std::min_element(times.total.begin(), times.total.end()) * 1e3;
    j["cpu_ms_per_step"] = cpu_s_per_step * 1e3;  // this process's CPU time per timed step
    j["other_cpu_load"] = other_load;
    j["tokens_per_s"] = tokens_per_s;
    j["model_gflops"] = model_gflops;
    j["peak_gflops"] = peak_gflops;  // the sgemm
    if (ceiling_low) {               // no MFU rather than a capped one (above)
      j["mfu"] = nullptr;
      j["mfu_6n_6lct"] = nullptr;
      j["mfu_unknown"] = "the ceiling read below this run's own speed (cores shared at the host)";
    } else {
      j["mfu"] = mfu;  // against the dtype's ceiling (fp32 FMA or bf16 dot)
      j["mfu_6n_6lct"] = mfu_causal;
    }
    j["ceiling_from_cache"] = kept.has_value();
    j["ceiling_remeasured"] = remeasured;
    j["fraction_of_sgemm"] = of_sgemm;
    j["peak_rss_mib"] = peak_rss_mib;
    j["logits_chunk_rows"] = model_options.logits_chunk_rows;
    j["activation_mib"] = activation_mib;
    j["first_loss"] = first_loss;
    j["last_loss"] = last_loss;
    if (profile) {
      nlohmann::json k = nlohmann::json::object();
      nlohmann::json kc = nlohmann::json::object();
      for (const auto& kt : kernel_times) {
        k[kt.family] = kt.seconds * 1e3 / steps;
        if (kt.cpu_seconds >= 0) kc[kt.family] = kt.cpu_seconds * 1e3 / steps;
      }
      j["kernel_ms_per_step"] = k;
      if (!kc.empty()) j["kernel_cpu_ms_per_step"] = kc;
    }
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("bench: preset %s (%s, %.1fM parameters), B=%d T=%d, vocab %d, %s\n", preset_name.c_str(),
              describe_dims(d).c_str(), static_cast<double>(num_parameters_unpadded(d)) / 1e6, B, T,
              d.vocab_size, bf16 ? "bf16 mixed precision (bf16 matmul operands, fp32 storage)" : "fp32");
  if (lora)
    std::printf("training: LoRA r %d, alpha %g on %s: %.2fM trainable parameters (the base frozen)\n", rank,
                alpha, lora_targets_text(spec.targets).c_str(),
                static_cast<double>(lora_parameter_count(d, spec)) / 1e6);
  std::printf("backend: %s\n", backend.describe().c_str());
  std::printf(
      "step: %.1f ms median of %d, best %.1f (forward %.1f, backward %.1f, optimizer %.1f), loss %.3f -> "
      "%.3f\n",
      step_s * 1e3, steps, *std::min_element(times.total.begin(), times.total.end()) * 1e3,
      median(times.forward) * 1e3, median(times.backward) * 1e3, median(times.optimizer) * 1e3, first_loss,
      last_loss);
  std::printf(
      "throughput: %.0f tokens/s, %.1f GFLOP/s model (PaLM %s = %.1f MFLOP/token; "
      "%s = %.1f)\n",
      tokens_per_s, model_gflops, lora ? "LoRA 4N+6N_lora+12LCT" : "6N+12LCT", flops_palm / 1e6,
      lora ? "4N+6N_lora+6LCT" : "6N+6LCT", flops_causal / 1e6);
  std::printf("cpu: %s, %s; widest path %s\n", features.brand.c_str(),
              cpu::describe_features(features).c_str(), cpu::kernel_path_name(cpu_choice.widest));
  if (bf16) std::printf("kernels: linear and LM-head matmuls: bf16 on %s\n", cpu::bf16_matmul_path().c_str());
  std::printf(
      "kernels: %s matmuls: %s (%s; %s)%s; other kernels: %s "
      "clones\n",
      bf16 ? "attention" : "linear, attention and LM-head", blas.sgemm_library.c_str(),
      cpu::kernel_path_name(blas.sgemm_path), blas.sgemm_choice.c_str(),
      blas.env_coretype.empty() || blas.env_coretype == blas.loaded_core
          ? ""
          : (", chosen from cpuid over OPENBLAS_CORETYPE=" + blas.env_coretype).c_str(),
      cpu::simd_level());
  if (narrow)
    std::printf("warning: the matmuls run %s, narrower than this CPU's %s%s\n",
                cpu::kernel_path_name(blas.sgemm_path), cpu::kernel_path_name(cpu_choice.fp32),
                blas.preloaded ? " (OpenBLAS was loaded before the engine could choose its core)"
                               : " (FLOTILLA_CPU_PATH narrows it)");
  std::printf(
      "peak: fp32 FMA %.1f GFLOP/s (register-only, %s), bf16 dot %s, sgemm %.1f GFLOP/s (%.0f%% of FMA; "
      "best of 2048^3 and 4096^3), %d threads%s\n",
      fma_gflops, ceiling.fp32_isa.c_str(),
      ceiling.bf16_dot_gflops > 0
          ? (std::to_string(static_cast<int>(ceiling.bf16_dot_gflops)) + " GFLOP/s").c_str()
          : "none",
      peak_gflops, fma_gflops > 0 ? peak_gflops / fma_gflops * 100 : 0.0, backend.threads(),
      ceiling.quiet() ? "" : ", other processes meanwhile: the sgemm reads low; not kept as a peak");
  if (ceiling_low)
    std::printf(
        "MFU: not reported: the %s ceiling read %.1f GFLOP/s, below this run's own speed, after %d "
        "more measurement(s): the cores were shared at the host (invisible to this OS); rerun later\n",
        bf16 ? "bf16 dot" : "fp32 FMA", ceiling_gflops, remeasured);
  else if (bf16)  // against the fp32 sgemm a bf16 run is above 100%, so say it as a multiple
    std::printf(
        "MFU: %.1f%% (PaLM), %.1f%% (6N+6LCT) of the bf16 dot ceiling (%.1f GFLOP/s%s); %.2fx the fp32 "
        "sgemm's speed\n",
        mfu * 100, mfu_causal * 100, ceiling_gflops,
        kept ? ", the higher of this run's and the kept one" : "", of_sgemm);
  else
    std::printf(
        "MFU: %.1f%% (PaLM), %.1f%% (6N+6LCT) of the fp32 FMA ceiling (%.1f GFLOP/s%s); %.1f%% of the "
        "sgemm\n",
        mfu * 100, mfu_causal * 100, ceiling_gflops,
        kept ? ", the higher of this run's and the kept one" : "", of_sgemm * 100);
  std::printf("memory: peak RSS %.0f MiB, activations %.0f MiB; LM head logits in chunks of %d of %d rows\n",
              peak_rss_mib, activation_mib, model_options.logits_chunk_rows, B * T);
  std::printf("other processes used %.0f%% of the CPUs during the timed steps%s\n", other_load * 100,
              other_load > 0.05 ? ": the figures above understate this machine; rerun when it is idle" : "");
  if (profile) {
    std::printf("time per step by kernel family:\n");
    double sum = 0;
    for (const auto& kt : kernel_times) sum += kt.seconds;
    for (const auto& kt : kernel_times) {
      std::printf("  %-22s %8.1f ms  %5.1f%%  (%ld calls)", kt.family.c_str(), kt.seconds * 1e3 / steps,
                  sum > 0 ? kt.seconds / sum * 100 : 0.0, kt.calls / steps);
      if (kt.cpu_seconds >= 0) std::printf("  CPU %8.1f ms", kt.cpu_seconds * 1e3 / steps);
      std::printf("\n");
    }
    double cpu_sum = 0;
    for (const auto& kt : kernel_times) cpu_sum += std::max(kt.cpu_seconds, 0.0);
    if (cpu_sum > 0)
      std::printf(
          "  CPU: this process's CPU time (all threads) %.1f ms per step, %.1f ms of it outside the "
          "families\n",
          cpu_s_per_step * 1e3, cpu_s_per_step * 1e3 - cpu_sum * 1e3 / steps);
  }
  return 0;
}

}  // namespace flotilla::cli
