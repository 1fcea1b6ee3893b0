// LoRA through the real worker's command line: every bad [lora] value refused before anything
// starts, naming its key; lora.init_from continuing from PEFT's golden adapter (its r, alpha and
// targets taken over; a disagreeing [lora] key refused by name; the adapter imported exactly);
// export --format peft (PEFT's tensors, the checkpoint's values) and --format hf (the base with the
// adapter merged, W + s B A), the formats a LoRA or a full checkpoint cannot give refused with what
// to use instead; and sample from a LoRA checkpoint (base + adapter, unmerged).
#include <filesystem>
#include <string>

#include "check.h"
#include "engine/checkpoint/model_checkpoint.h"
#include "engine/interop/hf_model.h"
#include "engine/interop/peft.h"
#include "engine/interop/safetensors.h"
#include "engine/model/lora.h"
#include "worker_run.h"

using namespace flotilla_test;
namespace fs = std::filesystem;

namespace {

const std::vector<std::string> kEnv = {"OMP_NUM_THREADS=1", "FLOTILLA_PEAK_FLOPS=1e11"};

std::string golden(const std::string& what) {
  return std::string(FLOTILLA_SOURCE_DIR) + "/tests/engine/golden/" + what;
}

std::string config(const std::string& model, const std::string& lora, const std::string& extra = "") {
  return "[run]\nname = \"lora-cli\"\nseed = 4\nthreads = 1\n[model]\n" + model + "[lora]\n" + lora +
         "[data]\nsynthetic_tokens = 20000\n[train]\nsteps = 4\nmicro_batch = 2\nseq_len = 16\n"
         "[optim]\nlr = 0.01\nwarmup_steps = 1\n[eval]\nevery = 0\nbatches = 1\n" +
         extra;
}

ProcResult train(const std::string& dir, const std::string& name, const std::string& text,
                 std::vector<std::string> extra = {}) {
  const std::string cfg = dir + "/" + name + ".toml";
  write_text(cfg, text);
  std::vector<std::string> args = {"train", "--config", cfg, "--out-dir", dir + "/" + name, "--quiet"};
  args.insert(args.end(), extra.begin(), extra.end());
  return run_worker(args, kEnv);
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

void refusals(const std::string& dir) {
  const std::string llama = "init_from = \"" + golden("hf/llama") + "\"\n";
  struct Case {
    std::string model, lora, extra, key, words;
  };
  const std::vector<Case> cases = {
      {llama, "enabled = true\nrank = 0\n", "", "lora.rank", "must be at least 1"},
      {llama, "enabled = true\nalpha = 0.0\n", "", "lora.alpha", "> 0"},
      {llama, "enabled = true\ndropout = 1.0\n", "", "lora.dropout", "[0, 1)"},
      {llama, "enabled = true\ntargets = \"q_proj,c_attn\"\n", "", "lora.targets", "c_attn"},
      {llama, "enabled = true\ntargets = \"q_proj, q_proj\"\n", "", "lora.targets", "twice"},
      {llama, "enabled = true\ntargets = \"lm_head\"\n", "", "lora.targets", "frozen"},
      {llama, "enabled = true\nrank = 100000\n", "", "lora.rank", "exceeds the model width"},
      {"preset = \"llama-tiny\"\nvocab_size = 256\n", "enabled = true\n", "", "lora.enabled",
       "model.init_from"},
      {"preset = \"tiny\"\n", "enabled = true\n", "", "lora.enabled", "Llama family"},
      {llama, "init_from = \"" + golden("lora/llama/adapter") + "\"\n", "", "lora.init_from",
       "lora.enabled = false"},
      {llama, "enabled = true\ninit_from = \"" + golden("hf/llama") + "\"\n", "", "lora.init_from",
       "no adapter_config.json"},
      {llama, "", "[checkpoint]\nexport_peft = \"" + dir + "/never\"\n", "checkpoint.export_peft",
       "lora.enabled = false"},
  };
  int i = 0;
  for (const Case& c : cases) {
    const ProcResult p = train(dir, "bad" + std::to_string(i++), config(c.model, c.lora, c.extra));
    CHECK_MSG(p.exit_code == 3 && has(p.output, c.key) && has(p.output, c.words),
              "%s: exit %d, want 3 naming %s (\"%s\"):\n%s", c.key.c_str(), p.exit_code, c.key.c_str(),
              c.words.c_str(), p.output.c_str());
    CHECK_MSG(!fs::exists(dir + "/bad" + std::to_string(i - 1) + "/checkpoints"), "a refused run started");
  }
}

void continue_from_peft(const std::string& dir) {
  const std::string model = "init_from = \"" + golden("hf/llama") + "\"\n";
  const std::string adapter = golden("lora/llama/adapter");
  // lr 1e-30: the checkpoint after one step holds exactly the imported adapter (no update is visible).
  const ProcResult p =
      train(dir, "continue", config(model, "enabled = true\ninit_from = \"" + adapter + "\"\n"),
            {"--set", "train.steps=1", "--set", "optim.warmup_steps=0", "--set", "optim.lr=1e-30"});
  CHECK_MSG(p.exit_code == 0, "continue: %s", p.output.c_str());
  const flotilla::ModelCheckpoint ck = flotilla::load_model_checkpoint(dir + "/continue", nullptr);
  CHECK(ck.lora.rank == 4 && ck.lora.alpha == 8.0 &&
        ck.lora.targets == flotilla::parse_lora_targets("all-linear"));
  const std::vector<float> want = flotilla::interop::import_peft_adapter(adapter, ck.dims, ck.lora);
  CHECK_MSG(ck.params == want, "the continued run's adapters are not the PEFT adapter");
  // A [lora] key that disagrees with the adapter's config is refused by name.
  const ProcResult bad =
      train(dir, "disagree", config(model, "enabled = true\nrank = 8\ninit_from = \"" + adapter + "\"\n"));
  CHECK_MSG(bad.exit_code == 3 && has(bad.output, "lora.rank = 8 disagrees with \"r\": 4") &&
                has(bad.output, "adapter_config.json"),
            "disagreeing rank: %s", bad.output.c_str());
}

void exports_and_sample(const std::string& dir) {
  const std::string model = "init_from = \"" + golden("hf/qwen3") + "\"\n";
  const ProcResult p =
      train(dir, "run", config(model, "enabled = true\nrank = 2\nalpha = 4.0\ntargets = \"attention\"\n"));
  CHECK_MSG(p.exit_code == 0, "train: %s", p.output.c_str());
  const std::string run = dir + "/run";
  const flotilla::ModelCheckpoint ck = flotilla::load_model_checkpoint(run, nullptr);
  // PEFT folder: adapter_config.json + adapter_model.safetensors with the checkpoint's adapters.
  const ProcResult peft =
      run_worker({"export", "--checkpoint", run, "--format", "peft", "--out", dir + "/peft"}, kEnv);
  CHECK_MSG(peft.exit_code == 0 && has(peft.output, "PEFT LoRA adapter"), "export peft: %s",
            peft.output.c_str());
  const flotilla::interop::PeftAdapterConfig c = flotilla::interop::read_peft_adapter_config(dir + "/peft");
  CHECK(c.r == 2 && c.lora_alpha == 4.0 && c.targets == flotilla::parse_lora_targets("attention") &&
        c.base_model_name_or_path == golden("hf/qwen3"));
  CHECK(flotilla::interop::import_peft_adapter(dir + "/peft", ck.dims, ck.lora) == ck.params);
  CHECK(flotilla::interop::SafetensorsFile(dir + "/peft/adapter_model.safetensors")
            .find("base_model.model.model.layers.1.self_attn.o_proj.lora_B.weight") != nullptr);
  // The merged Hugging Face folder: the base with W + s B A.
  const ProcResult hf = run_worker(
      {"export", "--checkpoint", run, "--format", "hf", "--dtype", "fp32", "--out", dir + "/merged"}, kEnv);
  CHECK_MSG(hf.exit_code == 0 && has(hf.output, "merged into its base"), "export hf: %s", hf.output.c_str());
  std::vector<float> want = flotilla::interop::import_hf_weights(golden("hf/qwen3"), ck.dims);
  const std::vector<float> base = want;
  flotilla::interop::merge_lora(ck.dims, ck.lora, ck.params.data(), want.data());
  const std::vector<float> got = flotilla::interop::import_hf_weights(dir + "/merged", ck.dims);
  CHECK_MSG(got == want, "the merged export is not base + s B A");
  CHECK_MSG(got != base, "the merge changed nothing (the adapter trained?)");
  CHECK(!fs::exists(dir + "/merged/adapter_config.json") &&
        fs::exists(dir + "/merged/tokenizer.json") == fs::exists(golden("hf/qwen3") + "/tokenizer.json"));
  // Formats a LoRA checkpoint cannot give, and PEFT from a full checkpoint: refused with what to use.
  const ProcResult st = run_worker(
      {"export", "--checkpoint", run, "--format", "safetensors", "--out", dir + "/x.safetensors"}, kEnv);
  CHECK_MSG(st.exit_code == 2 && has(st.output, "--format peft"), "safetensors of LoRA: %s",
            st.output.c_str());
  const ProcResult full = train(dir, "full", config(model, "enabled = false\n"));
  CHECK_MSG(full.exit_code == 0, "full: %s", full.output.c_str());
  const ProcResult nopeft =
      run_worker({"export", "--checkpoint", dir + "/full", "--format", "peft", "--out", dir + "/np"}, kEnv);
  CHECK_MSG(nopeft.exit_code == 2 && has(nopeft.output, "--format hf"), "peft of full: %s",
            nopeft.output.c_str());
  // Sampling from the LoRA checkpoint: base + adapter, greedy; the same ids twice.
  const std::vector<std::string> sample = {"sample", "--checkpoint", run, "--prompt-ids", "1 5 9", "--tokens",
                                           "6",      "--top-k",      "1"};
  const ProcResult s1 = run_worker(sample, kEnv), s2 = run_worker(sample, kEnv);
  CHECK_MSG(s1.exit_code == 0 && has(s1.output, "LoRA r 2") && s1.output == s2.output, "sample: %s",
            s1.output.c_str());
}

}  // namespace

int main() {
  const std::string dir = fresh_dir("lora_cli");
  refusals(dir);
  continue_from_peft(dir);
  exports_and_sample(dir);
  return flotilla_test::summary("test_lora_cli");
}
