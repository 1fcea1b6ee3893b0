// QLoRA's model on the CPU (docs/qlora.md): a Model whose base projections are held in NF4
// (lora.nf4) against a plain LoRA Model whose base is exactly the dequantised weights in fp32:
// logits, loss and every adapter gradient within 1e-5 relative (the quantised pass adds only the
// kernels' summation order), for Llama (GQA, untied head), Qwen 2 (q/k/v biases) and Qwen 3 (q/k
// norms), with and without double quantisation, with dropout, and under recomputation (bitwise).
// Also: the shard slices of a tensor-parallel / pipeline model hold exactly their part of every
// module (base_to_full of all shards = the whole dequantised base); the streaming loader of a
// Hugging Face folder gives the same quantised base as quantising the folder's fp32 weights; bad
// shapes are refused before anything is allocated, with the module, its width, tp and what to do;
// and against PEFT + bitsandbytes (peft_bnb_goldens below).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "check.h"
#include "engine/config/config_validate.h"
#include "engine/config/run_config.h"
#include "engine/core/error.h"
#include "engine/core/rng.h"
#include "engine/interop/hf_model.h"
#include "engine/interop/peft.h"
#include "engine/model/base_weights.h"
#include "engine/model/gpt.h"
#include "engine/model/llama.h"
#include "engine/model/lora.h"
#include "engine/model/param_layout.h"
#include "engine/train/adamw.h"
#include "lora_golden.h"

using namespace flotilla;
namespace fs = std::filesystem;

namespace {

// C = 128, 4 heads of 32 (Q = 128), 2 K/V heads (KV = 64), F = 256: every in-width a multiple of
// 64, and tp = 2 cuts o (128) and down (256) on block boundaries.
ModelDims small_dims(const char* variant) {
  ModelDims d;
  d.arch = Arch::kLlama;
  d.n_layer = 2;
  d.n_head = 4;
  d.n_kv_head = 2;
  d.head_dim = 32;
  d.n_embd = 128;
  d.ffn_dim = 256;
  d.vocab_size = 200;
  d.padded_vocab = pad_vocab(200);
  d.max_seq_len = 64;
  d.norm_eps = 1e-5f;
  d.rope_theta = 10000;
  d.tied_embeddings = std::string(variant) != "llama";
  d.qkv_bias = std::string(variant) == "qwen2";
  d.qk_norm = std::string(variant) == "qwen3";
  return d;
}

LoraSpec spec(bool nf4, bool dq, float dropout) {
  LoraSpec s;
  s.rank = 4;
  s.alpha = 8;
  s.dropout = dropout;
  s.targets = parse_lora_targets("all-linear");
  s.seed = 5;
  s.nf4 = nf4;
  s.double_quant = dq;
  return s;
}

double max_abs(const std::vector<float>& a) {
  double m = 0;
  for (float x : a) m = std::max(m, std::fabs(static_cast<double>(x)));
  return m;
}

double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(static_cast<double>(a[i]) - b[i]));
  const double s = max_abs(b);
  return s > 0 ? m / s : m;
}

struct Batch {
  std::vector<int32_t> inputs, targets;
  int B = 2, T = 16;
};

Batch batch(int vocab) {
  Batch b;
  Rng rng(77);
  for (int i = 0; i < b.B * b.T; ++i) {
    b.inputs.push_back(static_cast<int32_t>(rng.next_u64() % static_cast<uint64_t>(vocab)));
    b.targets.push_back(static_cast<int32_t>(rng.next_u64() % static_cast<uint64_t>(vocab)));
  }
  return b;
}

// Adapters with B non-zero too, so every gradient (A's included) carries signal.
std::vector<float> adapters(const ModelDims& d, const LoraSpec& s) {
  const ParamLayout t(d, s);
  std::vector<float> a(t.full_params());
  Rng rng(3);
  for (float& x : a) x = static_cast<float>(rng.normal() * 0.05);
  return a;
}

struct Result {
  float loss = 0;
  std::vector<float> logits, grads;
};

Result step(Model& m, const Batch& b, const std::vector<float>& adapter) {
  m.set_params_from_full(adapter.data());
  m.set_dropout_step(1, 0);
  m.zero_grad();
  Result r;
  r.loss = m.forward(b.inputs.data(), b.targets.data(), b.B, b.T);
  r.logits.assign(m.logits(), m.logits() + static_cast<size_t>(b.B * b.T) * m.dims().padded_vocab);
  m.backward(1.0f);
  r.grads.assign(m.grads(), m.grads() + m.num_params());
  return r;
}

// (a) The single strongest check of the pass: QLoRA = LoRA over the dequantised base.
void equals_dequantised_lora(const char* variant, bool dq, float dropout) {
  const ModelDims d = small_dims(variant);
  const uint64_t seed = 21;
  ModelOptions qo;
  qo.lora = spec(true, dq, dropout);
  Model q(d, ModelShard{}, nullptr, qo);
  q.init_random(seed);
  CHECK(q.nf4_base() && q.base_quant_bytes() > 0);
  // The fp32 reference base: the same initialisation quantised on the host, dequantised; the
  // biases and norms made non-trivial (they are 0 and 1 at initialisation).
  BaseWeights bw = random_base_weights(d, seed, true, dq);
  Rng noise(8);
  for (int i : {llama::kQkvBias, llama::kAttnNorm, llama::kMlpNorm, llama::kQNorm, llama::kKNorm})
    for (float& x : bw.dense[static_cast<size_t>(i)]) x += static_cast<float>(noise.normal() * 0.3);
  q.set_base(bw);
  std::vector<float> full(ParamLayout(d).full_params(), 0.0f);
  base_weights_to_full(bw, full.data());
  std::vector<float> back(full.size(), -1.0f);
  q.base_to_full(back.data());
  CHECK_MSG(back == full, "%s dq=%d: the model's base (dequantised by the backend) is not the host's",
            variant, dq);
  // The quantised base really is 4-bit: the dense buffer holds no projection.
  size_t proj = 0;
  const ParamLayout layout(d);
  for (int i : {llama::kQkv, llama::kAttnOut, llama::kGateUp, llama::kDown}) proj += layout.full_size(i);
  CHECK(q.num_base_params() == layout.full_params() - proj);
  CHECK_MSG(q.base_quant_bytes() < proj / 2 + proj / 16 + 4096, "%zu bytes for %zu projection weights",
            q.base_quant_bytes(), proj);

  ModelOptions lo;
  lo.lora = spec(false, dq, dropout);
  Model ref(d, ModelShard{}, nullptr, lo);
  ref.init_random(seed);
  ref.set_base_from_full(full.data());

  const Batch b = batch(d.vocab_size);
  const std::vector<float> a = adapters(d, qo.lora);
  const Result rq = step(q, b, a), rr = step(ref, b, a);
  const double dl =
      std::fabs(static_cast<double>(rq.loss) - rr.loss) / std::fabs(static_cast<double>(rr.loss));
  const double dlog = rel_diff(rq.logits, rr.logits), dg = rel_diff(rq.grads, rr.grads);
  std::printf("%-6s dq=%d dropout=%.1f: loss %.2e, logits %.2e, adapter grads %.2e (relative)\n", variant, dq,
              static_cast<double>(dropout), dl, dlog, dg);
  CHECK_MSG(dl <= 1e-5 && dlog <= 1e-5 && dg <= 1e-5,
            "%s dq=%d: QLoRA differs from LoRA over the dequantised base", variant, dq);
  CHECK(max_abs(rq.grads) > 0);
  // Against the unquantised base the loss is different: the check can see the quantisation.
  ModelOptions po;
  po.lora = spec(false, dq, dropout);
  Model plain(d, ModelShard{}, nullptr, po);
  plain.init_random(seed);
  {
    std::vector<float> unq(full.size());
    plain.base_to_full(unq.data());
    const ParamLayout pl(d);
    size_t off = 0;
    for (int i = 0; i < pl.size(); ++i) {  // the same biases and norms, unquantised projections
      if (!is_projection_tensor(i))
        std::copy(bw.dense[static_cast<size_t>(i)].begin(), bw.dense[static_cast<size_t>(i)].end(),
                  unq.begin() + static_cast<long>(off));
      off += pl.full_size(i);
    }
    plain.set_base_from_full(unq.data());
  }
  const Result rp = step(plain, b, a);
  CHECK(rel_diff(rp.logits, rr.logits) > 1e-4);

  // Recomputation: bitwise.
  Model qr(d, ModelShard{}, nullptr, qo);
  qr.init_random(seed);
  qr.set_base(bw);
  qr.set_recompute(true);
  const Result rrec = step(qr, b, a);
  CHECK_MSG(rrec.loss == rq.loss && rrec.grads == rq.grads, "%s: QLoRA under recomputation is not bitwise",
            variant);

  // set_base_from_full quantises a full vector: the same bits as quantising module by module.
  Model qf(d, ModelShard{}, nullptr, qo);
  qf.init_random(seed, false);
  std::vector<float> orig(full.size());
  plain.base_to_full(orig.data());
  qf.set_base_from_full(orig.data());
  std::vector<float> back2(full.size(), -1.0f);
  qf.base_to_full(back2.data());
  CHECK(back2 == full);
  // A bias really reaches the output (Qwen 2): the check would see a dropped bias.
  if (d.qkv_bias) {
    BaseWeights nb = bw;
    std::fill(nb.dense[llama::kQkvBias].begin(), nb.dense[llama::kQkvBias].end(), 0.0f);
    Model qb(d, ModelShard{}, nullptr, qo);
    qb.init_random(seed, false);
    qb.set_base(nb);
    CHECK(rel_diff(step(qb, b, a).logits, rq.logits) > 1e-4);
  }
}

// Every tensor-parallel / pipeline shard holds exactly its slice of each module.
void shards_hold_their_slices() {
  const ModelDims d = small_dims("qwen2");
  ModelOptions o;
  o.lora = spec(true, true, 0);
  const BaseWeights bw = random_base_weights(d, 9, true, true);
  std::vector<float> full(ParamLayout(d).full_params(), 0.0f);
  base_weights_to_full(bw, full.data());
  for (const auto& [tp, pp] : std::vector<std::pair<int, int>>{{2, 1}, {1, 2}, {2, 2}}) {
    std::vector<float> joined(full.size(), 0.0f);
    for (int stage = 0; stage < pp; ++stage)
      for (int r = 0; r < tp; ++r) {
        Model m(d, make_shard(d, tp, r, pp, stage), nullptr, o);
        // A stage's loader holds only its layers.
        const BaseWeights part =
            random_base_weights(d, 9, true, true, m.shard().layer_begin, m.shard().layer_end);
        m.set_base(part);
        m.base_to_full(joined.data());
        const nf4::View v = m.base_module_view(0, kLoraO);
        CHECK(v.rows == d.n_embd && v.cols == d.q_dim() / tp && v.cb0 == r * (d.q_dim() / tp / 64));
        const nf4::View g = m.base_module_view(0, kLoraGate);
        CHECK(g.rows == d.ffn() / tp && g.row0 == r * (d.ffn() / tp) && g.cols == d.n_embd);
      }
    CHECK_MSG(joined == full, "tp=%d pp=%d: the shards' slices do not make up the whole base", tp, pp);
  }
}

// The streaming loader: a bf16 folder loads as the same quantised base as its fp32 weights.
void streaming_loader() {
  const ModelDims d = small_dims("llama");
  const std::string dir = std::string(FLOTILLA_TEST_TMP) + "/qlora-stream";
  fs::remove_all(dir);
  Model plain(d);
  plain.init_random(4);
  std::vector<float> full(ParamLayout(d).full_params());
  plain.base_to_full(full.data());
  interop::HfExportOptions eo;
  eo.dtype = "bf16";
  interop::export_hf_folder(dir, d, full.data(), eo);
  const std::vector<float> read = interop::import_hf_weights(dir, d);  // bf16 values, widened
  for (bool dq : {true, false}) {
    const BaseWeights want = base_weights_from_full(d, read.data(), true, dq);
    const BaseWeights got = interop::load_hf_base(dir, d, true, dq);
    CHECK(got.nf4 && got.modules.size() == want.modules.size() && got.dense == want.dense);
    bool same = true;
    for (size_t i = 0; i < want.modules.size(); ++i) {
      const nf4::Quantized &a = got.modules[i], &b = want.modules[i];
      same = same && a.packed == b.packed && a.absmax == b.absmax && a.absmax_q == b.absmax_q &&
             a.absmax2 == b.absmax2 && a.offset == b.offset && a.shape == b.shape;
    }
    CHECK_MSG(same, "dq=%d: the streamed folder's modules differ from quantising its weights", dq);
    // A stage's range: only its layers' modules.
    const BaseWeights stage = interop::load_hf_base(dir, d, true, dq, 1, 2);
    CHECK(stage.modules.size() == kBaseModules &&
          stage.module(1, kLoraDown).packed == want.module(1, kLoraDown).packed);
  }
  fs::remove_all(dir);
}

// (b) and (c) against d38-qa's PEFT + bitsandbytes goldens (tests/engine/golden/qlora, written by
// tests/reference/make_qlora_goldens.py): a 64-wide tiny Llama in bf16 (base/), the folders
// transformers saved with a bitsandbytes 4-bit nf4 + double-quant config (bnb/ with fp32 other
// tensors, bnb_bf16/ with bf16 ones), a PEFT adapter trained over bnb/, and PEFT's logits, loss,
// adapter gradients and three AdamW steps over it. The base folder quantised at load and both
// bitsandbytes folders give byte-identical modules, bitsandbytes' own dequantised weights bit for
// bit, and PEFT's numbers within 1e-4 relative.
void peft_bnb_goldens() {
  const std::string root = std::string(FLOTILLA_SOURCE_DIR) + "/tests/engine/golden/qlora";
  RunConfig cfg;
  cfg.model.init_from = root + "/base";
  interop::apply_hf_init_from(cfg);
  const ModelDims d = dims_from_config(cfg.model);
  LoraSpec spec = lora_golden::spec_of(interop::read_peft_adapter_config(root + "/peft"));
  spec.nf4 = true;
  spec.double_quant = true;
  const std::vector<float> adapter = interop::import_peft_adapter(root + "/peft", d, spec);
  const hf_golden::Reference ref(root);
  const std::vector<int32_t> inputs = ref.i32("inputs"), targets = ref.i32("targets");
  const int B = 2, T = 16;
  const size_t N = static_cast<size_t>(B) * T;

  // (c) The three folders hold the same base: every module byte for byte, the other tensors equal
  // (bnb_bf16 stores them in bf16, as base/ does; bnb/ widened to fp32, exactly).
  const BaseWeights at_load = interop::load_hf_base(root + "/base", d, true, true);
  for (const char* folder : {"bnb", "bnb_bf16"}) {
    const BaseWeights stored = interop::load_hf_base(root + "/" + folder, d, true, true);
    bool same = stored.dense == at_load.dense && stored.modules.size() == at_load.modules.size();
    for (size_t i = 0; same && i < stored.modules.size(); ++i) {
      const nf4::Quantized &a = stored.modules[i], &b = at_load.modules[i];
      same = a.packed == b.packed && a.absmax_q == b.absmax_q && a.absmax2 == b.absmax2 &&
             a.offset == b.offset && a.shape == b.shape;
    }
    CHECK_MSG(same, "%s/: the bitsandbytes folder's base differs from base/ quantised at load", folder);
  }
  // bitsandbytes' own dequantisation of each module, bit for bit.
  {
    std::vector<float> full(ParamLayout(d).full_params(), 0.0f);
    base_weights_to_full(at_load, full.data());
    const std::vector<interop::HfTensorSpan> spans = interop::hf_tensor_spans(d);
    int equal = 0, modules = 0;
    for (const auto& sp : spans) {
      if (!ref.has("dequant." + sp.name)) continue;
      ++modules;
      const std::vector<float> want = ref.f32("dequant." + sp.name);
      if (want.size() == sp.count &&
          std::equal(want.begin(), want.end(), full.begin() + static_cast<long>(sp.offset)))
        ++equal;
    }
    CHECK_MSG(modules == 7 * d.n_layer && equal == modules,
              "%d of %d modules dequantise to bitsandbytes' bits", equal, modules);
  }

  for (const char* folder : {"base", "bnb"}) {
    ModelOptions o;
    o.lora = spec;
    Model m(d, ModelShard{}, nullptr, o);
    m.init_random(1, false);
    m.set_base(interop::load_hf_base(root + "/" + folder, d, true, true));
    m.set_params_from_full(adapter.data());
    m.zero_grad();
    const float loss = m.forward(inputs.data(), targets.data(), B, T);
    const std::vector<float> want_logits = ref.f32("logits");
    const double dlog =
        hf_golden::max_abs_diff(hf_golden::logits_of(m, N), want_logits) / hf_golden::max_abs(want_logits);
    const double dloss = std::fabs(loss - ref.f32("loss")[0]) / std::fabs(ref.f32("loss")[0]);
    m.backward(1.0f);
    const std::vector<float> grads = hf_golden::grads_of(m);
    double dg = 0;
    int tensors = 0;
    for (const lora_golden::Span& sp : lora_golden::peft_spans(d, spec)) {
      const std::vector<float> want = ref.f32("grad." + sp.name);
      const std::vector<float> got(grads.begin() + static_cast<long>(sp.offset),
                                   grads.begin() + static_cast<long>(sp.offset + sp.count));
      dg = std::max(dg, hf_golden::max_abs_diff(got, want) / std::max(1e-3, hf_golden::max_abs(want)));
      ++tensors;
    }
    // Three AdamW steps over the adapters (lr 1e-2, betas 0.9/0.95, eps 1e-8, decay 0.1), the same batch.
    std::vector<float> params(m.num_params());
    m.get_params(params.data());
    AdamW opt(get_backend("cpu"), param_groups(m), 0, params.size());
    AdamWHyper h;
    h.lr = 1e-2f;
    h.weight_decay = 0.1f;
    const std::vector<float> want_losses = ref.f32("adamw.losses");
    double dal = 0, dap = 0;
    for (int st = 0; st < 3; ++st) {
      m.zero_grad();
      const float l = m.forward(inputs.data(), targets.data(), B, T);
      dal = std::max(dal, std::fabs(static_cast<double>(l) - want_losses[static_cast<size_t>(st)]) /
                              std::fabs(static_cast<double>(want_losses[static_cast<size_t>(st)])));
      m.backward(1.0f);
      const std::vector<float> gr = hf_golden::grads_of(m);
      opt.step(params.data(), gr.data(), h, st + 1);
      m.set_params(params.data());
    }
    for (const lora_golden::Span& sp : lora_golden::peft_spans(d, spec)) {
      const std::vector<float> want = ref.f32("adamw." + sp.name);
      const std::vector<float> got(params.begin() + static_cast<long>(sp.offset),
                                   params.begin() + static_cast<long>(sp.offset + sp.count));
      dap = std::max(dap, hf_golden::max_abs_diff(got, want) / std::max(1.0, hf_golden::max_abs(want)));
    }
    std::printf(
        "PEFT + bitsandbytes golden over %s/: logits %.2e, loss %.2e, %d adapter grads %.2e, 3 AdamW steps: "
        "losses %.2e, adapters %.2e\n",
        folder, dlog, dloss, tensors, dg, dal, dap);
    CHECK_MSG(dlog <= 1e-4 && dloss <= 1e-4 && dg <= 1e-4 && tensors == 14 * d.n_layer,
              "%s/: QLoRA differs from PEFT + bitsandbytes", folder);
    CHECK_MSG(dal <= 1e-4 && dap <= 1e-4, "%s/: three AdamW steps differ from PEFT's", folder);
  }
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// (d) Bad shapes, refused before anything is allocated, with the numbers.
void bad_shapes() {
  ModelOptions o;
  o.lora = spec(true, true, 0);
  ModelDims d = small_dims("llama");
  d.n_embd = 96;  // q/k/v/gate/up in-width
  d.n_head = 3;
  d.n_kv_head = 1;
  const std::string e = error_of([&] { Model m(d, ModelShard{}, nullptr, o); });
  CHECK_MSG(has(e, "q_proj") && has(e, "96") && has(e, "multiple of 64") && has(e, "lora.base_quant"), "%s",
            e.c_str());
  // tp = 2 cuts o_proj's 192 input columns into 96: not on a block boundary.
  ModelDims t = small_dims("llama");
  t.n_head = 2;
  t.n_kv_head = 2;
  t.head_dim = 96;  // Q = 192 = 3 blocks
  const std::string e2 = error_of([&] { Model m(t, make_shard(t, 2, 0, 1, 0), nullptr, o); });
  CHECK_MSG(has(e2, "parallel.tp = 2") && has(e2, "o_proj") && has(e2, "192") && has(e2, "96") &&
                has(e2, "parallel.tp = 1"),
            "%s", e2.c_str());
  CHECK(error_of([&] { Model m(t, ModelShard{}, nullptr, o); }).empty());  // tp = 1 is fine
  // validate() reports the same before a run starts, under the key to change.
  RunConfig c;
  c.model.arch = "llama";
  c.model.n_layer = 2;
  c.model.n_head = 2;
  c.model.n_kv_head = 2;
  c.model.head_dim = 96;
  c.model.n_embd = 128;
  c.model.ffn_dim = 256;
  c.model.vocab_size = 200;
  c.model.max_seq_len = 64;
  c.lora.enabled = true;
  c.lora.base_quant = "nf4";
  c.parallel.tp = 2;
  bool found = false;
  for (const ConfigProblem& p : validate(c, 2, ValidateFor::kPlan))
    if (p.path == "parallel.tp" && has(p.message, "o_proj") && has(p.message, "96")) found = true;
  CHECK_MSG(found, "validate() does not refuse tp = 2 cutting o_proj off a block boundary");
  c.parallel.tp = 1;
  c.model.n_embd = 96;
  c.model.n_head = 3;
  c.model.n_kv_head = 1;
  c.model.head_dim = 32;
  found = false;
  for (const ConfigProblem& p : validate(c, 1, ValidateFor::kPlan))
    if (p.path == "lora.base_quant" && has(p.message, "96")) found = true;
  CHECK_MSG(found, "validate() does not refuse an in-width of 96 under nf4");
  // Without nf4 the same shapes are fine.
  c.lora.base_quant = "none";
  for (const ConfigProblem& p : validate(c, 1, ValidateFor::kPlan)) CHECK(p.path != "lora.base_quant");
}

}  // namespace

int main() {
  for (const char* v : {"llama", "qwen2", "qwen3"}) {
    equals_dequantised_lora(v, true, 0.0f);
    equals_dequantised_lora(v, false, 0.0f);
  }
  equals_dequantised_lora("llama", true, 0.1f);
  shards_hold_their_slices();
  streaming_loader();
  bad_shapes();
  peft_bnb_goldens();
  return flotilla_test::summary("qlora");
}
