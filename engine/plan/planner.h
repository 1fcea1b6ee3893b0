// The planner: what a run config costs before it runs (DESIGN.md §3 Planner, docs/planner.md).
// Pure functions of a RunConfig and a device profile: parameters, FLOPs per token, memory per
// device by component under every layout (ZeRO, TP, PP, recomputation, bf16), communication volume,
// pipeline bubble and predicted step time.
//
// Decision: activation memory is not modelled here from first principles but taken from the
// model's own buffer accounting (activation_floats in engine/model/gpt.h, see planner_model.cpp),
// so a change to the model's buffers moves the plan with it; the planner only scales that figure
// for the layout (layers per stage, in-flight micro-batches, TP shards, recomputation).
//
// Under LoRA (lora.enabled, engine/model/lora.h) the architecture's weights are a frozen base in
// the storage dtype and only the adapters carry gradients, AdamW state and fp32 masters: ZeRO
// shards the adapters' state, TP and PP split the base as in full training, and the adapters'
// activation buffers come from the same model accounting run with the LoRA options.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/config/run_config.h"
#include "engine/model/gpt.h"
#include "engine/model/lora.h"

namespace flotilla {

// What one rank's device offers. flops_per_s is the peak for the run's dtype; link_bytes_per_s the
// collective bus bandwidth between ranks (nccl-tests' busbw: all-reduce time = bytes*2(n-1)/n / bw).
struct DeviceProfile {
  std::string name;
  double flops_per_s = 0;
  uint64_t mem_bytes = 0;
  double link_bytes_per_s = 0;
  std::string mem_note = {};         // where mem_bytes comes from, e.g. the binding limit (memory_limit.h)
  bool mem_shared_by_ranks = false;  // host memory: every rank of the run on this machine shares it
  double link_latency_s = 0;         // one collective's fixed cost (bench-comm's small-message time)
};

// ---- parameters and FLOPs ----------------------------------------------------------------------

struct ParamCounts {
  uint64_t allocated = 0;      // as stored: token embedding padded to a multiple of 128 rows
  uint64_t total = 0;          // as reported (real vocabulary): gpt2-124m = 124,439,808
  uint64_t embedding = 0;      // token (real vocab) + position embeddings
  uint64_t non_embedding = 0;  // total - embedding: the transformer blocks and the final LayerNorm
  uint64_t trainable = 0;      // what gets gradients: = total, or the LoRA adapters (lora_parameter_count)
};
ParamCounts count_parameters(const ModelDims& dims);
// The same with `trainable` the adapters' count when lora.enabled() (total otherwise).
ParamCounts count_parameters(const ModelDims& dims, const LoraSpec& lora);

// Model FLOPs per trained token (forward + backward), both conventions, each with its own N:
//   palm: 6N + 12*L*C*T, N = all parameters except the position table, real vocabulary (PaLM
//         appendix B as nanoGPT applies it: the tied token embedding is the LM-head matmul, so it
//         counts; the position lookup does no FLOPs). Attention counted over the full T x T.
//   llmc: 6N + 6*L*C*T, N = every allocated parameter (padded vocab, position table included), as
//         llm.c's gpt2_estimate_mfu; the attention term is halved for causality.
struct FlopsPerToken {
  double palm = 0;
  double llmc = 0;
  uint64_t n_palm = 0;
  uint64_t n_llmc = 0;
};
FlopsPerToken flops_per_token(const ModelDims& dims, int seq_len);
// Under LoRA (lora.h; the plain form when !lora.enabled()): the frozen base does its forward (2N)
// and the input-gradient half of its backward (2N) but no weight-gradient GEMMs, the adapters all
// three (6 N_lora), and attention is unchanged: palm = 4 N + 6 N_lora + 12 L Q T (llmc: 4 N + 6
// N_lora + 6 L Q T, with its own N). This is the model FLOPs figure LoRA runs report MFU against.
FlopsPerToken flops_per_token(const ModelDims& dims, int seq_len, const LoraSpec& lora);

// FLOPs per token of re-running one block's forward under recomputation (Model::set_recompute):
// up to the GELU output, i.e. 2 x (block parameters - MLP-down weight and bias) + 4*C*T attention.
double recompute_flops_per_token(const ModelDims& dims, int seq_len);
// Under LoRA the rebuild also re-runs the adapters it passes (q, k, v, o, gate, up: 2 x their A and
// B) and down's A (its input product, which the rebuild does not keep): 2 x (adapter parameters of
// one block - down's B) on top of the plain figure.
double recompute_flops_per_token(const ModelDims& dims, int seq_len, const LoraSpec& lora);

// ---- the CPU step's work (cpu_time.cpp) ------------------------------------------------------------

// A CPU step priced in matmul-FLOP equivalents: each kernel family's work times the cost of one of
// its units relative to one FLOP of the linear layers' sgemm, so compute = total / (peak x
// efficiency) with one efficiency (the sgemm's fraction of the FMA ceiling) for every model and
// length. The costs were measured on the 2-core reference machine (AMD EPYC Zen 4, avx512, bench
// --profile of SmolLM2-135M and Qwen2.5-0.5B at T = 256 to 4096; docs/planner.md).
struct CpuWork {
  double matmul = 0;       // FLOPs of the linear layers and the LM head (LoRA: 4N + 6 N_lora), rebuilds too
  double attention = 0;    // the attention kernel's executed FLOPs x kCpuAttentionCost
  double elementwise = 0;  // norms, RoPE, SwiGLU/GELU, residuals, the loss: values x their cost
  double optimizer = 0;    // gradient clipping and AdamW: trained parameters x kCpuOptimizerCost
  double total() const;
};
// The CPU attention kernel's query block (engine/cpu/attention.cpp): the diagonal block is computed whole.
inline constexpr int kCpuAttentionBlock = 64;
// Cost of one executed attention FLOP, one memory-bound value (forward, backward and its reads and
// writes) and one vocabulary entry of the fused loss per token, and one trained parameter's
// clipping and AdamW update, in sgemm FLOPs. Fitted on SmolLM2-135M, B 4 x T 256, 2 threads, the
// sgemm at 0.88 of the FMA ceiling: attention 259 ms for 39.6 GFLOP executed, SwiGLU + RMSNorm +
// RoPE 287 ms for 236 M values, AdamW 177 ms for 134.5 M parameters (docs/planner.md).
inline constexpr double kCpuAttentionCost = 1.35;
inline constexpr double kCpuElementwiseCost = 250.0;
inline constexpr double kCpuVocabCost = 100.0;
inline constexpr double kCpuOptimizerCost = 280.0;
// FLOPs the CPU attention kernel executes per token and layer, forward and backward (causal, in
// blocks of kCpuAttentionBlock query rows, scores recomputed in backward): 14 x Q x (T + 64) / 2.
double cpu_attention_flops_per_token(const ModelDims& dims, int seq_len);
// Values one block's memory-bound kernels touch per token in the forward.
double cpu_elementwise_values_per_token(const ModelDims& dims);
// One rank's step on a CPU: `tokens` it processes, `n_layers` blocks of which `rebuilt` are
// recomputed, the LM head and loss when `head`; the matmul FLOPs per token of its blocks, their
// rebuilds and the head (LoRA's rule already applied); the parameters its optimizer updates.
CpuWork cpu_step_work(const ModelDims& dims, int seq_len, double tokens, int n_layers, int rebuilt, bool head,
                      double matmul_flops, double trained_params);

// ---- QLoRA's 4-bit base (engine/core/nf4.h) -----------------------------------------------------

// Bytes one tensor-parallel rank holds of one [out x in] projection quantised to NF4, exactly as
// nf4::Quantized stores it: 4 bits per element (two per byte) and, per 64-element block, one
// 8-bit absmax code (double quantisation; plus the module's fp32 group absmaxes, one per 256
// blocks, replicated on every rank, and its fp32 offset) or one fp32 absmax. A column-parallel
// projection (q, k, v, gate, up) gives each rank out / tp rows, a row-parallel one (o, down)
// in / tp columns.
uint64_t nf4_module_bytes(int64_t out, int64_t in, int tp, bool column_parallel, bool double_quant);
// The base projections of one block on one tensor-parallel rank under QLoRA: their parameters and
// their NF4 bytes (every projection, adapted or not, as bitsandbytes quantises every nn.Linear).
struct Nf4BlockBytes {
  uint64_t params = 0;
  uint64_t bytes = 0;
};
Nf4BlockBytes nf4_block_bytes(const ModelDims& dims, int tp, bool double_quant);
// Bits per quantised base parameter of the whole model: 4 + the statistics (4.127 with double
// quantisation, 4.5 without, for 64-divisible widths).
double nf4_bits_per_parameter(const ModelDims& dims, bool double_quant);

// ---- layout formulas ---------------------------------------------------------------------------

// Pipeline bubble fraction of a step: (p-1)/(m+p-1) for p stages and m micro-batches per flush.
double pipeline_bubble(int stages, int micro_batches);

// Bytes each rank sends in a ring all-reduce of `bytes` over n ranks: 2(n-1)/n * bytes
// (reduce-scatter and all-gather are (n-1)/n * bytes each).
double allreduce_bytes(double bytes, int ranks);
double reduce_scatter_bytes(double bytes, int ranks);

// Divisors ZeRO applies to each state for a data-parallel degree (1 = replicated):
// stage 0: none; stage 1: optimizer state (m, v and the fp32 master copy); stage 2: + gradients.
struct ZeroDivisors {
  int master = 1;
  int optimizer = 1;
  int gradients = 1;
};
ZeroDivisors zero_divisors(int stage, int dp);

// ---- activations (from the model's own accounting) ---------------------------------------------

// Floats of activation memory for B x T, split the way the layout needs it.
struct ActivationFloats {
  double per_layer = 0;        // one transformer block kept for backward
  double per_layer_shard = 0;  // of which split across tensor-parallel ranks (attention, MLP inner)
  double layer_input = 0;      // one block's input (B*T*C): what recomputation keeps per block
                               // (the rest of one block, per_layer - layer_input, is rebuilt)
  double embedding = 0;        // embedding output and friends (first pipeline stage)
  double head = 0;             // final LayerNorm and loss buffers (last stage)
  double logits = 0;           // logits, then their gradient in place (last stage; vocab-split by TP)
  double scratch = 0;          // backward buffers reused by every block (one block's gradients)
  double scratch_shard = 0;    // of which split across tensor-parallel ranks (the (B,T,4C) ones)
};
// logits_rows: the fused LM head's chunk (Plan::logits_chunk_rows; 0 = all B*T rows): `logits` is
// then that many rows x Vp, derived from the model's arena like every other term.
ActivationFloats activation_account(const ModelDims& dims, int B, int T, int logits_rows = 0);

// What LoRA adds to the model's activation memory (floats, fp32 accounting) on one rank of a
// tensor-parallel degree tp: the difference of the model's own arena with and without the adapters
// (activation_bytes_for with ModelOptions::lora), at that tp, so it is exact for the layout.
struct LoraActivationFloats {
  double per_layer = 0;  // kept per block: every target's u = x A^T (B*T x r); rebuilt under recompute
  double scratch = 0;    // shared by every block: the adapters' backward buffers and TP partial sums
};
LoraActivationFloats lora_activation_account(const ModelDims& dims, int tp, int B, int T,
                                             const LoraSpec& lora);

// ---- the plan ----------------------------------------------------------------------------------

struct MemoryBreakdown {
  uint64_t frozen_weights = 0;  // LoRA: the frozen base in the storage dtype (0 in full training);
                                // QLoRA: its projections in NF4 (frozen_nf4) + the rest in the storage dtype
  uint64_t weights = 0;         // trained parameters in the storage dtype (LoRA: the adapters)
  uint64_t master_weights = 0;  // fp32 master copy (bf16 runs only)
  uint64_t gradients = 0;
  uint64_t adam_m = 0;
  uint64_t adam_v = 0;
  uint64_t activations = 0;  // kept for backward x micro-batches in flight
  uint64_t workspace = 0;    // logits of one micro-batch, communication buckets
  uint64_t runtime = 0;      // process baseline (code, libraries, BLAS, CUDA context) + data buffers
  // LoRA / QLoRA on the CPU: how far loading the frozen base (before any activation is touched)
  // peaks above training; 0 when training peaks higher.
  uint64_t loading = 0;
  // QLoRA (lora.base_quant = "nf4"), parts of the figures above, not added again by total():
  uint64_t frozen_nf4 = 0;   // of frozen_weights: the 4-bit projections with their statistics
  uint64_t nf4_params = 0;   // the projection parameters they hold (this rank's slices)
  uint64_t nf4_scratch = 0;  // of workspace: the kernels' dequantisation tiles
  uint64_t total() const;
};

struct StagePlan {
  int stage = 0;
  int first_layer = 0;
  int n_layers = 0;
  bool embedding = false;         // holds wte/wpe lookup (stage 0)
  bool head = false;              // holds final LayerNorm and the tied LM head (last stage)
  uint64_t params = 0;            // parameters held by one rank of this stage (after TP split)
  uint64_t trainable_params = 0;  // of which trained (LoRA: this rank's adapters; else = params)
  int in_flight = 1;              // micro-batches whose activations are alive at once
  MemoryBreakdown memory;
  double flops = 0;          // model FLOPs one rank of this stage does per step (incl. recompute)
  double comm_dp_bytes = 0;  // bytes sent per step, per rank, by each kind of collective
  double comm_tp_bytes = 0;
  double comm_pp_bytes = 0;
  int collectives = 0;  // collective calls (and point-to-point sends) per step, each paying the link latency
  double compute_s = 0;
  double comm_s = 0;
  CpuWork work;  // CPU runs: what compute_s prices (cpu_step_work); empty on a GPU (model FLOPs)
};

struct PlanOptions {
  double efficiency = 0.5;               // fraction of peak FLOP/s the kernels reach (MFU)
  uint64_t dp_bucket_bytes = 25u << 20;  // gradient all-reduce bucket (two in flight)
  uint64_t runtime_bytes = 0;            // 0 = the default baseline for the device kind
  int cpu_threads = 0;                   // QLoRA's CPU tile buffers: threads per rank (0 = as the trainer)
};

struct Plan {
  ModelDims dims;
  std::string preset;
  std::string init_from;  // model.init_from: the Hugging Face folder (or weights file) the run starts from
  std::string dtype;
  int B = 0, T = 0;
  int dp = 1, tp = 1, pp = 1, zero = 0, ranks = 1;
  int pipeline_micro_batches = 1;
  bool recompute = false;
  int logits_chunk_rows = 0;  // the fused LM head: rows of logits per chunk (logits_chunk_rows(); B*T = one)
  int64_t tokens_per_step = 0;
  int64_t grad_accum_steps = 0;
  int64_t steps = 0;
  LoraSpec lora;         // lora.enabled(): a LoRA fine-tune (rank 0: full training); lora.nf4: QLoRA
  int weight_bytes = 4;  // a weight in storage: 2 under bf16 on a GPU, else 4 (CPU bf16 stores fp32)
  double nf4_bits = 0;   // QLoRA: bits per quantised base parameter (nf4_bits_per_parameter)
  ParamCounts params;
  FlopsPerToken flops;
  double flops_per_step = 0;  // PaLM FLOPs of one optimizer step, all ranks together
  std::vector<StagePlan> stages;
  int peak_stage = 0;  // stage with the largest memory total
  double bubble = 0;   // fraction of the step the pipeline idles
  DeviceProfile device;
  double efficiency = 0.5;
  double compute_s = 0, comm_s = 0, bubble_s = 0, step_s = 0;
  double tokens_per_s = 0;
  double run_s = 0;               // steps * step_s
  double usd_per_hour = 0;        // budget.usd_per_hour (the whole run's hardware)
  double cost_usd = 0;            // run_s / 3600 * usd_per_hour; 0 when no price is set
  bool fits = true;               // needed_bytes() + margin_bytes() <= device memory
  uint64_t needed_bytes() const;  // the peak stage, times ranks when memory is shared
  uint64_t margin_bytes() const;  // host memory: memory_margin(needed_bytes(), ranks); 0 on a GPU
  const MemoryBreakdown& peak() const { return stages[static_cast<size_t>(peak_stage)].memory; }
};

// The headroom a run on host memory must leave above the planner's figure before it is called
// fitting (RELIABILITY A7): kMarginPerProcess for each process (libraries mapped after the estimate,
// thread stacks, and the file pages a memory cgroup charges) plus kMarginFraction of `needed` for
// allocator slack. Measured under a 2 GiB cgroup v1 the tiny-model runs peaked 22-28 MiB above
// the plan plus 8-10 MiB of page cache; without the margin a run planned at 98.8% was OOM-killed.
constexpr uint64_t kMarginPerProcess = 48ull << 20;
constexpr double kMarginFraction = 0.02;
uint64_t memory_margin(uint64_t needed, int processes);
std::string memory_margin_text(uint64_t needed, int processes);  // "88 MiB (48 MiB a process + 2%)"

// The config must be valid (validate()); the plan assumes it.
Plan make_plan(const RunConfig& config, const DeviceProfile& device, const PlanOptions& options = {});

// Layers of stage s when L blocks are split over p stages (the first L % p stages get one more).
int stage_layers(int n_layer, int stages, int stage);

// ---- device profiles (device_profile.cpp) ------------------------------------------------------

// This CPU from its specification: cores x clock x FP32 FLOP per cycle (AVX2/AVX-512 FMA units),
// memory = what this process can use (usable_memory(): MemAvailable, cgroup, RLIMIT_AS), link = a loopback
// figure. Fast; no benchmark.
DeviceProfile cpu_profile_nominal(int threads);
// The same with flops_per_s measured by a BLAS sgemm for about `seconds` (plan --measure).
DeviceProfile cpu_profile_measured(int threads, double seconds);
// Named GPU profiles from their data sheets (dense peak for the dtype; link = typical NVLink or PCIe
// all-reduce bus bandwidth): a100-80gb, a100-40gb, h100-sxm, h200, a10-24gb, l4, rtx-4090, l40s.
std::vector<std::string> gpu_profile_names();
bool find_gpu_profile(const std::string& name, const std::string& dtype, DeviceProfile* out);

// ---- reports (plan_report.cpp) -----------------------------------------------------------------

std::string plan_to_text(const Plan& plan);
// The "memory per device" section of plan_to_text: every component, the total against the device's
// memory (with the limit that binds) and the verdict.
std::string plan_memory_text(const Plan& plan);
std::string plan_to_json(const Plan& plan, int indent = 2);

}  // namespace flotilla
