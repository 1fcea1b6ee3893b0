// The LoRA golden checks (tests/engine/golden/lora/<name>, written by
// tests/reference/make_lora_goldens.py with PEFT over the hf goldens' bases), run on any backend's
// Model: the CPU model (tests/engine/test_lora_golden.cpp) and the CUDA one on the simulator
// (tests/gpu/test_cuda_lora.cpp).
//
// What is checked against PEFT in fp32: the adapter imported from its PEFT folder; logits and loss
// of base + adapter (unmerged); one backward's gradient of every adapter tensor of every layer;
// three AdamW steps over the adapters only (losses and adapters); the frozen base unchanged bit for
// bit by all of it. Max differences are printed.
#pragma once

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "check.h"
#include "engine/backend/registry.h"
#include "engine/interop/peft.h"
#include "engine/model/lora.h"
#include "engine/model/model.h"
#include "engine/model/param_layout.h"
#include "engine/train/adamw.h"
#include "hf_golden.h"

namespace lora_golden {

using namespace flotilla;

inline std::string golden_dir(const std::string& name) {
  return std::string(FLOTILLA_SOURCE_DIR) + "/tests/engine/golden/lora/" + name;
}

struct Golden {
  hf_golden::Golden base;  // the hf golden the adapter was trained on
  std::string name, dir, adapter_dir;
  LoraSpec spec;
  std::vector<float> adapters;  // the imported adapter vector (the adapter table's order)
};

inline LoraSpec spec_of(const interop::PeftAdapterConfig& c) {
  LoraSpec s;
  s.rank = c.r;
  s.alpha = c.lora_alpha;
  s.rslora = c.use_rslora;
  s.targets = c.targets;
  return s;
}

inline Golden load(const std::string& name) {
  Golden g;
  g.base = hf_golden::load(name);
  g.name = name;
  g.dir = golden_dir(name);
  g.adapter_dir = g.dir + "/adapter";
  g.spec = spec_of(interop::read_peft_adapter_config(g.adapter_dir));
  g.adapters = interop::import_peft_adapter(g.adapter_dir, g.base.dims, g.spec);
  return g;
}

// PEFT's name of every tensor in the adapter vector: (name, offset, count) in table order.
struct Span {
  std::string name;
  size_t offset = 0, count = 0;
};
inline std::vector<Span> peft_spans(const ModelDims& d, const LoraSpec& spec) {
  const ParamLayout table(d, spec);
  std::vector<size_t> off;
  size_t at = 0;
  for (int i = 0; i < table.size(); ++i) {
    off.push_back(at);
    at += table.full_size(i);
  }
  std::vector<Span> out;
  for (int l = 0; l < d.n_layer; ++l)
    for (int t = 0; t < kNumLoraTargets; ++t) {
      if (!spec.has(t)) continue;
      const bool attention = t <= kLoraO;
      const std::string module = "base_model.model.model.layers." + std::to_string(l) +
                                 (attention ? ".self_attn." : ".mlp.") + lora_target_name(t);
      for (int which = 0; which < 2; ++which) {
        const int i = which == 0 ? spec.a_index(t) : spec.b_index(t);
        const size_t per = table[i].rows * table[i].cols;
        out.push_back({module + (which == 0 ? ".lora_A.weight" : ".lora_B.weight"),
                       off[static_cast<size_t>(i)] + static_cast<size_t>(l) * per, per});
      }
    }
  return out;
}

struct Figures {
  double logits = 0, loss = 0, grads = 0, adam_loss = 0, adam_params = 0;
  int tensors = 0;
};

// Every check on a whole (unsharded) LoRA model `m` of g.base.dims and g.spec, any backend, fp32.
// Tolerances: logits 1e-5 relative to their largest magnitude, loss 1e-5 relative, adapter
// gradients 1e-4 of the largest reference magnitude, AdamW adapters 3e-4 (hf_golden.h says why).
inline Figures check_model(const Golden& g, Model& m) {
  Figures f;
  const hf_golden::Reference ref(g.dir + "");
  const std::vector<int32_t> inputs = ref.i32("inputs"), targets = ref.i32("targets");
  const int B = 2, T = 16;
  const size_t N = static_cast<size_t>(B) * T;
  m.set_base_from_full(g.base.full.data());
  m.set_params_from_full(g.adapters.data());
  m.zero_grad();
  const float loss = m.forward(inputs.data(), targets.data(), B, T);
  const std::vector<float> want_logits = ref.f32("logits");
  f.logits =
      hf_golden::max_abs_diff(hf_golden::logits_of(m, N), want_logits) / hf_golden::max_abs(want_logits);
  f.loss = std::fabs(loss - ref.f32("loss")[0]) / std::fabs(ref.f32("loss")[0]);
  m.backward(1.0f);
  const std::vector<float> grads = hf_golden::grads_of(m);
  const std::vector<Span> spans = peft_spans(g.base.dims, g.spec);
  for (const Span& s : spans) {
    const std::vector<float> want = ref.f32("grad." + s.name);
    const std::vector<float> got(grads.begin() + static_cast<long>(s.offset),
                                 grads.begin() + static_cast<long>(s.offset + s.count));
    const double d = hf_golden::max_abs_diff(got, want), scale = std::max(1e-3, hf_golden::max_abs(want));
    CHECK_MSG(d <= 1e-4 * scale, "%s: grad %s differs by %.3g (scale %.3g)", g.name.c_str(), s.name.c_str(),
              d, scale);
    f.grads = std::max(f.grads, d / scale);
    ++f.tensors;
  }
  // Three AdamW steps over the adapters only (lr 1e-2, betas 0.9/0.95, eps 1e-8, decay 0.1 on every
  // adapter tensor, no clipping), the optimizer on the host; the base must not move at all.
  std::vector<float> base_before(m.base_layout().full_params());
  m.base_to_full(base_before.data());
  std::vector<float> params(m.num_params());
  m.get_params(params.data());
  AdamW opt(get_backend("cpu"), param_groups(m), 0, params.size());
  AdamWHyper h;
  h.lr = 1e-2f;
  h.weight_decay = 0.1f;
  const std::vector<float> want_losses = ref.f32("adamw.losses");
  for (int s = 0; s < 3; ++s) {
    m.zero_grad();
    const float l = m.forward(inputs.data(), targets.data(), B, T);
    f.adam_loss = std::max(f.adam_loss, std::fabs(double(l) - want_losses[static_cast<size_t>(s)]) /
                                            std::fabs(double(want_losses[static_cast<size_t>(s)])));
    m.backward(1.0f);
    const std::vector<float> gr = hf_golden::grads_of(m);
    opt.step(params.data(), gr.data(), h, s + 1);
    m.set_params(params.data());
  }
  for (const Span& s : spans) {
    const std::vector<float> want = ref.f32("adamw." + s.name);
    const std::vector<float> got(params.begin() + static_cast<long>(s.offset),
                                 params.begin() + static_cast<long>(s.offset + s.count));
    const double d = hf_golden::max_abs_diff(got, want), scale = std::max(1.0, hf_golden::max_abs(want));
    CHECK_MSG(d <= 3e-4 * scale, "%s: after 3 AdamW steps %s differs by %.3g", g.name.c_str(), s.name.c_str(),
              d);
    f.adam_params = std::max(f.adam_params, d / scale);
  }
  std::vector<float> base_after(base_before.size());
  m.base_to_full(base_after.data());
  CHECK_MSG(base_after == base_before, "%s: the frozen base changed during training", g.name.c_str());

  CHECK_MSG(f.logits <= 1e-5, "%s: logits differ by %.3g (relative)", g.name.c_str(), f.logits);
  CHECK_MSG(f.loss <= 1e-5, "%s: loss differs by %.3g (relative)", g.name.c_str(), f.loss);
  CHECK_MSG(f.adam_loss <= 1e-5, "%s: AdamW-step losses differ by %.3g (relative)", g.name.c_str(),
            f.adam_loss);
  std::printf(
      "%-6s r %d, alpha %g%s, %s: logits %.2e, loss %.2e, %d adapter grads %.2e, 3 AdamW steps: losses %.2e, "
      "adapters %.2e\n",
      g.name.c_str(), g.spec.rank, g.spec.alpha, g.spec.rslora ? " (rsLoRA)" : "",
      lora_targets_text(g.spec.targets).c_str(), f.logits, f.loss, f.tensors, f.grads, f.adam_loss,
      f.adam_params);
  return f;
}

}  // namespace lora_golden
