// bench --device cuda: training throughput on one GPU, MFU against a peak measured in the same run;
// with --lora, full fine-tuning and LoRA of the same model at the same batch, one after the other,
// and their ratios; with --qlora also QLoRA (the same LoRA over the base quantised to NF4). Non-obvious
// decisions: the peak is the best of cuBLASLt bf16 (or fp32) 8192^3 GEMMs timed with CUDA events in this
// process (not a datasheet figure), so MFU is a ratio of two numbers taken on the same GPU, clocks and
// driver; the micro-batch is the largest of a descending list whose predicted footprint
// (GpuTrainer::predicted_bytes; under --lora full fine-tuning's, the larger) fits in cudaMemGetInfo's free
// memory with a 10% margin, and the prediction is printed next to the measured use. LoRA's MFU counts its own
// model FLOPs (the frozen base's forward and input gradients, the adapters' three GEMMs: planner.h
// flops_per_token with the LoRA spec), so the two MFUs compare kernel efficiency and the tokens/s ratio is
// the speed-up.
#include "engine/cuda/bench_cuda.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>

#include <nlohmann/json.hpp>

#include "engine/backend/registry.h"
#include "engine/cli/args.h"
#include "engine/config/config_io.h"
#include "engine/config/presets.h"
#include "engine/core/error.h"
#include "engine/core/rng.h"
#include "engine/cuda/context.h"
#include "engine/cuda/cuda_backend.h"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/gpu_trainer.h"
#include "engine/cuda/matmul.h"
#include "engine/interop/hf_model.h"
#include "engine/model/base_weights.h"
#include "engine/model/lora.h"
#include "engine/plan/planner.h"

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

namespace {

// One model's measurement.
struct BenchRun {
  double step_s = 0, tokens_per_s = 0, model_tflops = 0, mfu = 0;
  size_t used = 0, predicted = 0, trainable = 0;
  size_t peak = 0;  // device memory in use above free_before at the end of any step (workspaces included)
  float first_loss = 0, last_loss = 0;
};

double gib(size_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0); }

size_t predicted_bytes(const ModelDims& d, int B, int T, bool bf16, const LoraSpec& lora) {
  return GpuTrainer::predicted_bytes(d, B, T, bf16, false, 0, 0, {}, 1, false, lora);
}

// The whole adapter vector as PEFT initialises it (A uniform, B zero: the model starts as its base).
std::vector<float> lora_init(const ModelDims& d, const LoraSpec& lora) {
  const ParamLayout table(d, lora);
  std::vector<float> full(table.full_params());
  size_t at = 0;
  for (int i = 0; i < table.size(); ++i) {
    lora_init_tensor(d, lora, i, full.data() + at, table.full_size(i), 1337);
    at += table.full_size(i);
  }
  return full;
}

// warmup + steps training steps of (d, B, T) on `tokens`: full training from `weights` (the whole
// model's fp32 parameters), or with lora.enabled() the adapters on `weights` frozen as the base.
BenchRun run_model(CudaBackend& be, const ModelDims& d, int B, int T, bool bf16, const LoraSpec& lora,
                   const float* weights, const std::vector<int32_t>& tokens, int steps, int warmup,
                   double peak_tflops, bool quiet) {
  Context& ctx = be.context();
  BenchRun r;
  r.predicted = predicted_bytes(d, B, T, bf16, lora);
  size_t free_before = 0, free_after = 0, total = 0;
  ctx.synchronize();
  check_cuda(cudaMemGetInfo(&free_before, &total), "cudaMemGetInfo");
  GpuTrainerOptions o;
  o.bf16 = bf16;
  o.lora = lora;
  GpuTrainer gpt(be, d, B, T, o);
  check_cuda(cudaMemGetInfo(&free_after, &total), "cudaMemGetInfo");
  r.used = free_before > free_after ? free_before - free_after : 0;
  r.trainable = gpt.num_params();
  if (lora.enabled()) {
    gpt.model().set_base_from_full(weights);
    gpt.set_params(lora_init(d, lora).data());
  } else {
    gpt.set_params(weights);
  }
  std::vector<double> times;
  AdamWHyper h;
  h.lr = 1e-4f;
  const char* what = lora.nf4 ? "QLoRA" : lora.enabled() ? "LoRA" : "full";
  for (int s = 0; s < warmup + steps; ++s) {
    const auto t0 = std::chrono::steady_clock::now();
    gpt.model().set_dropout_step(s + 1);
    const float loss = gpt.forward_backward(tokens.data(), tokens.data() + 1);
    gpt.step(h, 1.0f, s + 1);
    ctx.synchronize();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    size_t free_now = 0;
    check_cuda(cudaMemGetInfo(&free_now, &total), "cudaMemGetInfo");
    if (free_before > free_now) r.peak = std::max(r.peak, free_before - free_now);
    if (s == 0) r.first_loss = loss;
    r.last_loss = loss;
    if (s >= warmup) times.push_back(dt);
    if (!quiet)
      std::fprintf(stderr, "%s %s step %d: %.1f ms, loss %.4f\n", what, s < warmup ? "warm-up" : "bench",
                   s + 1, dt * 1e3, loss);
  }
  const double flops = flops_per_token(d, T, lora).palm;  // the planner's formula (docs/planner.md)
  r.step_s = median(times);
  r.tokens_per_s = static_cast<double>(B) * static_cast<double>(T) / r.step_s;
  r.model_tflops = flops * r.tokens_per_s / 1e12;
  r.mfu = r.model_tflops / peak_tflops;
  return r;
}

nlohmann::json run_json(const BenchRun& r) {
  nlohmann::json j;
  j["trainable_params"] = r.trainable;
  j["step_ms_median"] = r.step_s * 1e3;
  j["tokens_per_s"] = r.tokens_per_s;
  j["model_tflops"] = r.model_tflops;
  j["mfu"] = r.mfu;
  j["memory_gib"] = gib(r.used);
  j["peak_memory_gib"] = gib(std::max(r.used, r.peak));
  j["predicted_memory_gib"] = gib(r.predicted);
  j["first_loss"] = r.first_loss;
  j["last_loss"] = r.last_loss;
  return j;
}

void print_run(const char* what, const BenchRun& r, int steps) {
  std::printf(
      "%s: %.2fM trainable; step %.1f ms median of %d, loss %.3f -> %.3f; %.0f tokens/s, %.1f TFLOP/s "
      "model, MFU %.1f%%; memory %.2f GiB (predicted %.2f GiB)\n",
      what, static_cast<double>(r.trainable) / 1e6, r.step_s * 1e3, steps, r.first_loss, r.last_loss,
      r.tokens_per_s, r.model_tflops, r.mfu * 100, gib(r.used), gib(r.predicted));
}

}  // namespace

int cmd_bench_cuda(const std::vector<std::string>& argv) {
  cli::Args args(argv);
  const std::optional<std::string> preset_arg = args.value("--preset");
  const std::optional<std::string> config_path = args.value("--config");
  args.value_or("--device", "cuda");
  const std::string dtype = args.value_or("--dtype", "bf16");
  const int batch_arg = static_cast<int>(args.int_or("--batch", 0));  // 0: largest that fits
  const int T = static_cast<int>(args.int_or("--seq", 1024));
  const int steps = static_cast<int>(args.int_or("--steps", 10));
  const int warmup = static_cast<int>(args.int_or("--warmup", 3));
  const bool json = args.flag("--json");
  // LoRA: --lora, or a --config whose [lora] is enabled; its rank, alpha, dropout and targets from
  // that [lora] (else the config defaults), each overridden by its flag.
  const bool lora_flag = args.flag("--lora");
  // QLoRA: --qlora (or a --config with lora.base_quant = "nf4") adds a third run, the same LoRA over
  // the base quantised to NF4 (lora.double_quant from the config, default true).
  const bool qlora_flag = args.flag("--qlora");
  const std::optional<std::string> lora_rank = args.value("--lora-rank"),
                                   lora_alpha = args.value("--lora-alpha"),
                                   lora_targets = args.value("--lora-targets"),
                                   lora_dropout = args.value("--lora-dropout");
  args.finish("bench");
  if (dtype != "bf16" && dtype != "fp32") throw_usage("--dtype must be bf16 or fp32");
  if (T < 1 || steps < 1 || warmup < 0 || batch_arg < 0) throw_usage("--seq and --steps must be >= 1");
  const bool use_bf16 = dtype == "bf16";

  RunConfig cfg;
  if (config_path) {
    cfg = load_config_file(*config_path);
    if (!cfg.model.init_from.empty()) interop::apply_hf_init_from(cfg);  // the folder's shape
  }
  const bool use_qlora = qlora_flag || (cfg.lora.enabled && cfg.lora.base_quant == "nf4");
  const bool use_lora = lora_flag || use_qlora || cfg.lora.enabled;
  if (!use_lora && (lora_rank || lora_alpha || lora_targets || lora_dropout))
    throw_usage("--lora-rank, --lora-alpha, --lora-targets and --lora-dropout need --lora");
  if (lora_rank) cfg.lora.rank = static_cast<int>(cli::parse_int(*lora_rank, "--lora-rank"));
  if (lora_alpha) cfg.lora.alpha = cli::parse_double(*lora_alpha, "--lora-alpha");
  if (lora_targets) cfg.lora.targets = *lora_targets;
  if (lora_dropout) cfg.lora.dropout = cli::parse_double(*lora_dropout, "--lora-dropout");
  cfg.lora.enabled = use_lora;
  if (use_lora && cfg.lora.rank < 1) throw_usage("--lora-rank must be at least 1");
  if (use_lora && !(cfg.lora.dropout >= 0.0 && cfg.lora.dropout < 1.0))
    throw_usage("--lora-dropout must be in [0, 1)");
  cfg.lora.base_quant = "none";
  const LoraSpec lora = lora_spec(cfg);  // throws naming lora.targets for a bad list
  LoraSpec qlora = lora;
  qlora.nf4 = use_qlora;

  // The model: --preset, else the config's model, else GPT-2 124M (Llama-3.2-1B's shape with --lora).
  std::string preset_name = preset_arg.value_or(use_lora ? "llama3.2-1b" : "gpt2-124m");
  ModelSection shape;
  if (config_path && !preset_arg) {
    preset_name = cfg.model.init_from.empty() ? "config " + *config_path : cfg.model.init_from;
    shape = cfg.model;
    shape.max_seq_len = std::max(shape.max_seq_len, T);
  } else {
    const auto preset = find_model_preset(preset_name);
    if (!preset) throw_usage("unknown preset '" + preset_name + "'");
    shape = preset->shape;
    if (!preset->sets_vocab) shape.vocab_size = 50257;  // GPT-2's tokenizer
    shape.max_seq_len = std::max(preset->sets_vocab ? shape.max_seq_len : 1024, T);
  }
  const ModelDims d = dims_from_config(shape);
  if (use_lora && !d.llama())
    throw_usage("--lora trains the Llama family; " + preset_name +
                " is GPT-2 (use --preset llama-tiny, smollm2-135m, qwen2.5-0.5b, qwen3-0.6b or llama3.2-1b)");
  if (use_lora && lora.rank > std::min(d.n_embd, d.ffn()))
    throw_usage("--lora-rank " + std::to_string(lora.rank) + " exceeds the model width " +
                std::to_string(std::min(d.n_embd, d.ffn())));
  if (use_qlora)
    if (const std::string p = nf4_layout_problem(d, 1); !p.empty()) throw_usage("--qlora: " + p);

  auto& be = dynamic_cast<CudaBackend&>(get_backend("cuda"));
  Context& ctx = be.context();
  if (!json)
    std::fprintf(stderr, "measuring the %s GEMM peak (%d^3)...\n", use_bf16 ? "bf16" : "fp32", kPeakGemmN);
  const double peak_tflops = gemm_peak_tflops(ctx, kPeakGemmN, use_bf16, 5);

  // The batch: the largest whose full fine-tuning fits (under --lora, LoRA's when full never does).
  size_t free_b = 0, total_b = 0;
  check_cuda(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
  auto fits = [&](int b, const LoraSpec& l) {
    return static_cast<double>(predicted_bytes(d, b, T, use_bf16, l)) < 0.9 * static_cast<double>(free_b);
  };
  auto largest = [&](const LoraSpec& l) {
    for (int cand : {64, 48, 32, 24, 16, 12, 8, 4, 2, 1})
      if (fits(cand, l)) return cand;
    return 0;
  };
  int B = batch_arg > 0 ? batch_arg : largest({});
  if (B == 0 && use_lora) B = largest(lora);
  if (B == 0 && use_qlora) B = largest(qlora);
  if (B == 0) throw Error(ExitCode::kOutOfMemory, "bench: not even micro-batch 1 fits in GPU memory");
  const bool run_full = !use_lora || fits(B, LoraSpec{});
  const bool run_lora = use_lora && (!use_qlora || fits(B, lora));

  const size_t N = static_cast<size_t>(B) * static_cast<size_t>(T);
  std::vector<int32_t> tokens(N + 1);
  Rng rng(42);
  for (auto& t : tokens) t = static_cast<int32_t>(rng.below(static_cast<uint64_t>(d.vocab_size)));
  std::vector<float> weights;  // the whole model's initialisation: trained in full, or LoRA's frozen base
  {
    Model init(d);
    init.init_random(1337);
    weights.assign(init.params(), init.params() + init.num_params());
  }
  BenchRun full, adapted, quantised;
  if (run_full)
    full = run_model(be, d, B, T, use_bf16, {}, weights.data(), tokens, steps, warmup, peak_tflops, json);
  if (run_lora)
    adapted =
        run_model(be, d, B, T, use_bf16, lora, weights.data(), tokens, steps, warmup, peak_tflops, json);
  if (use_qlora)  // the same initialisation quantised (Model::set_base_from_full under nf4)
    quantised =
        run_model(be, d, B, T, use_bf16, qlora, weights.data(), tokens, steps, warmup, peak_tflops, json);

  if (json) {
    nlohmann::json j;
    j["preset"] = preset_name;
    j["device"] = "cuda";
    j["describe"] = be.describe();
    j["dtype"] = dtype;
    j["batch"] = B;
    j["seq_len"] = T;
    j["steps"] = steps;
    j["peak_tflops"] = peak_tflops;
    j["peak_gemm_n"] = kPeakGemmN;
    if (!use_lora) {  // the flat form scripts/gpu-check has always read
      j.update(run_json(full));
      j.erase("trainable_params");
      std::printf("%s\n", j.dump().c_str());
      return 0;
    }
    j["full"] = run_full ? run_json(full) : nlohmann::json(nullptr);
    if (!run_full)
      j["full_skipped"] = "predicted " + std::to_string(gib(predicted_bytes(d, B, T, use_bf16, {}))) +
                          " GiB does not fit in 90% of " + std::to_string(gib(free_b)) + " GiB free";
    j["lora"] = run_lora ? run_json(adapted) : nlohmann::json(nullptr);
    if (run_lora) {
      j["lora"]["rank"] = lora.rank;
      j["lora"]["alpha"] = lora.alpha;
      j["lora"]["dropout"] = lora.dropout;
      j["lora"]["targets"] = lora_targets_text(lora.targets);
    }
    if (run_full && run_lora)
      j["lora_vs_full"] = {{"tokens_per_s", adapted.tokens_per_s / full.tokens_per_s},
                           {"memory", static_cast<double>(adapted.used) / static_cast<double>(full.used)}};
    if (use_qlora) {
      j["qlora"] = run_json(quantised);
      j["qlora"]["double_quant"] = qlora.double_quant;
      j["qlora"]["nf4_base_gib"] = gib(nf4_base_bytes_for(d, {}, qlora, 256));
      if (run_lora)
        j["qlora_vs_lora"] = {
            {"tokens_per_s", quantised.tokens_per_s / adapted.tokens_per_s},
            {"memory", static_cast<double>(quantised.used) / static_cast<double>(adapted.used)}};
      if (run_full)
        j["qlora_vs_full"] = {
            {"tokens_per_s", quantised.tokens_per_s / full.tokens_per_s},
            {"memory", static_cast<double>(quantised.used) / static_cast<double>(full.used)}};
    }
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("bench: preset %s (%s, %.1fM parameters), %s, B=%d T=%d on %s\n", preset_name.c_str(),
              describe_dims(d).c_str(), static_cast<double>(num_parameters_unpadded(d)) / 1e6, dtype.c_str(),
              B, T, be.describe().c_str());
  std::printf("peak: %.1f TFLOP/s measured cuBLASLt %s GEMM %d^3\n", peak_tflops, dtype.c_str(), kPeakGemmN);
  if (!use_lora) {
    std::printf("step: %.1f ms median of %d, loss %.3f -> %.3f\n", full.step_s * 1e3, steps, full.first_loss,
                full.last_loss);
    std::printf("throughput: %.0f tokens/s, %.1f TFLOP/s model (PaLM 6N+12LCT)\n", full.tokens_per_s,
                full.model_tflops);
    std::printf("MFU: %.1f%%\n", full.mfu * 100);
    std::printf("memory: %.2f GiB allocated by the model (predicted %.2f GiB), %.1f GiB free before\n",
                gib(full.used), gib(full.predicted), gib(free_b));
    return 0;
  }
  if (run_full)
    print_run("full fine-tuning", full, steps);
  else
    std::printf(
        "full fine-tuning: not run, predicted %.2f GiB at B=%d does not fit in 90%% of %.2f GiB free\n",
        gib(predicted_bytes(d, B, T, use_bf16, {})), B, gib(free_b));
  char what[256];
  std::snprintf(what, sizeof what, "LoRA r %d, alpha %g, dropout %g on %s", lora.rank, lora.alpha,
                static_cast<double>(lora.dropout), lora_targets_text(lora.targets).c_str());
  if (run_lora)
    print_run(what, adapted, steps);
  else
    std::printf("%s: not run, predicted %.2f GiB at B=%d does not fit in 90%% of %.2f GiB free\n", what,
                gib(predicted_bytes(d, B, T, use_bf16, lora)), B, gib(free_b));
  if (run_full && run_lora)
    std::printf(
        "LoRA / full fine-tuning: %.2fx tokens/s, %.2fx memory (MFU counts each its own model FLOPs: LoRA "
        "4N + 6N_lora + attention)\n",
        adapted.tokens_per_s / full.tokens_per_s,
        static_cast<double>(adapted.used) / static_cast<double>(full.used));
  if (use_qlora) {
    std::snprintf(what, sizeof what, "QLoRA (the same over a 4-bit NF4 base%s, %.2f GiB)",
                  qlora.double_quant ? ", double quantisation" : "",
                  gib(nf4_base_bytes_for(d, {}, qlora, 256)));
    print_run(what, quantised, steps);
    if (run_lora)
      std::printf("QLoRA / LoRA: %.2fx tokens/s, %.2fx memory\n",
                  quantised.tokens_per_s / adapted.tokens_per_s,
                  static_cast<double>(quantised.used) / static_cast<double>(adapted.used));
  }
  return 0;
}

}  // namespace flotilla::cuda
