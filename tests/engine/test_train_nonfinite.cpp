// Issue 33 D21 (audit row 58): a model that gives a non-finite loss at every step trained 3 steps
// at "loss nan", each update skipped (the warning only in metrics.jsonl), and ended "completed",
// exit 0. Now:
// - a Hugging Face folder whose weights are NaN is refused at load (exit 4), naming the tensor;
// - a run whose loss turns non-finite and stays so (optim.lr = 1e30 blows the weights up after
//   the first update) fails after 10 skipped steps in a row (exit 4, never "completed"), with the
//   skip warnings in train.log and on stderr too, and no summary claiming completion;
// - a model non-finite from its first step (a GPT-2 init_from file of NaN weights) in a 3-step run
//   fails at its end (every step of a run shorter than 10), pointing at model.init_from.
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "check.h"
#include "worker_run.h"

using namespace flotilla_test;
namespace fs = std::filesystem;

namespace {

const std::vector<std::string> kEnv = {"OMP_NUM_THREADS=1", "FLOTILLA_PEAK_FLOPS=1e11"};

bool contains(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

// Every tensor of a safetensors file set to NaN (BF16 0x7fc0, F32 0x7fc00000), header unchanged.
void poison(const std::string& path) {
  std::string b = read_file(path);
  uint64_t n = 0;
  std::memcpy(&n, b.data(), 8);
  const auto header = nlohmann::json::parse(b.substr(8, n));
  const size_t base = 8 + n;
  for (const auto& [name, t] : header.items()) {
    if (name == "__metadata__") continue;
    const size_t begin = base + t["data_offsets"][0].get<size_t>(),
                 end = base + t["data_offsets"][1].get<size_t>();
    const std::string dtype = t["dtype"];
    const size_t width = dtype == "BF16" ? 2 : 4;
    for (size_t i = begin; i + width <= end; i += width) {
      if (width == 2) {
        const uint16_t nan = 0x7fc0;
        std::memcpy(&b[i], &nan, 2);
      } else {
        const uint32_t nan = 0x7fc00000u;
        std::memcpy(&b[i], &nan, 4);
      }
    }
  }
  write_text(path, b);
}

void test_nan_hf_folder(const std::string& root) {
  const std::string src = std::string(FLOTILLA_SOURCE_DIR) + "/tests/engine/golden";
  const std::string model = root + "/nan-qwen2";
  fs::copy(src + "/hf/qwen2", model);
  fs::remove(model + "/reference.safetensors");
  poison(model + "/model.safetensors");
  const std::string cfg = root + "/nan.toml";
  write_text(cfg,
             "[run]\nname = \"nan\"\nthreads = 1\n[model]\ninit_from = \"" + model +
                 "\"\n[data]\nsynthetic_tokens = 20000\n[train]\nsteps = 3\nmicro_batch = 2\nseq_len = 16\n");
  const ProcResult r =
      run_worker({"train", "--config", cfg, "--out-dir", root + "/nan-run", "--quiet"}, kEnv);
  CHECK_MSG(r.exit_code == 4, "a folder of NaN weights: exit %d (want 4): %s", r.exit_code, r.output.c_str());
  CHECK_MSG(contains(r.output, "model.embed_tokens.weight") && contains(r.output, "NaN or Inf"), "%s",
            r.output.c_str());
  CHECK_MSG(!fs::exists(root + "/nan-run/checkpoints"), "a refused run wrote checkpoints");
}

void test_nan_mid_run(const std::string& root) {
  const std::string cfg = root + "/blowup.toml", out = root + "/blowup";
  write_text(cfg, R"(
[run]
name = "blowup"
threads = 1
[model]
preset = "custom"
n_layer = 1
n_head = 2
n_embd = 32
vocab_size = 128
max_seq_len = 32
[data]
synthetic_tokens = 20000
[train]
steps = 100
micro_batch = 2
seq_len = 16
grad_clip = 0
[optim]
lr = 1e30
warmup_steps = 0
[checkpoint]
every = 0
)");
  const ProcResult r = run_worker({"train", "--config", cfg, "--out-dir", out, "--no-stdout-metrics"}, kEnv);
  CHECK_MSG(r.exit_code == 4, "a run that only skips updates: exit %d (want 4): %s", r.exit_code,
            r.output.c_str());
  CHECK_MSG(contains(r.output, "not finite for 10 step(s) in a row") && contains(r.output, "stops as failed"),
            "%s", r.output.c_str());
  const std::string log = read_file(out + "/train.log");
  CHECK_MSG(contains(log, "warning: step ") && contains(log, "skipped the update"),
            "the skip warnings are not in train.log: %s", log.c_str());
  CHECK_MSG(contains(r.output, "skipped the update"), "the skip warnings are not on stderr");
  bool summary = false, error = false;
  for (const auto& j : read_metrics(out)) {
    summary |= j.value("type", "") == "summary";
    error |= j.value("type", "") == "event" && j.value("level", "") == "error";
  }
  CHECK_MSG(!summary, "a failed run wrote a summary");
  CHECK_MSG(error, "no error event in metrics.jsonl");
  int64_t last = 0;  // (worker_run.h's last_step reads each loss, null here)
  for (const auto& j : read_metrics(out))
    if (j.value("type", "") == "step") last = j["step"].get<int64_t>();
  CHECK_MSG(last > 1 && last < 100, "trained to step %lld", static_cast<long long>(last));
}

// A GPT-2 init_from file (no load-time check there) of NaN weights, in a run of 3 steps: every step
// is non-finite, so the run fails at its end (fewer than 10 steps) pointing at the weights.
void test_nan_from_the_first_step(const std::string& root) {
  const std::string cfg = root + "/g.toml", first = root + "/g";
  const std::string gpt = R"(
[run]
name = "g"
threads = 1
[model]
preset = "custom"
n_layer = 1
n_head = 2
n_embd = 32
vocab_size = 128
max_seq_len = 32
[data]
synthetic_tokens = 20000
[train]
steps = 3
micro_batch = 2
seq_len = 16
)";
  write_text(cfg, gpt);
  ProcResult r =
      run_worker({"train", "--config", cfg, "--out-dir", first, "--quiet", "--no-stdout-metrics"}, kEnv);
  CHECK_MSG(r.exit_code == 0, "%s", r.output.c_str());
  const std::string weights = root + "/nan.safetensors";
  r = run_worker({"export", "--checkpoint", first, "--format", "safetensors", "--out", weights}, kEnv);
  CHECK_MSG(r.exit_code == 0, "%s", r.output.c_str());
  poison(weights);
  std::string with_init = gpt;
  with_init.insert(with_init.find("n_layer"), "init_from = \"" + weights + "\"\n");
  write_text(cfg, with_init);
  r = run_worker({"train", "--config", cfg, "--out-dir", root + "/g-nan", "--quiet", "--no-stdout-metrics"},
                 kEnv);
  CHECK_MSG(r.exit_code == 4, "NaN from the first step: exit %d (want 4): %s", r.exit_code, r.output.c_str());
  CHECK_MSG(contains(r.output, "not finite for 3 step(s) in a row") &&
                contains(r.output, "from its first step") &&
                contains(r.output, "check the weights of model.init_from (" + weights + ")"),
            "%s", r.output.c_str());
}

}  // namespace

int main() {
  const std::string root = fresh_dir("train-nonfinite");
  test_nan_hf_folder(root);
  test_nan_mid_run(root);
  test_nan_from_the_first_step(root);
  return flotilla_test::summary("test_train_nonfinite");
}
