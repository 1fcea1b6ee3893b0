// The trainer's device seam (engine/train/device_model.h) on a machine without a GPU:
// - config refusals for what run.device = "cuda" cannot do yet (tp, pp, ZeRO-2, head size), each
//   naming its key; data parallelism (dp > 1, NCCL), ZeRO-1 and train.recompute are accepted;
// - `train` with run.device = "cuda" here exits 3 (config) with a clear reason and writes no step;
// - the device branch of the trainer, driven through the host reference model
//   (FLOTILLA_TEST_DEVICE_MODEL=host: Model + AdamW behind the seam), reproduces the CPU path
//   bit for bit: every step's loss and grad norm, eval losses, the checkpointed parameters and
//   AdamW moments, with gradient accumulation, clipping, eval and sampling on;
// - resume through the seam (stop after 6, new process, continue to 12) equals the straight run,
//   which exercises the host-state functions (get/set params and moments) in both directions.
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "check.h"
#include "engine/config/config_io.h"
#include "engine/config/config_validate.h"
#include "engine/core/error.h"
#include "engine/train/device_model.h"
#include "worker_run.h"

using namespace flotilla_test;
using flotilla::RunConfig;

namespace {

std::string problems_text(const RunConfig& c) {
  std::string out;
  for (const auto& p : flotilla::validate(c, 0)) out += flotilla::to_string(p) + "\n";
  for (const auto& p : flotilla::device_training_problems(c)) out += flotilla::to_string(p) + "\n";
  return out;
}

bool has(const std::string& text, const std::string& piece) { return text.find(piece) != std::string::npos; }

void test_cuda_refusals() {
  auto with = [](std::vector<std::string> sets) {
    RunConfig c;
    sets.push_back("run.device=cuda");
    flotilla::apply_overrides(c, sets);
    return c;
  };
  CHECK_MSG(problems_text(with({})).empty(), "%s", problems_text(with({})).c_str());
  CHECK_MSG(problems_text(with({"train.dtype=bf16", "model.preset=gpt2-124m"})).empty(), "%s",
            problems_text(with({"train.dtype=bf16", "model.preset=gpt2-124m"})).c_str());
  const std::map<std::string, std::vector<std::string>> cases = {
      {"model.n_embd=240", {"model.n_head: ", "= 60", "32, 64 or 128"}},
  };
  for (const auto& [set, pieces] : cases) {
    const std::string text = problems_text(with({set}));
    for (const auto& piece : pieces)
      CHECK_MSG(has(text, piece), "%s: missing [%s] in:\n%s", set.c_str(), piece.c_str(), text.c_str());
  }
  CHECK_MSG(problems_text(with({"parallel.dp=2"})).empty(), "%s", problems_text(with({"parallel.dp=2"})).c_str());
  // Tensor and pipeline parallelism and ZeRO-2 train on GPUs (tests/gpu/test_cuda_tp.cpp,
  // test_cuda_pp.cpp, test_cuda_dp.cpp).
  for (const char* set : {"parallel.tp=2", "parallel.pp=2", "parallel.zero=2"})
    CHECK_MSG(problems_text(with({set})).empty(), "%s: %s", set, problems_text(with({set})).c_str());
  CHECK_MSG(problems_text(with({"parallel.dp=2", "parallel.zero=1"})).empty(), "%s",
            problems_text(with({"parallel.dp=2", "parallel.zero=1"})).c_str());
  CHECK_MSG(problems_text(with({"train.recompute=true"})).empty(), "%s",
            problems_text(with({"train.recompute=true"})).c_str());
  // The same settings stay valid on the CPU.
  RunConfig cpu;
  flotilla::apply_overrides(cpu, {"parallel.tp=2", "parallel.dp=1", "parallel.zero=1"});
  CHECK_MSG(!has(problems_text(cpu), "cuda"), "%s", problems_text(cpu).c_str());
}

std::string config_text() {
  return R"(
[run]
name = "seam"
seed = 11
threads = 1
[model]
preset = "custom"
n_layer = 2
n_head = 4
n_embd = 64
vocab_size = 256
max_seq_len = 64
[data]
source = "synthetic"
synthetic_tokens = 60000
shuffle = true
[train]
steps = 12
micro_batch = 4
seq_len = 32
global_batch_tokens = 256
grad_clip = 0.5
[optim]
lr = 0.003
warmup_steps = 3
schedule = "cosine"
[checkpoint]
every = 6
keep_last = 3
[eval]
every = 4
batches = 2
sample_every = 4
sample_tokens = 4
)";
}

const std::vector<std::string> kEnv = {"OMP_NUM_THREADS=1", "FLOTILLA_PEAK_FLOPS=1e11"};

struct Trace {
  std::map<int64_t, uint32_t> loss_bits, norm_bits, eval_bits;
  int64_t clipped = 0;
};

uint32_t bits(double v) {
  const float f = static_cast<float>(v);
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

Trace trace(const std::string& run) {
  Trace t;
  for (const auto& r : read_metrics(run)) {
    if (r["type"] == "step") {
      const int64_t s = r["step"].get<int64_t>();
      t.loss_bits[s] = bits(r["loss"].get<double>());
      t.norm_bits[s] = bits(r["grad_norm"].get<double>());
      if (r["grad_norm"].get<double>() > 0.5) ++t.clipped;
      CHECK_MSG(!r.contains("gpus"), "a CPU/host-reference step record has a gpus array");
    } else if (r["type"] == "eval") {
      t.eval_bits[r["step"].get<int64_t>()] = bits(r["val_loss"].get<double>());
    }
  }
  return t;
}

void same_state(const std::string& a, const std::string& b, int64_t step, const char* what) {
  for (const char* section : {"params", "adam_m", "adam_v"}) {
    const auto x = checkpoint_section(a, step, section), y = checkpoint_section(b, step, section);
    CHECK_MSG(!x.empty() && x == y, "%s: checkpoint section %s at step %lld differs (%zu vs %zu bytes)", what,
              section, static_cast<long long>(step), x.size(), y.size());
  }
}

void test_seam_matches_cpu(const std::string& dir) {
  write_text(dir + "/run.toml", config_text());
  const std::string cpu = dir + "/cpu", seam = dir + "/seam", resumed = dir + "/resumed";
  auto run = [&](const std::string& out, std::vector<std::string> extra, bool through_seam) {
    std::vector<std::string> args = {"train", "--config", dir + "/run.toml",    "--out-dir",
                                     out,     "--quiet",  "--no-stdout-metrics"};
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<std::string> env = kEnv;
    if (through_seam) env.push_back("FLOTILLA_TEST_DEVICE_MODEL=host");
    const auto r = run_worker(args, env);
    CHECK_MSG(r.exit_code == 0, "train %s exit %d\n%s", out.c_str(), r.exit_code, r.output.c_str());
  };
  run(cpu, {}, false);
  run(seam, {}, true);
  const Trace a = trace(cpu), b = trace(seam);
  CHECK_MSG(a.loss_bits.size() == 12 && a.loss_bits == b.loss_bits, "step losses differ (%zu vs %zu steps)",
            a.loss_bits.size(), b.loss_bits.size());
  CHECK(a.norm_bits == b.norm_bits);
  CHECK_MSG(a.eval_bits.size() == 3 && a.eval_bits == b.eval_bits, "eval losses differ (%zu evals)",
            a.eval_bits.size());
  CHECK_MSG(a.clipped > 0, "clipping never triggered: the test would not cover the clip scale");
  same_state(cpu, seam, 12, "seam vs cpu");
  // The seam's run says which model ran the steps.
  bool said = false;
  for (const auto& r : read_metrics(seam))
    if (r["type"] == "event" && has(r.value("message", std::string()), "training on host reference"))
      said = true;
  CHECK(said);

  // Resume through the seam: the host mirror is pushed to the model after loading and pulled
  // back before saving.
  run(resumed, {"--stop-after", "6"}, true);
  CHECK(last_step(resumed) == 6);
  run(resumed, {}, true);
  const Trace c = trace(resumed);
  CHECK_MSG(c.loss_bits == a.loss_bits, "resumed losses differ from the straight run");
  same_state(cpu, resumed, 12, "resumed seam vs cpu");

  // A seam checkpoint is a CPU checkpoint: export reads it.
  const auto ex = run_worker({"export", "--checkpoint", resumed + "/checkpoints/step-00000012", "--format",
                              "safetensors", "--out", dir + "/m.safetensors"},
                             kEnv);
  CHECK_MSG(ex.exit_code == 0 && std::filesystem::exists(dir + "/m.safetensors"), "export exit %d\n%s",
            ex.exit_code, ex.output.c_str());
}

void test_cuda_train_refused_here(const std::string& dir) {
  write_text(dir + "/run.toml", config_text());
  const auto r = run_worker({"train", "--config", dir + "/run.toml", "--out-dir", dir + "/cuda", "--set",
                             "run.device=cuda", "--set", "model.n_head=2", "--quiet"},
                            kEnv);
  // Without a GPU (or without CUDA in the build) the run is a config error, never a CPU run.
  CHECK_MSG(r.exit_code == static_cast<int>(flotilla::ExitCode::kConfig), "exit %d\n%s", r.exit_code,
            r.output.c_str());
  CHECK_MSG(has(r.output, "no CUDA device") || has(r.output, "not available in this build"), "%s",
            r.output.c_str());
  CHECK(last_step(dir + "/cuda") == 0);
  // A layout CUDA cannot run is refused by validation, naming the key.
  // (checked before any device is touched, so the same message with or without a GPU).
  const auto t = run_worker({"train", "--config", dir + "/run.toml", "--out-dir", dir + "/cuda-rc", "--set",
                             "run.device=cuda", "--set", "model.n_embd=240", "--set", "model.n_head=4", "--quiet"},
                            kEnv);
  CHECK_MSG(t.exit_code == static_cast<int>(flotilla::ExitCode::kConfig) &&
                has(t.output, "for training on run.device = cuda") && has(t.output, "model.n_head:"),
            "exit %d\n%s", t.exit_code, t.output.c_str());
}

}  // namespace

int main() {
  const std::string dir = fresh_dir("train-device-seam");
  test_cuda_refusals();
  test_seam_matches_cpu(dir);
  test_cuda_train_refused_here(dir);
  return flotilla_test::summary("train_device_seam");
}
