// The Llama family's tensor indices: the rows of param_layout.cpp's llama table, in order.
// q, k and v are one fused projection ([q heads | k heads | v heads] rows) and gate and up one
// ([gate | up] rows); absent tensors (no bias, no q/k norm, a tied head) have zero rows.
#pragma once

namespace flotilla::llama {

enum LlamaParam : int {
  kEmbed = 0,  // (Vp, C)               model.embed_tokens
  kAttnNorm,   // (L, C)                input_layernorm
  kQkv,        // (L, (H + 2KV) * d, C) q_proj | k_proj | v_proj
  kQkvBias,    // (L, (H + 2KV) * d)    Qwen 2's biases, else empty
  kQNorm,      // (L, d)                Qwen 3's q_norm, else empty
  kKNorm,      // (L, d)                Qwen 3's k_norm, else empty
  kAttnOut,    // (L, C, H * d)         o_proj
  kMlpNorm,    // (L, C)                post_attention_layernorm
  kGateUp,     // (L, 2F, C)            gate_proj | up_proj
  kDown,       // (L, C, F)             down_proj
  kFinalNorm,  // (C)                   model.norm
  kLmHead,     // (Vp, C)               lm_head when untied, else empty
  kNumTensors
};

}  // namespace flotilla::llama
