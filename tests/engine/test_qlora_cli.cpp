// QLoRA (lora.base_quant = "nf4") through the real worker's command line, on a random Llama base
// written here as a Hugging Face folder (every projection's in-width a multiple of 64):
//   - bad input refused by name before anything starts: a base quantisation we do not have ("int4",
//     "fp4"), base_quant without lora.enabled, a projection whose in-width is not a multiple of the
//     64-element block, a tensor-parallel cut off the block boundaries (two real ranks);
//   - a resume with another lora.base_quant or lora.double_quant refused naming the key, both ways;
//     export and sample of a checkpoint naming a base quantisation this engine lacks refused naming
//     config.lora.base_quant;
//   - export --format peft (and checkpoint.export_peft): a plain LoRA adapter over the base folder,
//     the checkpoint's tensors; --format hf (and checkpoint.export_hf): every projection dequantised
//     from NF4 (bitsandbytes' bits) with W + s B A merged in, the rest of the base as it was, and the
//     log saying plainly that the merge is onto a 4-bit quantised base;
//   - sample --checkpoint: the 4-bit base with the adapter unmerged;
//   - a base with a NaN in a projection refused at load naming the tensor; a resume over changed
//     base weights refused naming the file;
//   - the trainer's device branch (the DeviceModel seam's host reference) trains QLoRA bitwise as
//     the CPU path, the base handed over as BaseWeights;
//   - a bitsandbytes-saved base (the QLoRA golden's bnb/) trains, exports and samples as its bf16
//     original; one missing a quant-state tensor, or double-quantised against lora.double_quant =
//     false, is refused before anything starts naming the tensor or the key.
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "check.h"
#include "engine/checkpoint/model_checkpoint.h"
#include "engine/config/run_config.h"
#include "engine/core/checksum.h"
#include "engine/core/nf4.h"
#include "engine/core/rng.h"
#include "engine/interop/hf_model.h"
#include "engine/interop/peft.h"
#include "engine/interop/safetensors.h"
#include "engine/model/base_weights.h"
#include "engine/model/llama.h"
#include "engine/model/lora.h"
#include "engine/model/model.h"
#include "engine/model/model_dims.h"
#include "engine/model/param_layout.h"
#include "engine/train/sampler.h"
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
// seed: the weights' (another seed: the same shapes, other weights); nan_at_layer1_q: one NaN in
// layer 1's q_proj.
ModelDims write_base(const std::string& dir, int head_dim, uint64_t seed = 7, bool nan_at_layer1_q = false) {
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
  m.init_random(seed);
  std::vector<float> full(m.base_layout().full_params());
  m.base_to_full(full.data());
  if (nan_at_layer1_q) {
    const flotilla::ParamLayout arch(d);
    size_t off = 0;
    for (int i = 0; i < flotilla::llama::kQkv; ++i) off += arch.full_size(i);
    const flotilla::TensorSpec& w = arch[flotilla::llama::kQkv];
    full[off + static_cast<size_t>(w.rows) * w.cols + 5] = std::nanf("");
  }
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
      // The golden llama folder is 32 wide: q_proj's rows are half a block.
      {"narrow", config(golden("hf/llama"), kQlora), "lora.base_quant", "not a multiple of 64"},
  };
  for (const Case& c : cases) {
    const ProcResult p = train(dir, "bad-" + c.name, c.text);
    CHECK_MSG(p.exit_code == 3 && has(p.output, c.key) && has(p.output, c.words),
              "%s: exit %d, want 3 naming %s (\"%s\"):\n%s", c.name.c_str(), p.exit_code, c.key.c_str(),
              c.words.c_str(), p.output.c_str());
    CHECK_MSG(!fs::exists(dir + "/bad-" + c.name + "/checkpoints"), "%s: a refused run started",
              c.name.c_str());
  }
  // head_dim 16: o_proj's 64 input columns, cut in two by tp = 2, are half a block each. Two real
  // ranks, so the layout itself is valid and the cut is the only problem.
  const std::string cfg = dir + "/bad-tp.toml";
  write_text(cfg, config(base16, kQlora, "[parallel]\ntp = 2\nbackend = \"gloo\"\n"));
  const ProcResult tp = run_worker({"launch", "--nproc-per-node", "2", "--master-port", "0", "--no-bind",
                                    "--", "train", "--config", cfg, "--out-dir", dir + "/bad-tp", "--quiet"},
                                   kEnv);
  CHECK_MSG(tp.exit_code == 3 && has(tp.output, "parallel.tp = 2 cuts o_proj's input width") &&
                has(tp.output, "block boundaries") && has(tp.output, "1 problem"),
            "tp = 2 off the NF4 blocks: exit %d\n%s", tp.exit_code, tp.output.c_str());
  CHECK_MSG(!fs::exists(dir + "/bad-tp/checkpoints"), "tp: a refused run started");
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

// A checkpoint whose trainer.json names a base quantisation this engine does not have (a newer
// engine's, say: the file edited here, its MANIFEST checksum kept valid) is refused by export and
// sample naming config.lora.base_quant, never read as the unquantised base.
void unknown_quant_checkpoint(const std::string& dir) {
  const std::string copy = dir + "/int4-ckpt";
  fs::copy(dir + "/run", copy, fs::copy_options::recursive);
  const std::string step = copy + "/checkpoints/step-00000004";
  auto t = nlohmann::json::parse(read_file(step + "/trainer.json"));
  CHECK(t["config"]["lora"]["base_quant"] == "nf4");
  t["config"]["lora"]["base_quant"] = "int4";
  const std::string text = t.dump(1);
  write_text(step + "/trainer.json", text);
  auto m = nlohmann::json::parse(read_file(step + "/MANIFEST"));
  for (auto& f : m["files"])
    if (f["name"] == "trainer.json") {
      char hex[16];
      std::snprintf(hex, sizeof hex, "%08x", flotilla::crc32c(text.data(), text.size()));
      f["crc32c"] = hex;
      f["size"] = text.size();
    }
  write_text(step + "/MANIFEST", m.dump(1));
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"export", "--checkpoint", step, "--format", "hf", "--out",
                                 dir + "/int4-merged"},
        std::vector<std::string>{"export", "--checkpoint", step, "--format", "peft", "--out",
                                 dir + "/int4-peft"},
        std::vector<std::string>{"sample", "--checkpoint", step, "--prompt-ids", "1 2", "--tokens", "2"}}) {
    const ProcResult p = run_worker(args, kEnv);
    CHECK_MSG(
        p.exit_code == 5 && has(p.output, "config.lora.base_quant = \"int4\"") && !has(p.output, "crc32c"),
        "%s of a checkpoint with lora.base_quant = \"int4\": exit %d\n%s", args[0].c_str(), p.exit_code,
        p.output.c_str());
  }
  CHECK(!fs::exists(dir + "/int4-merged") && !fs::exists(dir + "/int4-peft"));
}

// ---- the base's weights ----

// A QLoRA base is checked as LoRA's: a folder holding a NaN in a projection is refused at load
// naming the tensor (the NaN would poison its module's double-quantisation offset, so every block
// of it); a resume over base weights changed since the checkpoint is refused naming the file.
void base_weights(const std::string& dir) {
  const std::string nan_base = dir + "/base-nan";
  write_base(nan_base, 32, 7, true);
  const ProcResult nan = train(dir, "nan-base", config(nan_base, kQlora));
  CHECK_MSG(nan.exit_code == 4 && has(nan.output, "model.layers.1.self_attn.q_proj.weight") &&
                has(nan.output, "NaN"),
            "a NaN in a projection of a QLoRA base: exit %d\n%s", nan.exit_code, nan.output.c_str());
  CHECK(!fs::exists(dir + "/nan-base/checkpoints"));

  const std::string moved = dir + "/base-moved";
  write_base(moved, 32);
  const ProcResult first = train(dir, "moved", config(moved, kQlora), {"--stop-after", "2"});
  CHECK_MSG(first.exit_code == 0 || first.exit_code == 10, "first run: exit %d\n%s", first.exit_code,
            first.output.c_str());
  write_base(moved, 32, 8);  // same shapes, other weights
  const auto before = snapshot_files(dir + "/moved/checkpoints");
  const ProcResult again = train(dir, "moved", config(moved, kQlora));
  CHECK_MSG(again.exit_code == 5 && has(again.output, "model.safetensors changed content"),
            "resume over changed base weights: exit %d\n%s", again.exit_code, again.output.c_str());
  CHECK(snapshot_files(dir + "/moved/checkpoints") == before);
}

// ---- the device seam ----

// The trainer's device branch (FLOTILLA_TEST_DEVICE_MODEL=host: Model + AdamW behind the DeviceModel
// seam, what a GPU run goes through): the QLoRA base reaches it through DeviceModel::set_base as the
// host's BaseWeights, and it trains bitwise as the CPU path (`run`, the same config).
void device_seam(const std::string& dir, const std::string& base) {
  const std::string cfg = dir + "/seam.toml";
  write_text(cfg, config(base, kQlora));
  std::vector<std::string> env = kEnv;
  env.push_back("FLOTILLA_TEST_DEVICE_MODEL=host");
  const ProcResult p = run_worker({"train", "--config", cfg, "--out-dir", dir + "/seam", "--quiet"}, env);
  CHECK_MSG(p.exit_code == 0, "QLoRA through the device seam: %s", p.output.c_str());
  bool said = false;
  for (const auto& r : read_metrics(dir + "/seam"))
    if (r["type"] == "event" && has(r.value("message", std::string()), "training on host reference"))
      said = true;
  CHECK_MSG(said, "the seam run did not go through the device model");
  const auto a = step_losses(dir + "/run"), b = step_losses(dir + "/seam");
  CHECK_MSG(a.size() == 4 && a == b, "QLoRA through the device seam: losses differ from the CPU path");
  for (const char* section : {"params", "adam_m", "adam_v"})
    CHECK_MSG(checkpoint_section(dir + "/seam", 4, section) == checkpoint_section(dir + "/run", 4, section),
              "QLoRA through the device seam: %s differ from the CPU path", section);
}

// ---- bitsandbytes-saved bases ----

// A copy of the golden bitsandbytes folder with `edit` applied to its tensors (name -> raw bytes).
struct RawTensor {
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};
std::string bnb_copy(const std::string& dir, const std::string& name,
                     const std::function<void(std::map<std::string, RawTensor>&)>& edit) {
  const std::string out = dir + "/" + name;
  fs::create_directories(out);
  for (const auto& e : fs::directory_iterator(golden("qlora/bnb")))
    fs::copy_file(e.path(), out + "/" + e.path().filename().string());
  const std::string path = out + "/model.safetensors";
  std::map<std::string, RawTensor> t;
  std::map<std::string, std::string> meta;
  {
    const flotilla::interop::SafetensorsFile f(path);
    meta = f.metadata();
    for (const auto& e : f.entries()) t[e.name] = RawTensor{e.dtype, e.shape, f.read_raw(e)};
  }
  edit(t);
  std::vector<flotilla::interop::SafetensorsOutTensor> w;
  for (const auto& [n, x] : t) w.push_back({n, x.dtype, x.shape, x.bytes.data(), {}});
  flotilla::interop::write_safetensors(path, w, meta);
  return out;
}

// A folder saved by transformers with bitsandbytes' 4-bit NF4 (the QLoRA golden's bnb/) trains,
// exports and samples exactly as its bf16 original quantised at load; one missing a quant-state
// tensor, or with another double quantisation than lora.double_quant, is refused before anything
// starts, naming the tensor or the key.
void bnb_bases(const std::string& dir) {
  const std::string bf16 = golden("qlora/base"), bnb = golden("qlora/bnb");
  const ProcResult a = train(dir, "from-bf16", config(bf16, kQlora)),
                   b = train(dir, "from-bnb", config(bnb, kQlora));
  CHECK_MSG(a.exit_code == 0 && b.exit_code == 0, "train on the QLoRA golden bases: %s\n%s", a.output.c_str(),
            b.output.c_str());
  CHECK(step_losses(dir + "/from-bf16") == step_losses(dir + "/from-bnb"));
  for (const char* from : {"from-bf16", "from-bnb"}) {
    const ProcResult e = run_worker({"export", "--checkpoint", dir + "/" + from, "--format", "hf", "--dtype",
                                     "fp32", "--out", dir + "/" + from + "-merged"},
                                    kEnv);
    CHECK_MSG(e.exit_code == 0 && has(e.output, "dequantised from 4-bit NF4"), "export %s: %s", from,
              e.output.c_str());
  }
  CHECK_MSG(read_file(dir + "/from-bnb-merged/model.safetensors") ==
                read_file(dir + "/from-bf16-merged/model.safetensors"),
            "the merged export over the bitsandbytes folder differs from the one over its bf16 original");
  CHECK_MSG(!has(read_file(dir + "/from-bnb-merged/config.json"), "quantization_config"),
            "the merged (unquantised) export carries the bitsandbytes folder's quantization_config");
  const std::vector<std::string> args = {"--prompt-ids", "1 5 9", "--tokens", "6", "--top-k", "1"};
  std::vector<std::string> s1 = {"sample", "--checkpoint", dir + "/from-bf16"},
                           s2 = {"sample", "--checkpoint", dir + "/from-bnb"};
  s1.insert(s1.end(), args.begin(), args.end());
  s2.insert(s2.end(), args.begin(), args.end());
  const ProcResult r1 = run_worker(s1, kEnv), r2 = run_worker(s2, kEnv);
  // The generated ids: the one output line of digits and spaces (stderr names the base folder).
  const auto ids_line = [](const std::string& t) {
    std::string line, found;
    for (char ch : t + "\n") {
      if (ch != '\n') {
        line += ch;
        continue;
      }
      if (!line.empty() && line.find_first_not_of("0123456789 ") == std::string::npos) found = line;
      line.clear();
    }
    return found;
  };
  CHECK_MSG(r1.exit_code == 0 && r2.exit_code == 0 && !ids_line(r1.output).empty() &&
                ids_line(r1.output) == ids_line(r2.output),
            "sample over the bnb folder vs its bf16 original:\n%s\n%s", r1.output.c_str(), r2.output.c_str());

  const std::string q = "model.layers.0.self_attn.q_proj.weight";
  struct Case {
    std::string name;
    std::function<void(std::map<std::string, RawTensor>&)> edit;
    std::string lora, words;
  };
  const std::vector<Case> cases = {
      {"no-absmax", [&](auto& t) { t.erase(q + ".absmax"); }, kQlora, q + ".absmax"},
      {"no-nested", [&](auto& t) { t.erase(q + ".nested_absmax"); }, kQlora, q + ".nested_absmax"},
      {"no-state", [&](auto& t) { t.erase(q + ".quant_state.bitsandbytes__nf4"); }, kQlora,
       q + ".quant_state.bitsandbytes__nf4 is missing"},
      {"dq-off", [](auto&) {}, kQlora + "double_quant = false\n", "lora.double_quant"},
  };
  for (const Case& c : cases) {
    const std::string folder = bnb_copy(dir, "bnb-" + c.name, c.edit);
    const ProcResult p = train(dir, "bad-bnb-" + c.name, config(folder, c.lora));
    CHECK_MSG((p.exit_code == 3 || p.exit_code == 4) && has(p.output, c.words),
              "bitsandbytes folder %s: exit %d, want a refusal naming %s:\n%s", c.name.c_str(), p.exit_code,
              c.words.c_str(), p.output.c_str());
    CHECK_MSG(!fs::exists(dir + "/bad-bnb-" + c.name + "/checkpoints") &&
                  last_step(dir + "/bad-bnb-" + c.name) == 0,
              "bitsandbytes folder %s: a refused run started", c.name.c_str());
    std::printf("  bitsandbytes folder %s refused (exit %d): %s\n", c.name.c_str(), p.exit_code,
                p.output.substr(0, p.output.find('\n')).c_str());
  }
}

// ---- export and sample ----

// Adapter vector of checkpoint `run` merged onto `base` (a whole fp32 base vector).
std::vector<float> merged(const flotilla::ModelCheckpoint& ck, std::vector<float> base) {
  flotilla::interop::merge_lora(ck.dims, ck.lora, ck.params.data(), base.data());
  return base;
}

void exports_and_sample(const std::string& dir, const std::string& base) {
  const ProcResult p = train(dir, "run", config(base, kQlora));
  CHECK_MSG(p.exit_code == 0, "train: %s", p.output.c_str());
  const std::string run = dir + "/run";
  const flotilla::ModelCheckpoint ck = flotilla::load_model_checkpoint(run, nullptr);
  CHECK(ck.lora.nf4 && ck.lora.double_quant && ck.lora.rank == 4);
  const ModelDims& d = ck.dims;

  // PEFT: a plain LoRA adapter over the base folder; stdout says how the base was quantised.
  const ProcResult peft =
      run_worker({"export", "--checkpoint", run, "--format", "peft", "--out", dir + "/peft"}, kEnv);
  CHECK_MSG(peft.exit_code == 0 && has(peft.output, "PEFT LoRA adapter") && has(peft.output, "4-bit NF4") &&
                has(peft.output, "records no quantisation") &&
                has(peft.output, "bnb_4bit_use_double_quant=True"),
            "export peft: %s", peft.output.c_str());
  const flotilla::interop::PeftAdapterConfig c = flotilla::interop::read_peft_adapter_config(dir + "/peft");
  CHECK(c.peft_type == "LORA" && c.r == 4 && c.lora_alpha == 8.0 &&
        c.targets == flotilla::parse_lora_targets("all-linear") && c.base_model_name_or_path == base);
  CHECK(flotilla::interop::import_peft_adapter(dir + "/peft", d, ck.lora) == ck.params);

  // Merged: every projection dequantised from NF4 (quantised here per module, independently of the
  // engine's loader), W + s B A; the embedding, norms and head as the folder has them.
  const ProcResult hf = run_worker(
      {"export", "--checkpoint", run, "--format", "hf", "--dtype", "fp32", "--out", dir + "/merged"}, kEnv);
  CHECK_MSG(hf.exit_code == 0 && has(hf.output, "dequantised from 4-bit NF4") &&
                has(hf.output, "not the original base"),
            "export hf: %s", hf.output.c_str());
  const std::vector<float> original = flotilla::interop::import_hf_weights(base, d);
  const std::vector<float> want = merged(ck, nf4_round_trip(d, original, true));
  const std::vector<float> got = flotilla::interop::import_hf_weights(dir + "/merged", d);
  CHECK_MSG(got == want, "the merged export is not dequant(NF4(W)) + s B A");
  CHECK_MSG(got != merged(ck, original), "the merged export equals the merge onto the unquantised weights");
  CHECK(!fs::exists(dir + "/merged/adapter_config.json") && fs::exists(dir + "/merged/config.json"));

  // fp32 block absmaxes (lora.double_quant = false): the merge is onto that quantisation's weights.
  const ProcResult nodq = train(dir, "run-nodq", config(base, kQlora + "double_quant = false\n"));
  CHECK_MSG(nodq.exit_code == 0, "train (double_quant = false): %s", nodq.output.c_str());
  const flotilla::ModelCheckpoint cn = flotilla::load_model_checkpoint(dir + "/run-nodq", nullptr);
  const ProcResult hfn = run_worker({"export", "--checkpoint", dir + "/run-nodq", "--format", "hf", "--dtype",
                                     "fp32", "--out", dir + "/merged-nodq"},
                                    kEnv);
  CHECK_MSG(hfn.exit_code == 0 && has(hfn.output, "fp32 absmax"), "export hf (double_quant = false): %s",
            hfn.output.c_str());
  CHECK_MSG(!cn.lora.double_quant && flotilla::interop::import_hf_weights(dir + "/merged-nodq", d) ==
                                         merged(cn, nf4_round_trip(d, original, false)),
            "the merged export (double_quant = false) is not dequant(NF4(W)) + s B A");

  // The same two at the end of a run (checkpoint.export_peft / export_hf), and the log says it.
  const ProcResult end = train(dir, "end",
                               config(base, kQlora,
                                      "[checkpoint]\nexport_peft = \"" + dir + "/end-peft\"\nexport_hf = \"" +
                                          dir + "/end-merged\"\nexport_dtype = \"fp32\"\n"));
  CHECK_MSG(end.exit_code == 0, "train with exports: %s", end.output.c_str());
  const flotilla::ModelCheckpoint ce = flotilla::load_model_checkpoint(dir + "/end", nullptr);
  CHECK(ce.params == ck.params);  // the same seed and data: the same adapters
  CHECK(flotilla::interop::import_peft_adapter(dir + "/end-peft", d, ce.lora) == ce.params);
  CHECK(flotilla::interop::read_peft_adapter_config(dir + "/end-peft").base_model_name_or_path == base);
  CHECK_MSG(flotilla::interop::import_hf_weights(dir + "/end-merged", d) == want,
            "checkpoint.export_hf differs from export --format hf");
  const std::string log = read_file(dir + "/end/metrics.jsonl");
  CHECK_MSG(has(log, "dequantised from 4-bit NF4"),
            "the run's log does not say the merge is onto the NF4 base");

  // Sampling: the 4-bit base with the adapter unmerged, greedy; the same ids twice, and the ids a
  // QLoRA Model gives here in-process with the checkpoint's adapters over the NF4 base.
  const std::vector<std::string> sample = {"sample", "--checkpoint", run, "--prompt-ids", "1 5 9", "--tokens",
                                           "8",      "--top-k",      "1"};
  const ProcResult s1 = run_worker(sample, kEnv), s2 = run_worker(sample, kEnv);
  CHECK_MSG(s1.exit_code == 0 && has(s1.output, "QLoRA r 4") && has(s1.output, "4-bit NF4") &&
                s1.output == s2.output,
            "sample: %s", s1.output.c_str());
  flotilla::ModelOptions mo;
  mo.lora = ck.lora;
  flotilla::Model m(d, flotilla::ModelShard{}, nullptr, mo);
  m.set_base(flotilla::interop::load_hf_base(base, d, true, true));
  m.set_params_from_full(ck.params.data());
  m.set_training(false);
  flotilla::SampleOptions so;
  so.tokens = 8;
  so.top_k = 1;
  flotilla::Rng rng(1);
  const std::vector<int32_t> ids = flotilla::sample_tokens(m, {1, 5, 9}, so, rng);
  std::string text;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) text += " ";
    text += std::to_string(ids[i]);
  }
  CHECK_MSG(has(s1.output, text + "\n"), "sample printed\n%s\nthe in-process QLoRA model gives %s",
            s1.output.c_str(), text.c_str());
  // Unmerged (sample) and merged (export) are one model: the logits of both, within fp32 rounding.
  const std::vector<int32_t> tokens = {1, 5, 9, 200, 17, 3, 3, 64};
  const int T = static_cast<int>(tokens.size());
  m.forward(tokens.data(), nullptr, 1, T);
  std::vector<float> lq(static_cast<size_t>(T) * static_cast<size_t>(d.padded_vocab));
  m.copy_logits(lq.data());
  flotilla::Model full(d);
  full.set_params_from_full(got.data());
  full.forward(tokens.data(), nullptr, 1, T);
  std::vector<float> lm(lq.size());
  full.copy_logits(lm.data());
  double diff = 0, norm = 0;
  for (int t = 0; t < T; ++t)
    for (int v = 0; v < d.vocab_size; ++v) {
      const size_t i = static_cast<size_t>(t) * static_cast<size_t>(d.padded_vocab) + static_cast<size_t>(v);
      diff = std::fmax(diff, std::fabs(static_cast<double>(lq[i]) - lm[i]));
      norm = std::fmax(norm, std::fabs(static_cast<double>(lm[i])));
    }
  CHECK_MSG(diff <= 1e-5 * norm,
            "QLoRA unmerged vs its merged export: logits differ by %.3g (max |logit| %.3g)", diff, norm);
  std::printf("  QLoRA unmerged (sample) vs merged export (fp32): logits within %.2e of max |logit| %.3f\n",
              diff, norm);
}

}  // namespace

int main() {
  const std::string dir = fresh_dir("qlora_cli");
  const std::string base = dir + "/base", base16 = dir + "/base-hd16";
  write_base(base, 32);
  write_base(base16, 16);
  refusals(dir, base, base16);
  resume_refusals(dir, base);
  exports_and_sample(dir, base);
  device_seam(dir, base);
  unknown_quant_checkpoint(dir);
  base_weights(dir);
  bnb_bases(dir);
  return flotilla_test::summary("test_qlora_cli");
}
