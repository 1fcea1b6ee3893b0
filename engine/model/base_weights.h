// The frozen base of a LoRA / QLoRA model on the host, as the loaders build it and Model::set_base
// takes it (docs/qlora.md): the non-projection tensors in fp32 and, under QLoRA, every layer's seven
// projections (q, k, v, o, gate, up, down) each as its own nf4::Quantized, exactly as bitsandbytes
// quantises each nn.Linear on its own.
//
// Non-obvious decisions:
// - The whole unquantised model never exists: a loader fills one tensor at a time and quantises
//   each projection as it arrives (interop::load_hf_base), so loading peaks at the quantised base,
//   the non-projection tensors and one projection in flight.
// - Every rank quantises whole modules, never its tensor-parallel slice: double quantisation's
//   statistics (the offset, each group of 256 absmaxes) belong to the whole module, so a slice
//   keeps bitsandbytes' bits only when cut from the whole module's quantisation (nf4.h, View).
// - A loader may hold only a range of layers (a pipeline stage's); the non-projection tensors are
//   always whole-model sized (norms are small; a stage takes what it holds).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/core/nf4.h"
#include "engine/model/lora.h"
#include "engine/model/model_dims.h"

namespace flotilla {

// The modules of a Llama layer, in LoraTarget order (q, k, v, o, gate, up, down).
constexpr int kBaseModules = kNumLoraTargets;

// Where module m (a LoraTarget) lives: its architecture tensor (llama.h kQkv, kAttnOut, kGateUp,
// kDown), its first row in that fused per-layer tensor, and its [out x in] shape.
struct BaseModule {
  int tensor = 0;
  int row0 = 0;
  int out = 0, in = 0;
};
BaseModule base_module(const ModelDims& d, int module);
// Whether architecture tensor i is one of the fused projections (held quantised under QLoRA).
bool is_projection_tensor(int tensor);

// Why a QLoRA base of dims d cannot be held with tensor parallelism tp (a module whose in-width is
// not a multiple of 64, or a row-parallel module whose per-rank slice is not), or "": the numbers,
// the module and what to do. validate() and Model's constructor report it before anything starts.
std::string nf4_layout_problem(const ModelDims& d, int tp);

struct BaseWeights {
  ModelDims dims;
  bool nf4 = false;                    // projections quantised (else in `dense` like every other tensor)
  bool double_quant = true;            // nf4: the modules' absmaxes are 8-bit
  int layer_begin = 0, layer_end = 0;  // the layers whose projections are held (nf4)
  // Architecture tensor i (param_layout.h order) of the whole model in fp32, full_size(i) floats;
  // empty for the projection tensors under nf4.
  std::vector<std::vector<float>> dense;
  // nf4: modules[(l - layer_begin) * kBaseModules + m], each of shape [out, in].
  std::vector<nf4::Quantized> modules;

  bool holds_layer(int l) const { return l >= layer_begin && l < layer_end; }
  const nf4::Quantized& module(int layer, int m) const;
  nf4::Quantized& module(int layer, int m);
  size_t dense_bytes() const;
  size_t quantized_bytes() const;  // packed codes and statistics of every held module
};

// Fills architecture tensor `tensor` (the whole model's, n floats) in place.
using BaseTensorFill = std::function<void(int tensor, float* t, size_t n)>;

// A base of dims d built tensor by tensor from fill (the projections quantised as they come when
// nf4, only for layers [layer_begin, layer_end); layer_end -1 = all): random initialisation,
// a full vector, tests.
BaseWeights make_base_weights(const ModelDims& d, bool nf4, bool double_quant, const BaseTensorFill& fill,
                              int layer_begin = 0, int layer_end = -1);
// The architecture's random initialisation (Model::init_random's base, llama::init_tensor) as a
// base: what a QLoRA run without model.init_from trains over.
BaseWeights random_base_weights(const ModelDims& d, uint64_t seed, bool nf4, bool double_quant,
                                int layer_begin = 0, int layer_end = -1);
// The same from a whole model's fp32 parameters (ParamLayout(d).full_params() floats).
BaseWeights base_weights_from_full(const ModelDims& d, const float* full, bool nf4, bool double_quant);
// Into a full fp32 vector: the dense tensors, and every held module dequantised (what the model
// computes with, before rounding to its compute dtype); layers not held are left untouched.
void base_weights_to_full(const BaseWeights& b, float* full);

}  // namespace flotilla
