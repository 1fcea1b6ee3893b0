// QLoRA (lora.base_quant = "nf4") in every parallel layout on the CPU, with real Gloo ranks and the
// real worker, against one process on the same global batch (test_hybrid_util.h's tolerances):
// data parallelism with ZeRO 0/1/2 over the adapters, tensor parallelism 2 (each rank holding its
// rows of q, k, v, gate, up and its column blocks of o and down, cut from the whole module's
// quantisation), pipeline stages 2 (each stage streaming only its layers' modules), tp x pp;
// recomputation bitwise; the adapters gathered from the checkpoints compared, not just the losses.
// The bases are Hugging Face folders in bf16 written by the engine's exporter from a random
// initialisation (every in-width a multiple of 64): a Llama (GQA, untied head) and a Qwen 2 (q/k/v
// biases). Also: a stop and resume is bitwise equal to never stopping; trainer.json records the
// quantisation and a resume with lora.base_quant = "none" or without double quantisation is
// refused naming the key; a QLoRA run differs from LoRA over the same folder (the base really is
// 4-bit); the host reference behind the device seam (DeviceModel::set_base) is bitwise the CPU
// path; a bitsandbytes-saved folder trains bitwise as its bf16 original quantised at load (LoRA
// over it refused); tp = 2 on a model whose o_proj cannot be cut on a block boundary is refused before any
// step, with the numbers.
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "engine/interop/hf_model.h"
#include "engine/model/gpt.h"
#include "engine/model/param_layout.h"
#include "tests/engine/test_hybrid_util.h"

using namespace hybrid_test;
namespace fs = std::filesystem;

namespace {

flotilla::ModelDims dims(bool qwen2, int n_head = 4, int head_dim = 32) {
  flotilla::ModelDims d;
  d.arch = flotilla::Arch::kLlama;
  d.n_layer = 2;
  d.n_head = n_head;
  d.n_kv_head = 2;
  d.head_dim = head_dim;
  d.n_embd = 128;
  d.ffn_dim = 256;
  d.vocab_size = 256;
  d.padded_vocab = flotilla::pad_vocab(256);
  d.max_seq_len = 64;
  d.norm_eps = 1e-5f;
  d.rope_theta = 10000;
  d.tied_embeddings = qwen2;
  d.qkv_bias = qwen2;
  return d;
}

// A bf16 Hugging Face folder of a random initialisation (biases made non-zero).
std::string make_base(const std::string& root, const std::string& name, const flotilla::ModelDims& d) {
  const std::string dir = root + "/" + name;
  flotilla::Model m(d);
  m.init_random(17);
  std::vector<float> full(flotilla::ParamLayout(d).full_params());
  m.params_to_full(full.data());
  if (d.qkv_bias) {
    const flotilla::ParamLayout l(d);
    size_t off = 0;
    for (int i = 0; i < 3; ++i) off += l.full_size(i);  // kEmbed, kAttnNorm, kQkv
    for (size_t i = 0; i < l.full_size(3); ++i) full[off + i] = 0.01f * static_cast<float>(i % 17) - 0.08f;
  }
  flotilla::interop::HfExportOptions o;
  o.dtype = "bf16";
  flotilla::interop::export_hf_folder(dir, d, full.data(), o);
  return dir;
}

std::string qlora_config(const std::string& base, const std::string& parallel, const std::string& lora = "",
                         const std::string& train = "") {
  return "[run]\nname = \"qlora-layouts\"\nseed = 11\nthreads = 1\n"
         "[model]\ninit_from = \"" +
         base +
         "\"\n"
         "[lora]\nenabled = true\nrank = 4\nalpha = 8.0\ntargets = \"all-linear\"\n" +
         (lora.find("base_quant") == std::string::npos ? "base_quant = \"nf4\"\n" : "") + lora +
         "[data]\nsynthetic_tokens = 60000\n"
         "[train]\nsteps = 10\nmicro_batch = 2\nseq_len = 16\nglobal_batch_tokens = 64\n" +
         train +
         "[optim]\nlr = 0.003\nwarmup_steps = 2\n"
         "[parallel]\ntimeout_s = 60\n" +
         parallel + "\n[checkpoint]\nevery = 5\nkeep_last = 3\n[eval]\nevery = 0\nbatches = 1\n";
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void layouts(const std::string& root, const char* name, const std::string& base, bool full_grid) {
  const std::string r = root + "/" + name;
  fs::create_directories(r);
  const Run single = train(r, "single", 1, qlora_config(base, ""));
  CHECK_MSG(single.code == 0 && single.losses.size() == 10, "%s single: %s", name, single.output.c_str());
  CHECK_MSG(single.losses.rbegin()->second < single.losses.begin()->second - 1e-3,
            "%s: the loss did not fall", name);
  // LoRA over the same folder trains another model (the base is 4-bit, not the folder's bf16).
  const Run lora = train(r, "lora", 1, qlora_config(base, "", "base_quant = \"none\"\n"));
  CHECK_MSG(lora.code == 0 && lora.losses.begin()->second != single.losses.begin()->second,
            "%s: QLoRA's first loss equals LoRA's (%g): the base was not quantised", name,
            static_cast<double>(single.losses.begin()->second));
  const Run recompute = train(r, "recompute", 1, qlora_config(base, "", "", "recompute = true\n"));
  CHECK_MSG(bitwise_equal(single, recompute), "%s: recompute is not bitwise equal", name);
  const std::string tag = std::string(name) + " QLoRA ";
  expect_close(single, train(r, "dp2", 2, qlora_config(base, "dp = 2")), (tag + "dp=2").c_str());
  expect_close(single, train(r, "tp2", 2, qlora_config(base, "tp = 2")), (tag + "tp=2").c_str());
  expect_close(single, train(r, "pp2", 2, qlora_config(base, "pp = 2\nmicro_batches = 2")),
               (tag + "pp=2").c_str());
  if (!full_grid) return;
  expect_close(single, train(r, "dp2z1", 2, qlora_config(base, "dp = 2\nzero = 1")),
               (tag + "dp=2 zero1").c_str());
  expect_close(single, train(r, "dp2z2", 2, qlora_config(base, "dp = 2\nzero = 2")),
               (tag + "dp=2 zero2").c_str());
  expect_close(single, train(r, "tp2pp2", 4, qlora_config(base, "tp = 2\npp = 2\nmicro_batches = 2")),
               (tag + "tp=2 x pp=2").c_str());
}

void resume(const std::string& root, const std::string& base) {
  const std::string r = root + "/resume";
  fs::create_directories(r);
  const std::string lora = "dropout = 0.1\n";
  const Run straight = train(r, "straight", 1, qlora_config(base, "", lora));
  CHECK_MSG(straight.code == 0 && straight.losses.size() == 10, "%s", straight.output.c_str());
  const Run first = train(r, "stopped", 1, qlora_config(base, "", lora), {"--stop-after", "4"});
  CHECK_MSG(first.code == 0 && first.losses.size() == 4, "stop-after: %s", first.output.c_str());
  // trainer.json records how the base was held.
  const std::string state = read_text(r + "/stopped/checkpoints/step-00000004/trainer.json");
  CHECK_MSG(contains(state, "\"base_quant\": \"nf4\"") && contains(state, "\"double_quant\": true"), "%s",
            state.c_str());
  // Another quantisation is refused by name, before any step (d38-dev's refuse_other_base_quant).
  for (const auto& [other, key] : std::vector<std::pair<std::string, std::string>>{
           {"base_quant = \"none\"\n", "lora.base_quant"}, {"double_quant = false\n", "lora.double_quant"}}) {
    const Run wrong = train(r, "stopped", 1, qlora_config(base, "", lora + other));
    CHECK_MSG(wrong.code == 5 && contains(wrong.output, key) && wrong.losses.size() == 4,
              "resume with %s: exit %d\n%s", other.c_str(), wrong.code, wrong.output.c_str());
  }
  const Run resumed = train(r, "stopped", 1, qlora_config(base, "", lora));
  CHECK_MSG(resumed.code == 0, "resume: %s", resumed.output.c_str());
  CHECK_MSG(bitwise_equal(straight, resumed),
            "a QLoRA stop and resume is not bitwise equal to never stopping");
  // The checkpoint holds the adapters only (and their moments), with the base's fingerprint.
  const flotilla::ModelCheckpoint ck = flotilla::load_model_checkpoint(r + "/stopped/checkpoints", nullptr);
  CHECK(ck.lora.nf4 && ck.params.size() == flotilla::lora_parameter_count(ck.dims, ck.lora));
  CHECK(!ck.base_weights.empty());
}

// The device seam (DeviceModel::set_base, what the CUDA trainer implements) run by the host
// reference model: bitwise the CPU path's run.
void through_device_seam(const std::string& root, const std::string& base) {
  const std::string r = root + "/seam";
  fs::create_directories(r);
  const Run cpu = train(r, "cpu", 1, qlora_config(base, ""));
  write_text(r + "/seam.toml", qlora_config(base, ""));
  std::vector<std::string> env = worker_env();
  env.push_back("FLOTILLA_TEST_DEVICE_MODEL=host");
  const auto p =
      run_worker({"train", "--config", r + "/seam.toml", "--out-dir", r + "/seam", "--quiet"}, env);
  Run seam;
  seam.code = p.exit_code;
  seam.losses = step_losses(r + "/seam");
  if (seam.code == 0 && !seam.losses.empty())
    seam.params = gathered_params(r + "/seam", seam.losses.rbegin()->first);
  CHECK_MSG(seam.code == 0 && bitwise_equal(cpu, seam),
            "QLoRA through the device seam differs from the CPU path: %s", p.output.c_str());
}

// d38-qa's bitsandbytes-saved folder trains through the worker exactly as the bf16 folder it was
// made from, quantised at load (the same bytes); LoRA over it is refused naming lora.base_quant.
void bnb_folder(const std::string& root) {
  const std::string r = root + "/bnb";
  fs::create_directories(r);
  const std::string golden = std::string(FLOTILLA_SOURCE_DIR) + "/tests/engine/golden/qlora/";
  const Run base = train(r, "base", 1, qlora_config(golden + "base", ""));
  const Run bnb = train(r, "bnb", 1, qlora_config(golden + "bnb", ""));
  CHECK_MSG(base.code == 0 && bnb.code == 0 && bitwise_equal(base, bnb),
            "a QLoRA run over the bitsandbytes folder differs from one over its bf16 original\n%s\n%s",
            base.output.c_str(), bnb.output.c_str());
  // Pipeline stages read only their layers' quantised weights (and mark the others' quant state read).
  expect_close(bnb, train(r, "bnb-pp2", 2, qlora_config(golden + "bnb", "pp = 2\nmicro_batches = 2")),
               "bnb folder QLoRA pp=2");
  const Run lora = train(r, "lora", 1, qlora_config(golden + "bnb", "", "base_quant = \"none\"\n"));
  CHECK_MSG(lora.code != 0 && lora.losses.empty() && contains(lora.output, "lora.base_quant = \"nf4\""), "%s",
            lora.output.c_str());
}

void bad_cut_refused(const std::string& root) {
  const std::string r = root + "/bad-cut";
  fs::create_directories(r);
  // o_proj's input: 2 heads of 96 = 192 columns = 3 blocks of 64, which tp = 2 cannot split.
  const std::string base = make_base(r, "base", dims(false, 2, 96));
  const Run bad = train(r, "tp2", 2, qlora_config(base, "tp = 2"));
  CHECK_MSG(bad.code != 0 && bad.losses.empty(), "exit %d\n%s", bad.code, bad.output.c_str());
  CHECK_MSG(contains(bad.output, "parallel.tp") && contains(bad.output, "o_proj") &&
                contains(bad.output, "192") && contains(bad.output, "96"),
            "%s", bad.output.c_str());
}

}  // namespace

int main() {
  const std::string root = fresh_dir("qlora_layouts");
  const std::string llama = make_base(root, "llama-base", dims(false));
  const std::string qwen2 = make_base(root, "qwen2-base", dims(true));
  layouts(root, "llama", llama, true);
  layouts(root, "qwen2", qwen2, false);
  resume(root, llama);
  through_device_seam(root, qwen2);
  bnb_folder(root);
  bad_cut_refused(root);
  return flotilla_test::summary("test_qlora_layouts");
}
