// `flotilla-worker train` with run.device = "cuda" (the trainer's device seam over GpuTrainer),
// through the real worker binary, against the same run on the CPU. Skips without a device.
//   - fp32: 20 steps of the tiny model (2 micro-batches per step, clipping, eval, sampling): every
//     step's loss within kFp32Rel (relative) of the CPU run's; a repeat run is bitwise identical
//     (train.deterministic); the step records carry gpus[{device, mem_bytes, mem_total_bytes}] and
//     an MFU > 0; the start event reports the predicted and the measured device memory.
//   - bf16: the same 20 steps within kBf16Rel of the CPU losses.
//   - train.recompute = true (fp32 and bf16): the same loss bits and final parameters as without,
//     with a smaller measured activation footprint;
//   - the planner's memory figure within 15% of the measured allocation, for all four.
//   - resume: stop after step 10 (checkpoint), a new process resumes on the GPU: steps 11..20 have
//     the straight GPU run's loss bits.
//   - cross-device: the CUDA step-10 checkpoint resumes on the CPU (losses within kFp32Rel of the
//     GPU run) and exports to safetensors.
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "worker_run.h"

using namespace flotilla_test;

namespace {

constexpr double kFp32Rel = 2e-3;  // same bound as the GpuTrainer-vs-Model step test
constexpr double kBf16Rel = 3e-2;

std::string config_text() {
  return R"(
[run]
name = "cuda-train"
seed = 5
[model]
preset = "tiny"
vocab_size = 500
max_seq_len = 64
[data]
source = "synthetic"
synthetic_tokens = 200000
[train]
steps = 20
micro_batch = 4
seq_len = 64
global_batch_tokens = 512
grad_clip = 1.0
[optim]
lr = 0.001
warmup_steps = 2
[checkpoint]
every = 10
keep_last = 3
[eval]
every = 10
batches = 2
sample_every = 10
sample_tokens = 4
)";
}

void train(const std::string& cfg, const std::string& out, std::vector<std::string> extra) {
  std::vector<std::string> args = {"train",   "--config",           cfg, "--out-dir", out,
                                   "--quiet", "--no-stdout-metrics"};
  args.insert(args.end(), extra.begin(), extra.end());
  const auto r = run_worker(args);
  CHECK_MSG(r.exit_code == 0, "train %s exit %d\n%s", out.c_str(), r.exit_code, r.output.c_str());
}

void compare_losses(const char* what, const std::map<int64_t, float>& got,
                    const std::map<int64_t, float>& want, double rel, int64_t from = 1) {
  double worst = 0;
  int64_t n = 0;
  for (const auto& [step, w] : want) {
    if (step < from) continue;
    ++n;
    const auto it = got.find(step);
    CHECK_MSG(it != got.end(), "%s: no step %lld", what, static_cast<long long>(step));
    if (it == got.end()) continue;
    const double err = std::fabs(static_cast<double>(it->second) - w) / std::fabs(static_cast<double>(w));
    worst = std::fmax(worst, err);
    CHECK_MSG(err <= rel, "%s: step %lld loss %.7g vs %.7g (relative %.3g > %.3g)", what,
              static_cast<long long>(step), static_cast<double>(it->second), static_cast<double>(w), err,
              rel);
  }
  CHECK_MSG(n > 0, "%s: no steps compared", what);
  std::printf("  %-34s %lld steps, worst relative loss difference %.3g (bound %.3g)\n", what,
              static_cast<long long>(n), worst, rel);
}

// The planner (plan, the wizard's memory bars) models the same allocation from formulas.
void check_planner(const std::string& run) {
  const double planner = memory_event_bytes(run, "planner_bytes"), measured = memory_event_bytes(run);
  CHECK_MSG(measured > 0 && std::fabs(planner - measured) <= 0.15 * measured, "%s: planner %.0f vs measured %.0f bytes",
            run.c_str(), planner, measured);
}

void check_gpu_records(const std::string& run) {
  int steps = 0;
  bool memory_event = false;
  for (const auto& r : read_metrics(run)) {
    if (r["type"] == "step") {
      ++steps;
      CHECK_MSG(r.contains("gpus") && r["gpus"].is_array() && r["gpus"].size() == 1,
                "step record without gpus");
      if (r.contains("gpus") && r["gpus"].size() == 1) {
        const auto& g = r["gpus"][0];
        CHECK(g["mem_bytes"].get<double>() > 0 &&
              g["mem_total_bytes"].get<double>() >= g["mem_bytes"].get<double>());
        CHECK(g.contains("device"));
      }
      CHECK_MSG(r["mfu"].get<double>() > 0, "mfu %g", r["mfu"].get<double>());
    } else if (r["type"] == "event" && r.contains("predicted_bytes")) {
      memory_event = true;
      const double predicted = std::atof(r["predicted_bytes"].get<std::string>().c_str());
      const double measured = std::atof(r["measured_bytes"].get<std::string>().c_str());
      const double planner = std::atof(r["planner_bytes"].get<std::string>().c_str());
      std::printf("  device memory: predicted %.1f MiB (planner %.1f MiB), measured %.1f MiB\n",
                  predicted / 1048576, planner / 1048576, measured / 1048576);
      CHECK_MSG(predicted > 0 && measured >= 0.9 * predicted && measured <= predicted + 256.0 * 1048576,
                "predicted %.0f vs measured %.0f bytes", predicted, measured);
    }
  }
  CHECK(steps == 20);
  CHECK_MSG(memory_event, "no start event with predicted_bytes / measured_bytes");
}

}  // namespace

int main() {
  if (gpu_test::skip_without_gpu()) return flotilla_test::summary("gpu_cuda_train");
  const std::string dir = fresh_dir("gpu-cuda-train");
  const std::string cfg = dir + "/run.toml";
  write_text(cfg, config_text());

  train(cfg, dir + "/cpu", {});
  train(cfg, dir + "/fp32", {"--set", "run.device=cuda"});
  const auto cpu = step_losses(dir + "/cpu"), fp32 = step_losses(dir + "/fp32");
  CHECK(cpu.size() == 20);
  compare_losses("cuda fp32 vs cpu", fp32, cpu, kFp32Rel);
  check_gpu_records(dir + "/fp32");

  train(cfg, dir + "/fp32-again", {"--set", "run.device=cuda"});
  CHECK_MSG(step_losses(dir + "/fp32-again") == fp32, "two deterministic fp32 GPU runs differ");
  CHECK(checkpoint_section(dir + "/fp32", 20, "params") ==
        checkpoint_section(dir + "/fp32-again", 20, "params"));

  train(cfg, dir + "/bf16", {"--set", "run.device=cuda", "--set", "train.dtype=bf16"});
  compare_losses("cuda bf16 vs cpu", step_losses(dir + "/bf16"), cpu, kBf16Rel);

  // Recomputation rebuilds each block's activations before its backward: the same bits, less memory.
  train(cfg, dir + "/fp32-recompute", {"--set", "run.device=cuda", "--set", "train.recompute=true"});
  CHECK_MSG(step_losses(dir + "/fp32-recompute") == fp32, "fp32 with recompute: losses differ from without");
  CHECK(checkpoint_section(dir + "/fp32-recompute", 20, "params") == checkpoint_section(dir + "/fp32", 20, "params"));
  CHECK_MSG(memory_event_bytes(dir + "/fp32-recompute") < memory_event_bytes(dir + "/fp32"),
            "recompute measured %.0f bytes, without %.0f", memory_event_bytes(dir + "/fp32-recompute"),
            memory_event_bytes(dir + "/fp32"));
  std::printf("  device memory with recompute: %.1f MiB (without: %.1f MiB)\n",
              memory_event_bytes(dir + "/fp32-recompute") / 1048576, memory_event_bytes(dir + "/fp32") / 1048576);
  train(cfg, dir + "/bf16-recompute",
        {"--set", "run.device=cuda", "--set", "train.dtype=bf16", "--set", "train.recompute=true"});
  CHECK_MSG(step_losses(dir + "/bf16-recompute") == step_losses(dir + "/bf16"),
            "bf16 with recompute: losses differ from without");
  for (const char* run : {"/fp32", "/bf16", "/fp32-recompute", "/bf16-recompute"}) check_planner(dir + run);

  // Resume on the GPU: a new process from the step-10 checkpoint.
  train(cfg, dir + "/resume", {"--set", "run.device=cuda", "--stop-after", "10"});
  CHECK(last_step(dir + "/resume") == 10);
  train(cfg, dir + "/resume", {"--set", "run.device=cuda"});
  const auto resumed = step_losses(dir + "/resume");
  for (int64_t s = 11; s <= 20; ++s)
    CHECK_MSG(resumed.count(s) && resumed.at(s) == fp32.at(s), "resumed GPU run: step %lld loss %.9g vs %.9g",
              static_cast<long long>(s), resumed.count(s) ? static_cast<double>(resumed.at(s)) : -1.0,
              static_cast<double>(fp32.at(s)));
  CHECK(checkpoint_section(dir + "/resume", 20, "adam_v") == checkpoint_section(dir + "/fp32", 20, "adam_v"));

  // The CUDA checkpoint is a CPU checkpoint: resume it on the CPU, and export it.
  const std::string ck = dir + "/fp32/checkpoints/step-00000010";
  train(cfg, dir + "/cpu-from-cuda", {"--resume", ck});
  compare_losses("cpu resumed from cuda step 10", step_losses(dir + "/cpu-from-cuda"), fp32, kFp32Rel, 11);
  const auto ex =
      run_worker({"export", "--checkpoint", ck, "--format", "safetensors", "--out", dir + "/m.safetensors"});
  CHECK_MSG(ex.exit_code == 0 && std::filesystem::file_size(dir + "/m.safetensors") > 1000000,
            "export exit %d\n%s", ex.exit_code, ex.output.c_str());
  return flotilla_test::summary("gpu_cuda_train");
}
