// LoRA (low-rank adaptation, Hu et al. 2021) as the engine trains it: which projections carry an
// adapter, its rank and scaling, and the adapters' own parameter table (docs/lora.md).
//
// A target projection y = x W^T (W: out x in, frozen) becomes y = x W^T + s * (drop(x) A^T) B^T with
// A (r x in) and B (out x r) trainable and s = alpha / r (alpha / sqrt(r) with rsLoRA), as PEFT's
// LoraLayer computes it. The adapters form their own flat parameter vector, described by a
// ParamLayout table like any architecture's (param_layout.h: lora_table), so data parallelism,
// ZeRO, the optimizer, checkpoints and shard gathering work on it unchanged.
//
// Non-obvious decisions:
// - Tensor parallelism splits each adapter like its base projection: a column-parallel target
//   (q, k, v, gate, up: output rows split) keeps A replicated and splits B by output rows; a
//   row-parallel one (o, down: input columns split) splits A by input columns and keeps B
//   replicated. Each replicated adapter's gradient is then a partial sum on each TP rank, so the
//   pass sums it over the TP group once per layer and micro-batch (the Qwen 3 q/k-norm rule), and the
//   replicas stay bitwise equal.
// - Each target's dropout mask is its own (PEFT gives every adapted module its own Dropout), a
//   hash of (seed, step, micro-batch, layer, target, element): the same on any device, thread count
//   or layout, recomputed in backward instead of stored.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace flotilla {

struct RunConfig;
struct ModelDims;
struct TensorSpec;

// The Llama family's projections, in the adapter table's order (Hugging Face module names).
enum LoraTarget : int { kLoraQ = 0, kLoraK, kLoraV, kLoraO, kLoraGate, kLoraUp, kLoraDown, kNumLoraTargets };

const char* lora_target_name(int target);       // "q_proj", ..., "down_proj"
int find_lora_target(const std::string& name);  // -1 when not a Llama projection name
// Column-parallel targets (q, k, v, gate, up) split their output rows under tensor parallelism;
// row-parallel ones (o, down) their input columns.
bool lora_column_parallel(int target);

// What lora.targets names, as a bit set over LoraTarget: "all-linear" (every projection),
// "attention" (q, k, v, o), "mlp" (gate, up, down) or a comma-separated list of module names.
// Throws Error(kConfig) naming lora.targets and the offending word.
uint32_t parse_lora_targets(const std::string& text);
// The comma list of a target set in table order ("q_proj,v_proj").
std::string lora_targets_text(uint32_t targets);

struct LoraSpec {
  int rank = 0;  // 0: no LoRA (full training)
  double alpha = 0;
  float dropout = 0;
  bool rslora = false;
  uint32_t targets = 0;  // bits of LoraTarget
  uint64_t seed = 0;     // dropout masks
  // QLoRA (engine/core/nf4.h, docs/qlora.md): every base projection (q, k, v, o, gate, up, down, of
  // every layer, adapted or not) is held in 4-bit NF4, as bitsandbytes quantises every nn.Linear but
  // the LM head; the embedding, norms and head stay in the compute dtype.
  bool nf4 = false;
  bool double_quant = true;  // nf4: 8-bit block absmaxes (else fp32)

  bool enabled() const { return rank > 0; }
  bool has(int target) const { return (targets >> target) & 1u; }
  int count() const;  // targets with an adapter
  // s = alpha / r (alpha / sqrt(r) with rsLoRA), computed in double and rounded once, as PEFT
  // multiplies the float32 adapter output by its Python float scaling.
  float scale() const;
  // Tensor indices of target t's A and B in the adapter table (-1 when t has none).
  int a_index(int target) const;
  int b_index(int target) const { return a_index(target) < 0 ? -1 : a_index(target) + 1; }
};

// The spec of a config's [lora] section (rank 0 when lora.enabled is false); the targets must
// parse (validate() checks them first).
LoraSpec lora_spec(const RunConfig& config);

// (in, out) widths of target t's projection for a model of dims d (the whole model's).
std::pair<int, int> lora_target_shape(const ModelDims& d, int target);

// The adapters' parameter table: for each target in order, lora_A.<name> (L, r, in) then
// lora_B.<name> (L, out, r), per layer, decaying (AdamW's weight decay applies to both).
std::vector<TensorSpec> lora_table(const ModelDims& d, const LoraSpec& spec);

// Trainable adapter parameters of the whole model.
size_t lora_parameter_count(const ModelDims& d, const LoraSpec& spec);

// Tensor i of the whole adapter table (n floats) as PEFT initialises it: A uniform in
// [-1/sqrt(in), 1/sqrt(in)] (kaiming_uniform_ with a = sqrt(5)), B zero. Deterministic for a seed.
void lora_init_tensor(const ModelDims& d, const LoraSpec& spec, int tensor, float* t, size_t n,
                      uint64_t seed);

}  // namespace flotilla
