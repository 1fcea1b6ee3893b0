// libFuzzer target (docs/reliability.md F3): a PEFT adapter_config.json (lora.init_from brings one from
// anywhere). Invariants: a refusal is Error(kConfig) naming the file; an accepted config has a rank >= 1,
// a positive finite alpha and at least one Llama projection, and its adapter table for a small model
// builds without crashing.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "engine/core/error.h"
#include "engine/interop/peft.h"
#include "engine/model/lora.h"
#include "engine/model/model_dims.h"
#include "engine/model/param_layout.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::string name = "fuzz/adapter_config.json";
  flotilla::interop::PeftAdapterConfig c;
  try {
    c = flotilla::interop::parse_peft_adapter_config(text, name);
  } catch (const flotilla::Error& e) {
    if (e.code() != flotilla::ExitCode::kConfig || std::string(e.what()).find(name) == std::string::npos)
      std::abort();
    return 0;
  }
  if (c.r < 1 || !(c.lora_alpha > 0) || !std::isfinite(c.lora_alpha) || c.targets == 0 ||
      c.targets >= (1u << flotilla::kNumLoraTargets))
    std::abort();
  flotilla::ModelDims d;
  d.arch = flotilla::Arch::kLlama;
  d.n_layer = 2;
  d.n_head = 4;
  d.n_kv_head = 2;
  d.n_embd = 32;
  d.ffn_dim = 64;
  d.vocab_size = 128;
  d.padded_vocab = 128;
  flotilla::LoraSpec s;
  s.rank = c.r < 64 ? c.r : 64;
  s.alpha = c.lora_alpha;
  s.rslora = c.use_rslora;
  s.targets = c.targets;
  const flotilla::ParamLayout table(d, s);
  if (table.size() != 2 * s.count() || !(std::isfinite(s.scale()))) std::abort();
  return 0;
}
