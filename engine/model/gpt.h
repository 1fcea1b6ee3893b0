// GPT-2 in the engine: its tensor indices (the llm.c order of param_layout.cpp's GPT-2 table), and
// the model-wide helpers written for GPT-2 that now serve every architecture (DESIGN.md §3).
//
// The model itself is flotilla::Model (model.h): one class for every architecture and backend.
#pragma once

#include <cstddef>
#include <vector>

#include "engine/model/model.h"
#include "engine/model/model_dims.h"

namespace flotilla {

enum ParamIndex : int {
  kWte = 0,   // (Vp, C)
  kWpe,       // (maxT, C)
  kLn1w,      // (L, C)
  kLn1b,      // (L, C)
  kQkvw,      // (L, 3C, C)
  kQkvb,      // (L, 3C)
  kAttprojw,  // (L, C, C)
  kAttprojb,  // (L, C)
  kLn2w,      // (L, C)
  kLn2b,      // (L, C)
  kFcw,       // (L, 4C, C)
  kFcb,       // (L, 4C)
  kFcprojw,   // (L, C, 4C)
  kFcprojb,   // (L, C)
  kLnfw,      // (C)
  kLnfb,      // (C)
  kNumParamTensors
};

const char* param_name(int index);  // GPT-2's "wte", "wpe", "ln1w", ...
bool param_decays(int index);       // GPT-2: weight decay applies (2-D weights and embeddings)
bool is_layer_param(int index);     // GPT-2: one slice per layer (not wte, wpe, lnfw, lnfb)

// Any architecture (ParamLayout of d): floats of every tensor of the whole model, their sum with
// the padded vocabulary, and what users are told (the real vocabulary's rows).
std::vector<size_t> param_sizes(const ModelDims& d);
size_t num_parameters(const ModelDims& d);
size_t num_parameters_unpadded(const ModelDims& d);

// Floats held by a whole fp32 CPU model's activation and scratch buffers after forward(B, T)
// (exactly what Model::activation_bytes() / 4 reports for a model whose largest forward was B x T),
// for the planner's memory prediction. For GPT-2, with N = B*T, one arena holds:
//   kept for backward, per layer: ln1 (N,C), ln1 mean/rstd (N)x2, qkv (N,3C), atty (N,C),
//     attention log-sum-exp (B,NH,T), residual2 (N,C), ln2 (N,C), ln2 mean/rstd (N)x2, fch (N,4C),
//     residual3 (N,C)                                      = L * (N*12C + 4N + B*NH*T)
//   kept once: encoded (N,C), lnf (N,C), lnf mean/rstd (N)x2, logits (N,Vp) (overwritten by
//     dlogits in backward), per-row losses and log-sum-exp (N)x2, input ids, targets and
//     positions (N)x3
//   scratch: gelu output (N,4C; recomputed in backward instead of stored per layer), projection
//     output / d atty (N,C), d residual (N,C), d ln (N,C), d fch / d qkv (N,4C)
// With recompute (Model::set_recompute), only residual3 (N,C) stays per layer (it is the next
// block's input; `encoded` is the first block's); ln1 .. fch keep one layer's worth, in a block
// region rebuilt by backward. Llama: llama_pass.cpp lists its arena. Every tensor is 64-byte aligned.
// Not included: per-thread attention scratch (2*64*T + T floats per thread, at most ~0.5 MiB)
// and BLAS's internal packing buffers.
size_t activation_floats(const ModelDims& d, int B, int T, bool recompute = false);

}  // namespace flotilla
