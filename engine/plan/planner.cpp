// make_plan(): memory, compute and communication of one rank of every pipeline stage, and the
// predicted step time.
//
// Decision: the step is priced as if nothing overlaps, compute + pipeline bubble + communication
// (time = FLOPs / (peak x efficiency) + bytes / link bandwidth + collectives x link latency).
// Overlap of the gradient all-reduce with backward only makes the real step faster, so the
// prediction is an upper bound whose error is visible in the comm column, rather than a guess at
// how much overlap an implementation gets.
//
// Under LoRA one rank's memory is the frozen base (its TP/PP share, in the storage dtype) plus the
// adapters and their state; compute drops the base's weight-gradient GEMMs (4N + 6 N_lora per
// token instead of 6N) and data parallelism moves the adapters' gradients only. QLoRA
// (lora.base_quant = "nf4") holds the base's projections in 4-bit NF4 (nf4_module_bytes) and adds
// the kernels' dequantisation tiles; its FLOPs stay LoRA's (dequantising is not model work).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <thread>

#include "engine/config/config_validate.h"
#include "engine/core/nf4.h"
#include "engine/model/param_layout.h"
#include "engine/parallel/data_parallel.h"
#include "engine/plan/planner.h"

namespace flotilla {
namespace {

constexpr uint64_t kMiB = 1u << 20;
// Resident memory of a CPU worker beyond the model, optimizer and activation buffers: code,
// libstdc++, OpenMP and OpenBLAS thread buffers, the metrics writer, checkpoint I/O. Fitted on
// this repository's 2-core reference machine: peak RSS of `train` on the tiny model (three batch /
// vocabulary sizes, 127-389 MiB) minus the other components was 11-13 MiB (docs/planner.md).
// Plus 12 MiB for oneDNN where it runs the sgemm (its generated kernels, per-thread gemm workspaces
// and scratchpads: 12-14 MiB between FLOTILLA_SGEMM=openblas and =onednn in
// tests/engine/test_plan_memory_rss*). Counted always: the library is chosen by measurement on the
// machine that trains (engine/cpu/blas.h), which a plan made elsewhere cannot know.
constexpr uint64_t kCpuRuntimeBytes = 24 * kMiB;
// A CUDA context plus cuBLAS/NCCL workspaces on one GPU (typical; the CUDA issue measures it).
constexpr uint64_t kCudaRuntimeBytes = 768 * kMiB;
// QLoRA on the CPU: each OpenMP thread dequantises W into its own tile buffer, kept for the
// thread's life, of which a tile fills 1 MiB in fp32 and 2 MiB in bf16 (engine/cpu/nf4_matmul.cpp,
// TileShape: half the L2 for the sgemm, the L2 for oneDNN's AMX gemm).
constexpr uint64_t kNf4CpuTileBytesF32 = 1 * kMiB;
constexpr uint64_t kNf4CpuTileBytesBf16 = 2 * kMiB;

// The threads one CPU rank runs (the trainer's local_threads: run.threads, else this machine's
// cores shared by the ranks on it).
int cpu_threads_per_rank(const RunConfig& c, int ranks) {
  if (c.run.threads > 0) return c.run.threads;
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  return std::max(1, cores / std::max(1, ranks));
}

uint64_t bytes_of(double floats, int element_bytes) {
  return static_cast<uint64_t>(std::llround(floats * element_bytes));
}

uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

// Parameters of one block held by one tensor-parallel rank, from the architecture's layout
// (column-parallel matrices and their biases split; norms and row-parallel biases replicated).
uint64_t block_params_tp(const ModelDims& d, int tp) {
  ModelDims one = d;
  one.n_layer = 1;
  const ParamLayout layout(one);
  const std::vector<size_t> sizes = local_param_sizes(layout, make_shard(one, tp, 0, 1, 0));
  uint64_t n = 0;
  for (int i = 0; i < layout.size(); ++i)
    if (layout[i].per_layer()) n += sizes[static_cast<size_t>(i)];
  return n;
}

uint64_t block_params(const ModelDims& d) { return block_params_tp(d, 1); }

// LoRA adapter parameters of one block held by one tensor-parallel rank (lora.h: an adapter is split
// like its projection, its other factor replicated).
uint64_t lora_block_params_tp(const ModelDims& d, const LoraSpec& lora, int tp) {
  if (!lora.enabled()) return 0;
  ModelDims one = d;
  one.n_layer = 1;
  const ParamLayout layout(one, lora);
  uint64_t n = 0;
  for (size_t k : local_param_sizes(layout, make_shard(one, tp, 0, 1, 0))) n += k;
  return n;
}

// Parameters of the non-layer tensors a rank of `stage` holds (embedding tables on the first
// stage; the final norm, the LM head or the tied embedding's copy on the last).
uint64_t edge_params(const ModelDims& d, int tp, int pp, int stage) {
  ModelDims one = d;
  one.n_layer = std::max(d.n_layer, pp);
  const ParamLayout layout(one);
  const std::vector<size_t> sizes = local_param_sizes(layout, make_shard(one, tp, 0, pp, stage));
  uint64_t n = 0;
  for (int i = 0; i < layout.size(); ++i)
    if (!layout[i].per_layer()) n += sizes[static_cast<size_t>(i)];
  return n;
}

}  // namespace

uint64_t nf4_module_bytes(int64_t out, int64_t in, int tp, bool column_parallel, bool double_quant) {
  const auto n = static_cast<uint64_t>(std::max(tp, 1));
  const uint64_t rows =
      column_parallel ? ceil_div(static_cast<uint64_t>(out), n) : static_cast<uint64_t>(out);
  const uint64_t cols = column_parallel ? static_cast<uint64_t>(in) : ceil_div(static_cast<uint64_t>(in), n);
  const uint64_t numel = rows * cols;
  const uint64_t blocks = ceil_div(numel, nf4::kBlock);
  const uint64_t packed = ceil_div(numel, 2);
  if (!double_quant) return packed + blocks * sizeof(float);
  // The group absmaxes cover the whole module's blocks (each rank keeps them all: a slice finds its
  // group from the block's index in the module, nf4.h View), and one fp32 offset.
  const uint64_t module_blocks =
      ceil_div(static_cast<uint64_t>(out) * static_cast<uint64_t>(in), nf4::kBlock);
  return packed + blocks + ceil_div(module_blocks, nf4::kGroup) * sizeof(float) + sizeof(float);
}

Nf4BlockBytes nf4_block_bytes(const ModelDims& d, int tp, bool double_quant) {
  Nf4BlockBytes b;
  const auto n = static_cast<uint64_t>(std::max(tp, 1));
  for (int t = 0; t < kNumLoraTargets; ++t) {
    const auto [in, out] = lora_target_shape(d, t);
    const bool column = lora_column_parallel(t);
    b.params += column ? ceil_div(static_cast<uint64_t>(out), n) * static_cast<uint64_t>(in)
                       : static_cast<uint64_t>(out) * ceil_div(static_cast<uint64_t>(in), n);
    b.bytes += nf4_module_bytes(out, in, tp, column, double_quant);
  }
  return b;
}

double nf4_bits_per_parameter(const ModelDims& d, bool double_quant) {
  const Nf4BlockBytes b = nf4_block_bytes(d, 1, double_quant);
  return b.params > 0 ? 8.0 * static_cast<double>(b.bytes) / static_cast<double>(b.params) : 0.0;
}

double recompute_flops_per_token(const ModelDims& d, int seq_len) {
  const double C = d.n_embd;
  // The MLP-down projection is not re-run: GPT-2 its weight and bias, llama its weight.
  const double down = d.llama() ? C * d.ffn() : 4.0 * C * C + C;
  return 2.0 * (static_cast<double>(block_params(d)) - down) + 4.0 * d.q_dim() * seq_len;
}

uint64_t MemoryBreakdown::total() const {
  return frozen_weights + weights + master_weights + gradients + adam_m + adam_v + activations + workspace +
         runtime + loading;
}

uint64_t Plan::needed_bytes() const {
  return peak().total() * static_cast<uint64_t>(device.mem_shared_by_ranks ? ranks : 1);
}

uint64_t Plan::margin_bytes() const {
  return device.mem_shared_by_ranks ? memory_margin(needed_bytes(), ranks) : 0;
}

uint64_t memory_margin(uint64_t needed, int processes) {
  return kMarginPerProcess * static_cast<uint64_t>(std::max(1, processes)) +
         static_cast<uint64_t>(static_cast<double>(needed) * kMarginFraction);
}

std::string memory_margin_text(uint64_t needed, int processes) {
  char buf[128];
  std::snprintf(buf, sizeof buf, "%.0f MiB (%llu MiB a process + %.0f%%)",
                static_cast<double>(memory_margin(needed, processes)) / (1 << 20),
                static_cast<unsigned long long>(kMarginPerProcess >> 20), kMarginFraction * 100);
  return buf;
}

int stage_layers(int n_layer, int stages, int stage) {
  return n_layer / stages + (stage < n_layer % stages ? 1 : 0);
}

Plan make_plan(const RunConfig& config, const DeviceProfile& device, const PlanOptions& options) {
  Plan plan;
  const ModelDims d = dims_from_config(config.model);
  plan.dims = d;
  plan.preset = config.model.preset;
  plan.init_from = config.model.init_from;
  plan.dtype = config.train.dtype;
  plan.B = config.train.micro_batch;
  plan.T = config.train.seq_len;
  plan.dp = config.parallel.dp;
  plan.tp = config.parallel.tp;
  plan.pp = config.parallel.pp;
  plan.zero = config.parallel.zero;
  plan.ranks = plan.dp * plan.tp * plan.pp;
  plan.pipeline_micro_batches = plan.pp > 1 ? config.parallel.micro_batches : 1;
  plan.recompute = config.train.recompute;
  plan.tokens_per_step = tokens_per_step(config);
  plan.grad_accum_steps = grad_accum_steps(config);
  plan.steps = config.train.steps;
  const LoraSpec lora = lora_spec(config);
  const bool lora_on = lora.enabled();
  plan.lora = lora;
  const bool qlora = lora_on && lora.nf4;
  if (qlora) plan.nf4_bits = nf4_bits_per_parameter(d, lora.double_quant);
  plan.params = count_parameters(d, lora);
  plan.flops = flops_per_token(d, plan.T, lora);
  plan.flops_per_step = plan.flops.palm * static_cast<double>(plan.tokens_per_step);
  plan.device = device;
  plan.efficiency = options.efficiency;

  // bf16 storage (weights, gradients, activations in bf16 beside fp32 masters) is the GPU's scheme;
  // CPU bf16 keeps fp32 storage and rounds only the matmul operands (engine/cpu/matmul_bf16.h),
  // whose bf16 copies are counted in the workspace below.
  const bool cpu_bf16 = config.train.dtype == "bf16" && config.run.device == "cpu";
  const bool bf16 = config.train.dtype == "bf16" && !cpu_bf16;
  const int weight_bytes = bf16 ? 2 : 4, grad_bytes = bf16 ? 2 : 4, act_bytes = bf16 ? 2 : 4;
  plan.weight_bytes = weight_bytes;
  const int tp = plan.tp, pp = plan.pp, dp = plan.dp, m = plan.pipeline_micro_batches;
  const auto accum = static_cast<double>(plan.grad_accum_steps);
  const ZeroDivisors zero = zero_divisors(plan.zero, dp);
  // The fused LM head: rows of logits per chunk on this rank (its Vp / tp columns, in the storage dtype).
  ModelShard tp_shard;
  tp_shard.tp = tp;
  plan.logits_chunk_rows =
      logits_chunk_rows(d, tp_shard, static_cast<size_t>(act_bytes), config.train.logits_chunk_mb,
                        static_cast<long>(plan.B) * plan.T);
  const ActivationFloats act = activation_account(d, plan.B, plan.T, plan.logits_chunk_rows);
  const double shard_keep = 1.0 / tp;
  const double block_act = act.per_layer - act.per_layer_shard + act.per_layer_shard * shard_keep;
  const double btc = static_cast<double>(plan.B) * plan.T * d.n_embd;
  const uint64_t C = static_cast<uint64_t>(d.n_embd);
  const uint64_t wte_local = static_cast<uint64_t>(d.padded_vocab) * C / static_cast<uint64_t>(tp);
  // LoRA: the adapters of one block on this rank (memory) and in the whole model (FLOPs), and their
  // activation buffers at this tp.
  const uint64_t lora_block_local = lora_block_params_tp(d, lora, tp);
  const double lora_block = static_cast<double>(lora_block_params_tp(d, lora, 1));
  const LoraActivationFloats lora_act = lora_activation_account(d, tp, plan.B, plan.T, lora);
  // The weight-gradient GEMMs are skipped for frozen weights: 4 FLOPs per weight, not 6.
  const double base_factor = lora_on ? 4.0 : 6.0;

  uint64_t runtime = options.runtime_bytes;
  if (runtime == 0) runtime = config.run.device == "cuda" ? kCudaRuntimeBytes : kCpuRuntimeBytes;
  if (config.data.source == "synthetic") {
    const double token_bytes = config.model.vocab_size <= 65536 ? 2 : 4;  // as shards store them
    runtime +=
        bytes_of(static_cast<double>(config.data.synthetic_tokens) * 1.1 / dp, static_cast<int>(token_bytes));
  }
  runtime += bytes_of(2.0 * plan.B * plan.T, 4);  // input and target token buffers

  int layer = 0;
  for (int s = 0; s < pp; ++s) {
    StagePlan st;
    st.stage = s;
    st.first_layer = layer;
    st.n_layers = stage_layers(d.n_layer, pp, s);
    layer += st.n_layers;
    st.embedding = s == 0;
    st.head = s == pp - 1;
    st.params = static_cast<uint64_t>(st.n_layers) * block_params_tp(d, tp) + edge_params(d, tp, pp, s);
    st.in_flight = pp == 1 ? 1 : (config.parallel.schedule == "gpipe" ? m : std::min(pp - s, m));
    // What trains: every parameter, or (LoRA) this rank's adapters; the base is then frozen.
    const uint64_t trained = lora_on ? static_cast<uint64_t>(st.n_layers) * lora_block_local : st.params;
    st.trainable_params = trained;

    MemoryBreakdown& mem = st.memory;
    mem.frozen_weights = lora_on ? st.params * weight_bytes : 0;
    if (qlora) {
      // The projections leave the storage dtype for NF4; norms, biases, embedding and head stay.
      const Nf4BlockBytes q = nf4_block_bytes(d, tp, lora.double_quant);
      mem.nf4_params = static_cast<uint64_t>(st.n_layers) * q.params;
      mem.frozen_nf4 = static_cast<uint64_t>(st.n_layers) * q.bytes;
      mem.frozen_weights = (st.params - mem.nf4_params) * weight_bytes + mem.frozen_nf4;
    }
    mem.weights = trained * weight_bytes;
    mem.master_weights = bf16 ? ceil_div(trained, zero.master) * 4 : 0;
    mem.gradients = ceil_div(trained, zero.gradients) * grad_bytes;
    mem.adam_m = mem.adam_v = ceil_div(trained, zero.optimizer) * 4;
    const double kept_per_block = plan.recompute ? act.layer_input : block_act;
    double act_floats = st.n_layers * kept_per_block * st.in_flight;
    // The rest of one block, rebuilt during its backward in a region all micro-batches share.
    if (plan.recompute) act_floats += block_act - act.layer_input;
    if (st.embedding) act_floats += act.embedding * st.in_flight;
    if (st.head) act_floats += act.head;
    // LoRA: each block keeps its adapters' inputs x A^T (recompute: rebuilt, in the shared region).
    if (lora_on)
      act_floats += plan.recompute ? lora_act.per_layer : st.n_layers * lora_act.per_layer * st.in_flight;
    mem.activations = bytes_of(act_floats, act_bytes);
    const double scratch = act.scratch - act.scratch_shard * (1 - shard_keep) + lora_act.scratch;
    mem.workspace = bytes_of(scratch + (st.head ? act.logits / tp : 0.0), act_bytes);
    if (cpu_bf16) {
      // The largest matmul's bf16 operand copies (input, weight, output gradient) alive at once:
      // the LM head's on the last stage (measured: small 1410 MiB bf16 against 1130 MiB fp32), else
      // the MLP's.
      const double N = static_cast<double>(plan.B) * plan.T, C2 = static_cast<double>(d.n_embd);
      const double V = static_cast<double>(d.padded_vocab) / tp, F = static_cast<double>(d.ffn()) / tp;
      const double mlp = N * C2 + C2 * F + N * F;
      const double R = static_cast<double>(plan.logits_chunk_rows);  // the head runs one chunk at a time
      const double head = R * C2 + V * C2 + R * V;
      mem.workspace += bytes_of(st.head ? std::max(head, mlp) : mlp, 2);
    }
    if (qlora && config.run.device == "cpu") {
      // The NF4 kernels' scratch (nf4_matmul.cpp): every thread's dequantised tile, and under bf16
      // the calling thread's bf16-rounded activation operand of the widest call (N x the widest
      // projection side).
      const int threads =
          options.cpu_threads > 0 ? options.cpu_threads : cpu_threads_per_rank(config, plan.ranks);
      mem.nf4_scratch =
          static_cast<uint64_t>(threads) * (cpu_bf16 ? kNf4CpuTileBytesBf16 : kNf4CpuTileBytesF32);
      if (cpu_bf16) {
        uint64_t widest = 0;
        for (int t = 0; t < kNumLoraTargets; ++t) {
          const auto [in, out] = lora_target_shape(d, t);
          const bool column = lora_column_parallel(t);
          widest = std::max<uint64_t>({widest, static_cast<uint64_t>(column ? out / tp : out),
                                       static_cast<uint64_t>(column ? in : in / tp)});
        }
        mem.nf4_scratch += static_cast<uint64_t>(plan.B) * plan.T * widest * 2;
      }
      mem.workspace += mem.nf4_scratch;
    }
    if (dp > 1 && plan.zero >= 2) {
      // ZeRO-2 as the engine builds it (data_parallel.h): besides the gradient shard, two staging
      // slots of one layer's gradients (the buckets) and full-size wte/wpe/lnf gradients (LoRA:
      // one layer's adapters; they have no other tensors).
      const uint64_t layer_params = lora_on ? lora_block_local : block_params_tp(d, tp);
      const uint64_t non_layer = trained - static_cast<uint64_t>(st.n_layers) * layer_params;
      mem.workspace += (2 * layer_params + non_layer) * grad_bytes;
    } else if (dp > 1) {
      mem.workspace += std::min<uint64_t>(2 * options.dp_bucket_bytes, trained * grad_bytes);
    }
    mem.runtime = runtime;
    if (config.run.device == "cpu" && (qlora || (lora_on && !config.model.init_from.empty()))) {
      // Loading the frozen base on the host peaks before the first step touches the activations,
      // beside the model's own state (its base buffers included: allocated with the model).
      // QLoRA: the loader's BaseWeights (base_weights.h: every non-projection tensor of the WHOLE
      // model in fp32, and this stage's modules quantised whole, not as TP slices) and the largest
      // projection in fp32, in flight as it is quantised; Model::set_base then consumes the
      // BaseWeights tensor by tensor. LoRA: the whole model imported in fp32 (trainer.cpp keeps it
      // through setup for a device). Measured on a 4-layer width-512 base at B 1 x T 8
      // (test_plan_memory_rss_qlora's base): QLoRA 105 MiB (planned 99.8), LoRA 183 MiB (176.8).
      uint64_t transient = count_parameters(d).allocated * 4;
      if (qlora) {
        const Nf4BlockBytes whole = nf4_block_bytes(d, 1, lora.double_quant);
        const uint64_t dense_model =
            count_parameters(d).allocated - static_cast<uint64_t>(d.n_layer) * whole.params;
        uint64_t largest = 0;
        for (int t = 0; t < kNumLoraTargets; ++t) {
          const auto [in, out] = lora_target_shape(d, t);
          largest = std::max<uint64_t>(largest, static_cast<uint64_t>(in) * static_cast<uint64_t>(out));
        }
        transient = dense_model * 4 + static_cast<uint64_t>(st.n_layers) * whole.bytes + largest * 4;
      }
      const uint64_t state = mem.frozen_weights + mem.weights + mem.master_weights + mem.gradients +
                             mem.adam_m + mem.adam_v + mem.runtime;
      const uint64_t steady = state + mem.activations + mem.workspace;
      const uint64_t load_peak = state + transient;
      mem.loading = load_peak > steady ? load_peak - steady : 0;
    }

    // FLOPs of one rank of this stage per step: 6 x its parameters used in matmuls + attention,
    // the LM head on the last stage. Recomputation re-runs a block's forward up to its GELU
    // (2 x its parameters but the MLP-down projection's, plus the attention forward 4*C*T), for
    // every block but the last stage's last one (still in place when its backward starts).
    // LoRA: 4 FLOPs per frozen weight, 6 per adapter parameter (flops_per_token's rule).
    const double tokens = static_cast<double>(plan.tokens_per_step) / dp;
    double block_flops = st.n_layers * (base_factor * static_cast<double>(block_params(d)) +
                                        6.0 * lora_block + 12.0 * d.q_dim() * plan.T);
    const int rebuilt = plan.recompute ? st.n_layers - (st.head ? 1 : 0) : 0;
    block_flops += rebuilt * recompute_flops_per_token(d, plan.T, lora);
    // The block not rebuilt still recomputes down's adapter input product in its backward.
    if (lora_on && plan.recompute && st.head && lora.has(kLoraDown))
      block_flops += 2.0 * lora.rank * lora_target_shape(d, kLoraDown).first;
    const double head_flops = st.head ? base_factor * (static_cast<double>(d.vocab_size) * d.n_embd +
                                                       (d.llama() ? 1.0 : 2.0) * d.n_embd)
                                      : 0.0;
    st.flops = (block_flops + head_flops) * tokens / tp;
    // On a CPU the time prices each kernel family at its own rate (cpu_step_work): the matmuls
    // without the attention term, the attention kernel's executed (causal, blocked) FLOPs, the
    // memory-bound kernels and the optimizer.
    const bool cpu = config.run.device == "cpu";
    if (cpu) {
      const double attn_palm = 12.0 * d.q_dim() * plan.T, attn_rebuild = 4.0 * d.q_dim() * plan.T;
      const double matmul = block_flops - st.n_layers * attn_palm - rebuilt * attn_rebuild + head_flops;
      st.work = cpu_step_work(d, plan.T, tokens / tp, st.n_layers, rebuilt, st.head, matmul,
                              static_cast<double>(ceil_div(trained, zero.optimizer)));
    }

    // Communication per rank per step (LoRA: only the adapters are reduced and gathered).
    const double grad_total = static_cast<double>(trained) * grad_bytes;
    if (plan.zero == 0)
      st.comm_dp_bytes = allreduce_bytes(grad_total, dp);
    else
      st.comm_dp_bytes = reduce_scatter_bytes(grad_total, dp) +
                         reduce_scatter_bytes(static_cast<double>(trained) * weight_bytes, dp);
    if (tp > 1) {
      double reduces = st.n_layers * 4.0 + rebuilt + (st.embedding ? 1 : 0) + (st.head ? 1 : 0);
      double per_mb = allreduce_bytes(reduces * btc * act_bytes, tp);
      if (st.head) per_mb += allreduce_bytes(3.0 * plan.B * plan.T * 4, tp);  // vocab-parallel cross-entropy
      st.comm_tp_bytes = per_mb * accum;
    }
    if (pp > 1) {
      const double sends = (st.head ? 0 : 1) + (st.embedding ? 0 : 1);  // activations fwd, gradients bwd
      st.comm_pp_bytes = sends * btc * act_bytes * accum;
      // The tied embedding's gradient between first and last stage (none when LoRA freezes it).
      if ((st.embedding || st.head) && d.tied() && !lora_on)
        st.comm_pp_bytes += allreduce_bytes(static_cast<double>(wte_local) * grad_bytes, 2);
    }
    // Calls per step, each paying the link's latency: data parallel one all-reduce per layer bucket
    // plus the rest (ZeRO 1: one reduce-scatter and one all-gather), plus the loss and gradient-norm
    // scalars (data_parallel.cpp); tensor parallel each all-reduce above; pipeline each send.
    // Under ZeRO 0 the layer buckets are DataParallel's: layers merged to parallel.bucket_mb MiB.
    int layer_buckets = st.n_layers;
    if (plan.zero == 0 && config.parallel.bucket_mb > 0 && st.n_layers > 0) {
      const auto per_layer = static_cast<size_t>(grad_total / st.n_layers);
      layer_buckets = static_cast<int>(
          DataParallel::bucket_layers(std::vector<size_t>(static_cast<size_t>(st.n_layers), per_layer),
                                      config.parallel.bucket_mb)
              .size());
    }
    if (dp > 1) st.collectives += (plan.zero == 1 ? 2 : layer_buckets + 1 + (plan.zero >= 2 ? 1 : 0)) + 2;
    if (tp > 1)
      st.collectives += static_cast<int>(
          (st.n_layers * 4.0 + rebuilt + (st.embedding ? 1 : 0) + (st.head ? 2 : 0)) * accum);
    if (pp > 1) st.collectives += static_cast<int>(((st.head ? 0 : 1) + (st.embedding ? 0 : 1)) * accum);
    const double work = cpu ? st.work.total() : st.flops;
    st.compute_s = device.flops_per_s > 0 ? work / (device.flops_per_s * options.efficiency) : 0.0;
    const double comm = st.comm_dp_bytes + st.comm_tp_bytes + st.comm_pp_bytes;
    st.comm_s = device.link_bytes_per_s > 0 ? comm / device.link_bytes_per_s : 0.0;
    st.comm_s += st.collectives * device.link_latency_s;
    plan.stages.push_back(st);
  }

  for (const auto& st : plan.stages) {
    if (st.memory.total() > plan.stages[static_cast<size_t>(plan.peak_stage)].memory.total())
      plan.peak_stage = st.stage;
    plan.compute_s = std::max(plan.compute_s, st.compute_s);
    plan.comm_s = std::max(plan.comm_s, st.comm_s);
  }
  plan.bubble = pipeline_bubble(pp, m);
  plan.bubble_s = pp > 1 ? plan.compute_s * (pp - 1) / m : 0.0;
  plan.step_s = plan.compute_s + plan.bubble_s + plan.comm_s;
  plan.tokens_per_s = plan.step_s > 0 ? static_cast<double>(plan.tokens_per_step) / plan.step_s : 0.0;
  plan.run_s = plan.step_s * static_cast<double>(plan.steps);
  plan.usd_per_hour = config.budget.usd_per_hour;
  plan.cost_usd = plan.run_s / 3600.0 * plan.usd_per_hour;
  plan.fits = device.mem_bytes == 0 || plan.needed_bytes() + plan.margin_bytes() <= device.mem_bytes;
  return plan;
}

}  // namespace flotilla
