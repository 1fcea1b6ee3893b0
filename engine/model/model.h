// A transformer on any backend: parameters, gradients, activations and the training step's
// forward and backward for one architecture (DESIGN.md §3; docs/models.md "The model seam").
//
// Non-obvious decision: there is one Model for every architecture and backend. What a step does
// (which kernels, on which buffers, with which tensor-parallel collectives) is written once per
// architecture (gpt2_pass.cpp, llama_pass.cpp), templated on the storage type (float or bf16_t),
// over the Backend interface; the buffers come from the backend's allocator, so the same code runs
// in fp32 on the CPU and in fp32 or bf16 on a GPU. Everything around the pass is generic: the
// parameter layout (param_layout.h), tensor and pipeline shards, activation slots for pipelining,
// recomputation, ZeRO-2 gradient staging and the data-parallel layer hook.
//
// Parameters live in one contiguous buffer in the architecture's table order (for GPT-2 llm.c's:
// wte, wpe, then per-layer stacks, then lnf), each per-layer tensor stored for all local layers
// together; gradients mirror the layout. Under LoRA (ModelOptions::lora) the *trainable* parameters
// are the adapters, in their own table (lora.h): layout(), params(), grads() and every accessor
// below that the optimizer, data parallelism and checkpoints use mean the adapters, so those work
// unchanged; the frozen architecture weights are the "base" (base_layout(), set_base_from_full()),
// which have no gradient buffer at all. Under tensor/pipeline parallelism a Model holds one
// shard (model_shard.h). A pipeline stage keeps one activation set per in-flight micro-batch
// ("slot") and exchanges fp32 (B*T, C) activations and gradients at its boundaries.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "engine/backend/backend.h"
#include "engine/model/lora.h"
#include "engine/model/model_dims.h"
#include "engine/model/model_shard.h"
#include "engine/model/param_layout.h"

namespace flotilla {

namespace comm {
class ProcessGroup;
}
struct BaseWeights;  // base_weights.h

struct ModelOptions {
  DType dtype = DType::kF32;  // storage of parameters, gradients and activations
  // GPT-2's GELU output: kept per layer (saves recomputing it in backward; what a GPU can afford)
  // or one scratch buffer recomputed in backward (the CPU's choice: a third less activation memory).
  bool keep_gelu = false;
  bool fuse_gelu = false;  // with keep_gelu: GELU in the MLP-up matmul's epilogue where the backend has it
  // Parameter buffer capacity in elements when larger than the parameter count (ZeRO-1's in-place
  // all-gather on a device writes a padded vector); 0 = exactly num_params().
  size_t param_capacity = 0;
  // Pipeline stages on a device: allocate the fp32 receive buffers (stage_recv_buffer) with the
  // activations in reserve() and count them in activation_bytes() (the host runner keeps its own).
  bool stage_buffers = false;
  // LoRA (lora.h; rank 0: off): the architecture's weights are frozen (no gradient buffer, no weight
  // gradient computed) and the adapters are the model's parameters (see "Parameters" below).
  LoraSpec lora;
  // The LM head and loss of a forward with targets run over chunks of this many rows of the (B*T, Vl)
  // logits (logits_chunk_rows() below; train.logits_chunk_mb), so the arena holds one chunk, never
  // B x T x V; 0 = the whole tensor at once (inference's default). See "The fused LM head" below.
  int logits_chunk_rows = 0;
};

// Rows of logits one chunk of the LM head computes: chunk_mb MiB of (rows, Vl) values of
// bytes_per_value bytes (Vl = this shard's vocabulary columns), rounded down to a multiple of 64 and
// at least 256 rows (smaller GEMMs lose efficiency), at most N = B*T rows; then evened out over the
// chunks N needs (ceil(N / chunks), rounded up to 64 within the budget: N = 4096 in chunks of 1344
// becomes 4 x 1024, so backward recomputes 3072 rows, not 4032); chunk_mb <= 0: N (the whole
// tensor). The one rule the trainer, the GPU trainer, bench and the planner all use.
int logits_chunk_rows(const ModelDims& dims, const ModelShard& shard, size_t bytes_per_value, double chunk_mb,
                      long N);

// Bytes a Model of these dims would allocate for activations at B x T (activation_bytes_for
// without a Model): `slots` arenas, the recompute region and, with options.stage_buffers, the
// pipeline receive buffers; `alignment` is the backend's (Backend::alignment()).
size_t activation_bytes_for(const ModelDims& dims, const ModelShard& shard, int B, int T, bool recompute,
                            const ModelOptions& options, size_t alignment = 64, int slots = 1);

// Bytes a QLoRA Model (lora.nf4) of these dims allocates for its shard's quantised projections
// (base_quant_bytes() without a Model; 0 without nf4): every local module slice's packed codes and
// statistics, each piece aligned to `alignment` (the backend's).
size_t nf4_base_bytes_for(const ModelDims& dims, const ModelShard& shard, const LoraSpec& lora,
                          size_t alignment = 64);

class Model {
 public:
  // On `backend` (nullptr: the CPU backend).
  explicit Model(const ModelDims& dims, const ModelShard& shard = {}, Backend* backend = nullptr,
                 const ModelOptions& options = {});
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const ModelDims& dims() const;           // the full model's dimensions
  const ModelShard& shard() const;         // which part this instance holds (resolved)
  const ParamLayout& layout() const;       // the trainable tensors' table: the architecture's, or LoRA's
  const ParamLayout& base_layout() const;  // the architecture's table (= layout() without LoRA)
  const LoraSpec& lora() const;            // rank 0 without LoRA
  const ModelOptions& options() const;
  Backend& backend();
  DType dtype() const;

  // The architecture's initialisation (GPT-2: N(0, 0.02), residual projections scaled by
  // 1/sqrt(2L), biases 0, norms 1; llama: N(0, 0.02) for every matrix, biases 0, norms 1), padded
  // vocab rows zero; under LoRA also the adapters' (lora_init_tensor: A uniform, B zero).
  // Deterministic for a seed, and a shard gets exactly its slice of the whole model's initialisation.
  // base = false leaves the frozen base alone (a LoRA run about to load it: a QLoRA base is
  // quantised as it is made, so making a random one first would cost the whole model's time).
  void init_random(uint64_t seed, bool base = true);
  // The frozen base of a LoRA model (the whole parameter set otherwise): this shard's slice of /
  // into a full fp32 vector of base_layout().full_params() floats, and its local element count.
  void set_base_from_full(const float* full);
  void base_to_full(float* full) const;
  size_t num_base_params() const;
  void* base_param_data();  // the base's raw buffer (dtype() elements)
  // The frozen base from the host (base_weights.h): this shard's slice of every tensor, and under
  // QLoRA (options.lora.nf4) of every projection module's quantisation, which then lives in backend
  // memory as packed codes and statistics only (the dense base buffer holds no projection). b
  // must be of this model's dims (and nf4 / double_quant), holding at least this stage's layers.
  // Under QLoRA set_base_from_full quantises the full vector's projections, and base_to_full
  // writes them dequantised (fp32, before rounding to the compute dtype).
  void set_base(const BaseWeights& b);
  // The same, releasing each tensor's and module's host memory as soon as it is in the model, so
  // the host never holds the base twice (the trainer's CPU path).
  void set_base(BaseWeights&& b);
  bool nf4_base() const;            // the projections are held in NF4 (options().lora.nf4)
  size_t base_quant_bytes() const;  // backend bytes of the quantised projections (0 without nf4)
  // QLoRA: local layer l's module m (a LoraTarget) as the kernels read it (backend memory).
  nf4::View base_module_view(int layer, int module) const;

  // LoRA dropout: forwards draw masks only while training (evaluation and sampling set false), and
  // the masks of a forward are keyed by the step and stream (the data-parallel rank) given here
  // and the forward's index since (the trainer calls it once per optimizer step, so a resumed run
  // draws the same masks; engine/core/lora_mask.h).
  void set_training(bool on);
  void set_dropout_step(int64_t step, int stream = 0);
  // This shard's slice of / into a full fp32 parameter vector of layout().full_params() floats.
  void set_params_from_full(const float* full);
  void params_to_full(float* full) const;  // writes only the floats this shard holds
  // This shard's (trainable) parameters as host fp32 in the local layout (num_params() floats), any
  // backend and storage type (bf16 is widened / rounded to nearest even).
  void get_params(float* host) const;
  void set_params(const float* host);

  // Host fp32 views (only on a host-memory backend with fp32 storage; throws otherwise).
  float* params();  // num_params() floats
  const float* params() const;
  float* grads();                  // same layout (throws once layer-gradient staging is enabled)
  float* param_tensor(int index);  // start of tensor `index` inside params()
  float* grad_tensor(int index);   // staged: only the non-layer tensors
  // The raw buffers in the backend's memory, dtype() elements.
  void* param_data();
  void* grad_data();  // gradients: the full layout, or under staging the non-layer tensors compactly
  size_t num_params() const;
  size_t param_offset(int index) const;  // elements, into the parameter buffer
  size_t param_size(int index) const;    // elements of tensor `index` in this shard (0: not held)
  size_t grad_offset(int index) const;   // elements, into grad_data() (non-layer tensors when staged)
  int tied_tensor()
      const;  // the embedding when the LM head shares it (its gradient is summed between stages), else -1

  // ZeRO-2 layer-gradient staging: the per-layer tensors' gradients no longer get a full-size
  // buffer. Layer l's slices are written to staging slot l % 2 (layer_grad_floats() elements,
  // tensors in table order, each its layer-l slice at layer_grad_offset(i)), so the backward of
  // layer l-1 can run while slot l % 2 is being reduced. The layer backward hook must drain
  // (reduce, then zero) slot (l+1) % 2 before it returns from layer l, and every slot must be zero
  // at the start of a backward; backward() refuses to run without a hook. Non-layer tensors keep a
  // compact gradient buffer. Irreversible; frees the full-size buffer.
  void enable_layer_grad_staging();
  bool layer_grad_staged() const;
  size_t layer_grad_floats() const;           // one layer's gradient elements
  size_t layer_grad_offset(int index) const;  // tensor `index`'s slice within a slot
  float* layer_grad_slot(int slot);           // slot 0 or 1 (host fp32 view)
  void* layer_grad_slot_data(int slot);       // slot 0 or 1 (backend memory, dtype() elements)
  size_t grad_bytes() const;                  // bytes allocated for gradients (buffer + staging)

  // Tensor parallelism: the TP group (size shard().tp) the forward and backward all-reduce over.
  // Must be set before the first forward when shard().tp > 1; not owned.
  void set_tensor_parallel_group(comm::ProcessGroup* tp);

  // Allocates the activations for micro-batches up to B x T now (a device checks its memory up
  // front); otherwise buffers grow on first use of a larger B*T.
  void reserve(int B, int T);
  // Bytes reserve(B, T) would allocate for activations (every slot, the recompute region and
  // the stage buffers), without allocating: the planner's and the device's memory prediction.
  size_t activation_bytes_for(int B, int T) const;

  // The fused LM head (ModelOptions::logits_chunk_rows = R < B*T): a forward with targets computes,
  // chunk by chunk of R rows, the logits then their cross-entropy (per-row losses and log-sum-exp;
  // under TP each rank's local statistics, combined by the same two collectives once after every
  // chunk). The arena keeps one chunk: the last one's logits stay there, so backward starts from
  // them and recomputes the other chunks' logits (one head GEMM each) before turning them into
  // d(logits) in place and into d(final norm output) and d(head). With one chunk nothing changes:
  // the kernels and results are exactly those of R = 0. A forward without targets still needs every
  // logit: with more rows than R they go to a separate buffer allocated on first use (inference).
  // Forward pass on B sequences of T tokens (host token ids; T <= max_seq_len). positions (B*T,
  // host) or nullptr: each token's position within its document (attention stays inside the
  // document and positions restart; docs/data.md); nullptr = 0..T-1 in every row. Targets equal
  // to kIgnoreTarget carry no loss. Returns the mean cross-entropy over the counted targets when
  // targets != nullptr (0 when none counts), else -1 (logits only). Activations are kept for backward.
  float forward(const int32_t* inputs, const int32_t* targets, int B, int T,
                const int32_t* positions = nullptr);

  // Backward of the last forward (which must have had targets). Gradients are ACCUMULATED into
  // grads() (call zero_grad() first); d(loss) per counted target is loss_scale / counted targets
  // of that forward (loss_scale = 1/accumulation steps for unmasked data).
  void backward(float loss_scale = 1.0f);
  // Targets counted by the last forward of `slot` (not kIgnoreTarget).
  int64_t counted_targets(int slot = 0) const;

  void zero_grad();

  // Called during backward() right after layer `layer`'s parameter gradient kernels are queued
  // (layers arrive from the last to the first; `layer` is the index among this shard's layers),
  // then once with -1 after the embedding's, so data parallelism can start reducing them while
  // the remaining layers compute. On a device the kernels may still be running: a hook that
  // reads the gradients on the host synchronises first, one that launches collectives orders
  // them after the backend's stream(). nullptr removes the hook.
  void set_layer_backward_hook(std::function<void(int layer)> hook);

  // --- Pipeline stages. forward()/backward() above are forward_stage(0, ...)/backward_stage(0, ...)
  // of a single-stage model. A stage keeps `slots` activation sets (in-flight micro-batches).
  void set_activation_slots(int slots);
  int activation_slots() const;
  // inputs: token ids (read on the first stage; others may pass nullptr); stage_in: the previous
  // stage's output, fp32 (B*T, C) in backend memory (non-first stages); targets: read on the last
  // stage. Returns the mean loss on the last stage with targets, else -1.
  float forward_stage(int slot, const int32_t* inputs, const float* stage_in, const int32_t* targets, int B,
                      int T, const int32_t* positions = nullptr);
  // fp32 (B*T, C) output of this stage's last block for the slot's forward (non-last stages).
  const float* stage_output(int slot);
  // dout: d(stage output), fp32 (B*T, C), on non-last stages (the last starts from its loss).
  // Accumulates gradients like backward(); afterwards stage_input_grad() holds d(stage input).
  void backward_stage(int slot, const float* dout, float loss_scale);
  const float* stage_input_grad();  // valid until the next backward_stage
  // fp32 (B*T, C) buffers in backend memory to receive the previous stage's output (grad = false)
  // or the next stage's d(input) (grad = true) into, for B x T of the last reserve()/forward.
  float* stage_recv_buffer(bool grad);

  // Logits of the last forward as host fp32: (B, T, Vp) (forward_cached with logit_at: (B, Vp));
  // only the first V columns are meaningful.
  // On a TP shard: this rank's (B, T, Vp/tp) vocabulary columns. Host fp32 models only (else
  // nullptr; copy_logits works everywhere).
  const float* logits() const;
  void copy_logits(float* host) const;  // the last forward's local logits, widened to fp32

  // Bytes held in activation buffers after the last forward (for the planner check): every
  // slot's arena plus the recompute block region and the stage buffers.
  size_t activation_bytes() const;

  // Activation recomputation (train.recompute). Forward keeps only each block's output (the next
  // block's input); backward re-runs block l's forward from its input into one block region
  // shared by all slots, just before block l's backward. The kernels and their order are those of
  // the forward, so losses and gradients are bitwise those without recomputation. Drops any
  // forward not yet consumed by backward.
  void set_recompute(bool on);
  bool recompute() const;

  // --- Inference with a KV cache (engine/infer/generate.cpp). A whole model only (no tensor or
  // pipeline shard). enable_kv_cache allocates, per layer, K and V for max_rows rows of max_len
  // positions (n_kv_head x head_dim each, dtype() elements; max_len <= max_seq_len), replacing any
  // earlier cache; disable_kv_cache frees it.
  void enable_kv_cache(int max_rows, int max_len);
  void disable_kv_cache();
  int kv_cache_rows() const;  // 0: no cache
  int kv_cache_len() const;
  size_t kv_cache_bytes() const;
  // B rows of T new tokens against the cache: batch row b is cache row row0 + b, token (b, t) sits
  // at absolute position positions[b*T + t] (host, each < kv_cache_len(); the position wpe and RoPE
  // use). Its K and V are written there and it attends over positions 0 .. positions[b*T + t] of its
  // cache row, so a row's earlier tokens must already be cached; other cache rows are untouched.
  // logit_at (host, B entries) or nullptr: the logits of token logit_at[b] of each row only, (B, Vp)
  // (a prefill needs no more), else (B, T, Vp) as forward's. Logits only: no loss, no backward.
  void forward_cached(const int32_t* inputs, const int32_t* positions, int B, int T, int row0 = 0,
                      const int32_t* logit_at = nullptr);

  struct Impl;  // model_impl.h (named here so the architecture passes can take it)

 private:
  void set_base_impl(BaseWeights& b, bool consume);
  std::unique_ptr<Impl> impl_;
};

}  // namespace flotilla
