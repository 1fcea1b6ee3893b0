// QLoRA on the CUDA backend against PEFT + bitsandbytes (tests/engine/golden/qlora, made by
// tests/reference/make_qlora_goldens.py): GpuTrainer over the golden's bf16 base quantised at load
// and over the bitsandbytes-saved folder, with the golden's PEFT adapter, gives PEFT's logits, loss,
// every adapter gradient and three AdamW steps (losses and adapters) within 1e-4 relative in fp32
// storage (the CPU's bound in test_qlora), and within bf16's bounds in bf16 storage (the products
// in bf16, as QLoRA computes). The CPU side of the same comparison is test_qlora's peft_bnb_goldens.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "engine/backend/registry.h"
#include "engine/config/run_config.h"
#include "engine/cuda/cuda_backend.h"
#include "engine/cuda/gpu_trainer.h"
#include "engine/interop/hf_config.h"
#include "engine/interop/hf_model.h"
#include "engine/interop/peft.h"
#include "engine/model/base_weights.h"
#include "engine/train/adamw.h"
#include "gpu_test_util.h"
#include "hf_golden.h"
#include "lora_golden.h"

namespace fc = flotilla::cuda;
using namespace flotilla;

namespace {

struct Figures {
  double logits = 0, loss = 0, grads = 0, losses = 0, adapters = 0;
};

Figures run(const std::string& root, const std::string& folder, bool bf16) {
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
  constexpr int B = 2, T = 16;
  auto& be = dynamic_cast<fc::CudaBackend&>(get_backend("cuda"));
  fc::GpuTrainerOptions o;
  o.bf16 = bf16;
  o.lora = spec;
  fc::GpuTrainer gpt(be, d, B, T, o);
  Model& m = gpt.model();
  m.set_base(interop::load_hf_base(root + "/" + folder, d, true, true));
  gpt.set_params(adapter.data());
  Figures f;
  const float loss = gpt.forward(inputs.data(), targets.data());
  const std::vector<float> want_logits = ref.f32("logits");
  f.logits = hf_golden::max_abs_diff(hf_golden::logits_of(m, static_cast<size_t>(B) * T), want_logits) /
             hf_golden::max_abs(want_logits);
  f.loss = std::fabs(loss - ref.f32("loss")[0]) / std::fabs(ref.f32("loss")[0]);
  gpt.forward_backward(inputs.data(), targets.data());
  const std::vector<float> grads = hf_golden::grads_of(m);
  int tensors = 0;
  for (const lora_golden::Span& sp : lora_golden::peft_spans(d, spec)) {
    const std::vector<float> want = ref.f32("grad." + sp.name);
    const std::vector<float> got(grads.begin() + static_cast<long>(sp.offset),
                                 grads.begin() + static_cast<long>(sp.offset + sp.count));
    f.grads =
        std::max(f.grads, hf_golden::max_abs_diff(got, want) / std::max(1e-3, hf_golden::max_abs(want)));
    ++tensors;
  }
  CHECK(tensors == 14 * d.n_layer);
  // Three AdamW steps over the adapters (PEFT's: lr 1e-2, betas 0.9/0.95, eps 1e-8, decay 0.1, no
  // clipping), the same batch, on the device's optimizer (fp32 master weights under bf16).
  gpt.set_params(adapter.data());
  AdamWHyper h;
  h.lr = 1e-2f;
  h.weight_decay = 0.1f;
  const std::vector<float> want_losses = ref.f32("adamw.losses");
  for (int st = 0; st < 3; ++st) {
    const float l = gpt.forward_backward(inputs.data(), targets.data());
    f.losses = std::max(f.losses, std::fabs(static_cast<double>(l) - want_losses[static_cast<size_t>(st)]) /
                                      std::fabs(static_cast<double>(want_losses[static_cast<size_t>(st)])));
    gpt.step(h, 0.0f, st + 1);
  }
  std::vector<float> params(gpt.num_params());
  gpt.get_params(params.data());
  for (const lora_golden::Span& sp : lora_golden::peft_spans(d, spec)) {
    const std::vector<float> want = ref.f32("adamw." + sp.name);
    const std::vector<float> got(params.begin() + static_cast<long>(sp.offset),
                                 params.begin() + static_cast<long>(sp.offset + sp.count));
    f.adapters =
        std::max(f.adapters, hf_golden::max_abs_diff(got, want) / std::max(1.0, hf_golden::max_abs(want)));
  }
  std::printf(
      "  CUDA QLoRA %s over %s/ vs PEFT + bitsandbytes: logits %.2e, loss %.2e, %d adapter grads %.2e, 3 "
      "AdamW "
      "steps: losses %.2e, adapters %.2e\n",
      bf16 ? "bf16" : "fp32", folder.c_str(), f.logits, f.loss, tensors, f.grads, f.losses, f.adapters);
  return f;
}

}  // namespace

int main() {
  if (gpu_test::skip_without_gpu()) return flotilla_test::summary("gpu_cuda_qlora");
  const std::string root = std::string(FLOTILLA_SOURCE_DIR) + "/tests/engine/golden/qlora";
  for (const char* folder : {"base", "bnb"}) {
    const Figures f = run(root, folder, false);
    CHECK_MSG(f.logits <= 1e-4 && f.loss <= 1e-4 && f.grads <= 1e-4, "fp32 over %s/: differs from PEFT",
              folder);
    CHECK_MSG(f.losses <= 1e-4 && f.adapters <= 1e-4, "fp32 over %s/: AdamW steps differ from PEFT's",
              folder);
  }
  // bf16: the products round to bf16. Adam's first steps move every adapter weight by about lr
  // whatever its gradient's size, so a tiny gradient whose bf16 sign differs moves it by up to 2 lr
  // a step: the adapters' bound is 0.1 of max(1, |w|) after three steps at lr 1e-2.
  const Figures b = run(root, "base", true);
  CHECK_MSG(b.logits <= 3e-2 && b.loss <= 1e-2 && b.grads <= 1e-1 && b.losses <= 1e-2 && b.adapters <= 1e-1,
            "bf16: beyond bf16's bounds from PEFT");
  return flotilla_test::summary("gpu_cuda_qlora");
}
