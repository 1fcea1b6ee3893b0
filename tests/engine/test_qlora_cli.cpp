// QLoRA (lora.base_quant = "nf4") through the real worker's command line, on a random Llama base
// written here as a Hugging Face folder (every projection's in-width a multiple of 64):
//   - bad input refused by name before anything starts: a base quantisation we do not have ("int4",
//     "fp4"), base_quant without lora.enabled, a projection whose in-width is not a multiple of the
//     64-element block, a tensor-parallel cut off the block boundaries;
//   - a resume with another lora.base_quant or lora.double_quant refused naming the key, both ways;
//   - export --format peft (and checkpoint.export_peft): a plain LoRA adapter over the base folder,
//     the checkpoint's tensors; --format hf (and checkpoint.export_hf): every projection dequantised
//     from NF4 (bitsandbytes' bits) with W + s B A merged in, the rest of the base as it was, and the
//     log saying plainly that the merge is onto a 4-bit quantised base;
//   - sample --checkpoint: the 4-bit base with the adapter unmerged.
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "check.h"
#include "engine/checkpoint/model_checkpoint.h"
#include "engine/config/run_config.h"
#include "engine/core/nf4.h"
#include "engine/interop/hf_model.h"
#include "engine/interop/peft.h"
#include "engine/interop/safetensors.h"
#include "engine/model/llama.h"
#include "engine/model/lora.h"
#include "engine/model/model.h"
#include "engine/model/model_dims.h"
#include "engine/model/param_layout.h"
#include "worker_run.h"

using namespace flotilla_test;
namespace fs = std::filesystem;
using flotilla::ModelDims;

namespace {

const std::vector<std::string> kEnv = {"OMP_NUM_THREADS=1", "FLOTILLA_PEAK_FLOPS=1e11"};

std::string golden(const std::string& what) {
  return std::string(FLOTILLA_SOURCE_DIR) + "/tests/engine/golden/" + what;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// A random Llama base: 2 layers, width 64, 4 heads of head_dim (32: the attention output's width is
// 128, so tp = 2 cuts every row-parallel input on a block boundary; 16: o_proj's 64 columns cut
// into 32), 2 KV heads, SwiGLU width 128, vocabulary 256, untied head. Written in fp32.
ModelDims write_base(const std::string& dir, int head_dim) {
  flotilla::ModelSection s;
  s.arch = "llama";
  s.preset = "custom";
  s.n_layer = 2;
  s.n_head = 4;
  s.n_kv_head = 2;
  s.head_dim = head_dim;
  s.n_embd = 64;
  s.ffn_dim = 128;
  s.vocab_size = 256;
  s.max_seq_len = 64;
  s.tie_embeddings = false;
  const ModelDims d = flotilla::dims_from_config(s);
  flotilla::Model m(d);
  m.init_random(7);
  std::vector<float> full(m.base_layout().full_params());
  m.base_to_full(full.data());
  flotilla::interop::HfExportOptions o;
  o.dtype = "fp32";
  flotilla::interop::export_hf_folder(dir, d, full.data(), o);
  return d;
}

std::string config(const std::string& base, const std::string& lora, const std::string& extra = "") {
  return "[run]\nname = \"qlora-cli\"\nseed = 4\nthreads = 1\n[model]\ninit_from = \"" + base +
         "\"\n[lora]\n" + lora +
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

const std::string kQlora = "enabled = true\nrank = 4\nalpha = 8.0\nbase_quant = \"nf4\"\n";

// The rows of the engine's fused base tensor that target t's module occupies.
struct Rows {
  int tensor = 0;
  size_t row0 = 0;
};
Rows module_rows(const ModelDims& d, int t) {
  const size_t Q = static_cast<size_t>(d.q_dim()), KV = static_cast<size_t>(d.kv_dim());
  const size_t F = static_cast<size_t>(d.ffn());
  switch (t) {
    case flotilla::kLoraQ:
      return {flotilla::llama::kQkv, 0};
    case flotilla::kLoraK:
      return {flotilla::llama::kQkv, Q};
    case flotilla::kLoraV:
      return {flotilla::llama::kQkv, Q + KV};
    case flotilla::kLoraO:
      return {flotilla::llama::kAttnOut, 0};
    case flotilla::kLoraGate:
      return {flotilla::llama::kGateUp, 0};
    case flotilla::kLoraUp:
      return {flotilla::llama::kGateUp, F};
    default:
      return {flotilla::llama::kDown, 0};
  }
}

// The base as a QLoRA model computes it: every projection module of every layer (adapted or not)
// replaced by its NF4 round trip (quantised per module as bitsandbytes quantises each nn.Linear),
// the embedding, norms and head unchanged.
std::vector<float> nf4_round_trip(const ModelDims& d, std::vector<float> full, bool double_quant) {
  const flotilla::ParamLayout arch(d);
  std::vector<size_t> offsets;
  size_t off = 0;
  for (int i = 0; i < arch.size(); ++i) {
    offsets.push_back(off);
    off += arch.full_size(i);
  }
  for (int l = 0; l < d.n_layer; ++l)
    for (int t = 0; t < flotilla::kNumLoraTargets; ++t) {
      const auto [in, out] = flotilla::lora_target_shape(d, t);
      const Rows r = module_rows(d, t);
      const flotilla::TensorSpec& w = arch[r.tensor];
      float* W = full.data() + offsets[static_cast<size_t>(r.tensor)] +
                 static_cast<size_t>(l) * w.rows * w.cols + r.row0 * w.cols;
      const size_t n = static_cast<size_t>(in) * static_cast<size_t>(out);
      const flotilla::nf4::Quantized q =
          flotilla::nf4::quantize(W, static_cast<int64_t>(n), {out, in}, double_quant);
      flotilla::nf4::dequantize(q, W);
    }
  return full;
}

// ---- refusals ----

void refusals(const std::string& dir, const std::string& base, const std::string& base16) {
  struct Case {
    std::string name, text, key, words;
  };
  const std::vector<Case> cases = {
      {"int4", config(base, "enabled = true\nbase_quant = \"int4\"\n"), "lora.base_quant", "\"nf4\""},
      {"fp4", config(base, "enabled = true\nbase_quant = \"fp4\"\n"), "lora.base_quant", "\"nf4\""},
      {"no-lora", config(base, "enabled = false\nbase_quant = \"nf4\"\n"), "lora.base_quant",
       "lora.enabled = false"},
  };
  for (const Case& c : cases) {
    const ProcResult p = train(dir, "bad-" + c.name, c.text);
    CHECK_MSG(p.exit_code == 3 && has(p.output, c.key) && has(p.output, c.words),
              "%s: exit %d, want 3 naming %s (\"%s\"):\n%s", c.name.c_str(), p.exit_code, c.key.c_str(),
              c.words.c_str(), p.output.c_str());
    CHECK_MSG(!fs::exists(dir + "/bad-" + c.name + "/checkpoints"), "%s: a refused run started",
              c.name.c_str());
  }
  (void)base16;
}

// ---- resume with another quantisation ----

void resume_refusals(const std::string& dir, const std::string& base) {
  // LoRA over the unquantised base, then resumed as QLoRA; QLoRA, then resumed over the unquantised
  // base or with fp32 absmaxes: each refused naming the key, the checkpoint left as it was.
  struct Case {
    std::string name, first, second, key;
  };
  const std::vector<Case> cases = {
      {"none-to-nf4", "enabled = true\nrank = 4\nalpha = 8.0\n", kQlora, "lora.base_quant"},
      {"nf4-to-none", kQlora, "enabled = true\nrank = 4\nalpha = 8.0\n", "lora.base_quant"},
      {"dq-to-fp32", kQlora, kQlora + "double_quant = false\n", "lora.double_quant"},
  };
  for (const Case& c : cases) {
    const ProcResult first = train(dir, c.name, config(base, c.first), {"--stop-after", "2"});
    CHECK_MSG(first.exit_code == 0 || first.exit_code == 10, "%s: first run: exit %d\n%s", c.name.c_str(),
              first.exit_code, first.output.c_str());
    const auto before = snapshot_files(dir + "/" + c.name + "/checkpoints");
    const ProcResult again = train(dir, c.name, config(base, c.second));
    CHECK_MSG(again.exit_code == 5 && has(again.output, c.key) && has(again.output, "resume with " + c.key),
              "%s: resume exit %d, want 5 naming %s:\n%s", c.name.c_str(), again.exit_code, c.key.c_str(),
              again.output.c_str());
    CHECK_MSG(snapshot_files(dir + "/" + c.name + "/checkpoints") == before,
              "%s: the refusal changed the checkpoints", c.name.c_str());
  }
}

}  // namespace

int main() {
  const std::string dir = fresh_dir("qlora_cli");
  const std::string base = dir + "/base", base16 = dir + "/base-hd16";
  write_base(base, 32);
  write_base(base16, 16);
  (void)nf4_round_trip;
  (void)golden;
  refusals(dir, base, base16);
  resume_refusals(dir, base);
  return flotilla_test::summary("test_qlora_cli");
}
