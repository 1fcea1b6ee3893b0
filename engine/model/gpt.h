// GPT-2 model on the CPU backend: parameter layout, forward, backward (DESIGN.md §3).
//
// Parameters live in one contiguous fp32 buffer in llm.c's order (so checkpoints, llm.c .bin and
// safetensors conversion are plain copies): wte, wpe, then per-layer stacks ln1w, ln1b, qkvw, qkvb,
// attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb, then lnfw, lnfb. Linear weights are
// stored (out, in) like torch.nn.Linear. Gradients mirror the same layout in a second buffer.
//
// Under tensor/pipeline parallelism a GptModel holds one shard (gpt_shard.h): the same tensor
// order with local sizes, its stage's layers only, and the Megatron all-reduces over the TP group
// inside forward and backward. A pipeline stage keeps one activation set per in-flight
// micro-batch ("slot") and exchanges (B*T, C) activations and gradients at its boundaries.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "engine/config/run_config.h"

namespace flotilla {

namespace parallel {
class ProcessGroup;
}
struct GptShard;

struct GptDims {
  int n_layer = 4;
  int n_head = 4;
  int n_embd = 256;          // C
  int vocab_size = 50257;    // V: real vocabulary
  int padded_vocab = 50304;  // Vp: V rounded up to a multiple of 128 (extra rows never receive targets)
  int max_seq_len = 1024;    // maxT: rows of wpe
};

GptDims dims_from_config(const ModelSection& m);
int pad_vocab(int vocab_size);  // multiple of 128

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

const char* param_name(int index);  // "wte", "wpe", "ln1w", ...
bool param_decays(int index);       // weight decay applies (2-D weights and embeddings)
bool is_layer_param(int index);     // one slice per layer (not wte, wpe, lnfw, lnfb)
std::array<size_t, kNumParamTensors> param_sizes(const GptDims& d);
size_t num_parameters(const GptDims& d);           // sum of param_sizes (with padded vocab)
size_t num_parameters_unpadded(const GptDims& d);  // as reported to users (real vocab)

// Floats held by the model's activation and scratch buffers after forward(B, T) (exactly what
// GptModel::activation_bytes() / 4 reports for a model whose largest forward was B x T), for the
// planner's memory prediction. With N = B*T, one arena holds:
//   kept for backward, per layer: ln1 (N,C), ln1 mean/rstd (N)x2, qkv (N,3C), atty (N,C),
//     attention log-sum-exp (B,NH,T), residual2 (N,C), ln2 (N,C), ln2 mean/rstd (N)x2, fch (N,4C),
//     residual3 (N,C)                                      = L * (N*12C + 4N + B*NH*T)
//   kept once: encoded (N,C), lnf (N,C), lnf mean/rstd (N)x2, logits (N,Vp) (overwritten by
//     dlogits in backward), per-row losses and log-sum-exp (N)x2, input and target ids (N)x2
//   scratch: gelu output (N,4C; recomputed in backward instead of stored per layer), projection
//     output / d atty (N,C), d residual (N,C), d ln (N,C), d fch / d qkv (N,4C)
// With recompute (GptModel::set_recompute), only residual3 (N,C) stays per layer (it is the next
// block's input; `encoded` is the first block's); ln1 .. fch keep one layer's worth, in a block
// region rebuilt by backward, so the kept-per-layer part drops from L*(N*12C + 4N + B*NH*T) to
// L*N*C + (N*11C + 4N + B*NH*T).
// Not included: per-thread attention scratch (2*64*T + T floats per thread, at most ~0.5 MiB)
// and BLAS's internal packing buffers.
size_t activation_floats(const GptDims& d, int B, int T, bool recompute = false);

class GptModel {
 public:
  explicit GptModel(const GptDims& dims);
  // One shard of the model (tensor and/or pipeline parallel); GptShard{} is the whole model.
  GptModel(const GptDims& dims, const GptShard& shard);
  ~GptModel();
  GptModel(const GptModel&) = delete;
  GptModel& operator=(const GptModel&) = delete;

  const GptDims& dims() const;    // the full model's dimensions
  const GptShard& shard() const;  // which part this instance holds (resolved)

  // GPT-2 initialisation: N(0, 0.02), residual projections (attproj, fcproj) scaled by 1/sqrt(2L),
  // biases zero, LayerNorm weights one; padded vocab rows zero. Deterministic for a seed, and a
  // shard gets exactly its slice of the whole model's initialisation.
  void init_random(uint64_t seed);
  // This shard's slice of / into a full llm.c-layout vector of num_parameters(dims()) floats.
  void set_params_from_full(const float* full);
  void params_to_full(float* full) const;  // writes only the floats this shard holds

  float* params();  // num_params() floats (num_parameters(dims()) for the whole model)
  const float* params() const;
  float* grads();  // same layout (throws once layer-gradient staging is enabled)
  size_t num_params() const;
  float* param_tensor(int index);  // start of tensor `index` inside params()
  float* grad_tensor(int index);   // staged: only the non-layer tensors (wte, wpe, lnfw, lnfb)

  // ZeRO-2 layer-gradient staging: the per-layer tensors' gradients no longer get a full-size
  // buffer. Layer l's 12 gradient slices are written to staging slot l % 2 (layer_grad_floats()
  // floats, tensors in ParamIndex order, each its layer-l slice), so the backward of layer l-1
  // can run while slot l % 2 is being reduced. The layer backward hook must drain (reduce, then
  // zero) slot (l+1) % 2 before it returns from layer l, and every slot must be zero at the start of
  // a backward; backward() refuses to run without a hook. wte, wpe and the final LayerNorm keep a
  // full-size (compact) gradient buffer. Irreversible; frees the full-size buffer.
  void enable_layer_grad_staging();
  bool layer_grad_staged() const;
  size_t layer_grad_floats() const;  // one layer's gradient floats
  float* layer_grad_slot(int slot);  // slot 0 or 1
  size_t grad_bytes() const;         // bytes allocated for gradients (buffer + staging)
  size_t param_offset(int index) const;
  size_t param_size(int index) const;  // floats of tensor `index` in this shard (0: not held)

  // Tensor parallelism: the TP group (size shard().tp) the forward and backward all-reduce over.
  // Must be set before the first forward when shard().tp > 1; not owned.
  void set_tensor_parallel_group(parallel::ProcessGroup* tp);

  // Forward pass on B sequences of T tokens (T <= max_seq_len). Returns the mean cross-entropy
  // over the B*T targets when targets != nullptr, else -1 (logits only). Activations are kept for
  // backward; buffers grow on first use of a larger B*T.
  float forward(const int32_t* inputs, const int32_t* targets, int B, int T);

  // Backward of the last forward (which must have had targets). Gradients are ACCUMULATED into
  // grads() (call zero_grad() first); d(loss) is scaled by loss_scale (1/accumulation steps).
  void backward(float loss_scale = 1.0f);

  void zero_grad();

  // Called during backward() right after layer `layer`'s parameter gradients are final (layers
  // arrive from the last to the first; `layer` is the index among this shard's layers, 0-based),
  // so data parallelism can start reducing them while the remaining layers compute. nullptr
  // removes the hook.
  void set_layer_backward_hook(std::function<void(int layer)> hook);

  // --- Pipeline stages. forward()/backward() above are forward_stage(0, ...)/backward_stage(0, ...)
  // of a single-stage model. A stage keeps `slots` activation sets (in-flight micro-batches).
  void set_activation_slots(int slots);
  int activation_slots() const;
  // inputs: token ids (read on the first stage; others may pass nullptr); stage_in: the previous
  // stage's output, (B*T, C) (non-first stages); targets: read on the last stage. Returns the
  // mean loss on the last stage with targets, else -1.
  float forward_stage(int slot, const int32_t* inputs, const float* stage_in, const int32_t* targets, int B,
                      int T);
  // (B*T, C) output of this stage's last block for the slot's forward (non-last stages).
  const float* stage_output(int slot) const;
  // dout: d(stage output), (B*T, C), on non-last stages (the last starts from its loss).
  // Accumulates gradients like backward(); afterwards stage_input_grad() holds d(stage input).
  void backward_stage(int slot, const float* dout, float loss_scale);
  const float* stage_input_grad() const;  // valid until the next backward_stage

  // Logits of the last forward: (B, T, Vp); only the first V columns are meaningful. On a TP
  // shard: this rank's (B, T, Vp/tp) vocabulary columns.
  const float* logits() const;

  // Bytes held in activation buffers after the last forward (for the planner check): every
  // slot's arena plus the recompute block region.
  size_t activation_bytes() const;

  // Activation recomputation (train.recompute). Forward keeps only each block's output (the next
  // block's input); backward re-runs block l's forward from its input into one block region
  // shared by all slots, just before block l's backward, up to the GELU output (the MLP-down
  // projection and the last residual add are not needed by backward and are skipped). The
  // kernels and their order are those of the forward, so losses and gradients are bitwise
  // those without recomputation. Costs one extra forward of every block but the one still in
  // place (the last block, when backward follows its own forward), and under TP one more
  // all-reduce per recomputed block. Drops any forward not yet consumed by backward.
  void set_recompute(bool on);
  bool recompute() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace flotilla
