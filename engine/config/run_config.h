// RunConfig: the typed tree that describes one training run (DESIGN.md §2, docs/config.md).
//
// Defaults live here, one line of documentation per field. The TOML reader (config_io.h)
// rejects unknown keys with a did-you-mean; validate() (config_validate.h) reports every problem
// at once with its field path. The wizard edits this struct; the worker reads it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace flotilla {

struct RunSection {
  std::string name = "run";    // run name: letters, digits, '-', '_', '.'
  std::string out_dir = "";    // run directory; empty = "runs/<name>" under the working directory
  uint64_t seed = 1337;        // seed for initialisation, shuffling and sampling
  std::string device = "cpu";  // "cpu" or "cuda"
  int threads = 0;             // CPU threads per rank; 0 = all cores (divided among local ranks)
  int max_restarts = 2;        // crash restarts from the last verified checkpoint; preemptions do not count
};

struct ModelSection {
  std::string preset = "tiny";  // a named shape (docs/config.md lists them) or custom
  std::string arch = "gpt2";    // model family: gpt2 | llama (Llama 3, Qwen 2/3, SmolLM2, Mistral-style)
  int n_layer = 4;              // transformer blocks (set by the preset unless overridden)
  int n_head = 4;               // attention heads (set by the preset unless overridden)
  int n_embd = 256;             // model width (set by the preset unless overridden)
  int vocab_size = 50257;       // tokenizer vocabulary; padded internally to a multiple of 128
  int max_seq_len = 1024;       // longest sequence (gpt2: rows of the learned position table)
  int n_kv_head = 0;            // llama: key/value heads (grouped-query attention); 0 = n_head
  int head_dim = 0;             // llama: width of one head; 0 = n_embd / n_head
  int ffn_dim = 0;              // llama: SwiGLU hidden width; 0 = 4 * n_embd
  double norm_eps = 1e-5;       // llama: RMSNorm epsilon
  bool tie_embeddings = true;   // llama: the LM head shares the token embedding
  bool qkv_bias = false;        // llama: biases on the q, k and v projections (Qwen 2)
  bool qk_norm = false;         // llama: per-head RMSNorm of q and k before RoPE (Qwen 3)
  double rope_theta = 10000.0;  // llama: RoPE base frequency
  std::string rope_scaling = "default";   // llama: RoPE frequency scaling: default | linear | llama3
  double rope_factor = 1.0;               // llama: RoPE scaling factor (linear, llama3)
  double rope_low_freq_factor = 1.0;      // llama: llama3 scaling, low-frequency factor
  double rope_high_freq_factor = 4.0;     // llama: llama3 scaling, high-frequency factor
  int rope_original_max_position = 8192;  // llama: llama3 scaling, original context length
  std::string init_from =
      "";  // weights to start from: a HF folder or Hub name org/name[@revision], .safetensors, llm.c .bin
};

struct LoraSection {
  bool enabled = false;     // fine-tune LoRA adapters on the frozen model.init_from weights
  int rank = 16;            // adapter rank r
  double alpha = 32;        // scaling numerator: updates are alpha/r x B A (alpha/sqrt(r) with use_rslora)
  double dropout = 0.0;     // dropout on the adapter input while training (seeded by run.seed)
  bool use_rslora = false;  // rank-stabilised scaling alpha/sqrt(r) instead of alpha/r
  std::string targets = "all-linear";  // all-linear | attention | mlp | list: q_proj,v_proj,...
  std::string init_from =
      "";  // a PEFT adapter folder or Hub name org/name[@revision] to continue from (sets r, alpha, targets)
  std::string base_quant = "none";  // the frozen base's projections: none (compute dtype) | nf4 (QLoRA)
  bool double_quant = true;         // nf4: quantise the block absmax again (8-bit, blocks of 256)
};

struct DataSection {
  std::string source = "synthetic";    // "synthetic" (deterministic demo corpus) or "shards"
  std::string train = "";              // train shards: path or glob of llm.c .bin files
  std::string val = "";                // validation shards: path or glob (optional)
  int64_t synthetic_tokens = 2000000;  // tokens generated for source = "synthetic" (train; val gets 1/10)
  bool shuffle = false;                // deterministic seeded shuffling of sequences
  bool checked = false;                // verify every token < vocab_size while reading (slower)
};

struct TrainSection {
  int64_t steps = 200;              // optimizer steps
  int micro_batch = 8;              // sequences per micro-batch per data-parallel rank (B)
  int seq_len = 256;                // tokens per sequence (T)
  int64_t global_batch_tokens = 0;  // tokens per optimizer step; 0 = micro_batch*seq_len*dp (no accumulation)
  std::string dtype = "fp32";       // fp32 | bf16 (cpu: needs AVX512_BF16 or AMX-BF16)
  bool recompute = false;           // recompute activations in backward to save memory
  bool deterministic = true;        // bit-identical repeat runs (CPU: any thread count; CUDA: no split-K)
  double grad_clip = 1.0;           // global gradient-norm clip; 0 disables
  int log_every = 1;                // write a step record every N steps
  double spike_factor = 0.0;        // skip a step whose loss exceeds spike_factor x running mean; 0 off
  double logits_chunk_mb = 1024.0;   // MiB of LM-head logits computed at once (the fused head and loss); 0 = all B x T rows
};

struct OptimSection {
  double lr = 6e-4;                 // peak learning rate
  double min_lr_ratio = 0.1;        // final lr as a fraction of lr (cosine, linear, wsd)
  double beta1 = 0.9;               // AdamW beta1
  double beta2 = 0.95;              // AdamW beta2
  double eps = 1e-8;                // AdamW epsilon
  double weight_decay = 0.1;        // decoupled weight decay on 2-D weights (not biases or norms)
  std::string schedule = "cosine";  // constant | cosine | linear | wsd
  int64_t warmup_steps = 20;        // linear warmup steps from 0 to lr
  double decay_fraction = 0.2;      // wsd: fraction of steps spent in the final decay
};

struct ParallelSection {
  int dp = 1;                     // data-parallel degree
  int tp = 1;                     // tensor-parallel degree (innermost on the rank grid)
  int pp = 1;                     // pipeline-parallel stages
  int zero = 0;                   // ZeRO stage: 0, 1 (optimizer state sharded) or 2 (+ gradients)
  int micro_batches = 1;          // pipeline micro-batches per step
  std::string schedule = "1f1b";  // pipeline schedule: gpipe | 1f1b
  std::string backend = "auto";   // collectives: auto | gloo | nccl
  double timeout_s = 300;         // collective and rendezvous timeout in seconds
  double bucket_mb = 0;  // data-parallel gradient buckets: consecutive layers merged until at least this many MiB; 0 = one bucket per layer
  bool overlap = true;   // data parallelism: all-reduce gradient buckets while backward runs
  std::string measure_links =
      "auto";  // measure the links between the run's nodes at its start (stored with the run): auto (multi-node runs) | off
};

struct CheckpointSection {
  int64_t every = 0;            // save every N steps; 0 = only at the end; "auto" = Daly's interval
  int keep_last = 2;            // checkpoints kept (>= 1; the newest verified one is never purged)
  std::string resume = "auto";  // auto (newest verified), none, or a checkpoint directory
  double preempt_grace_s = 30;  // on SIGTERM, save only if the last save took less than this
  bool save_final = true;       // save a checkpoint after the last step
  std::string export_hf = "";   // after the last step, also write a Hugging Face folder here (llama); "" off
  std::string export_dtype = "source";  // dtype of that folder: source (init_from's, else fp32) | bf16 | fp32
  std::string export_peft = "";         // LoRA: also write the adapter as a PEFT folder here at the end
  double mtbi_s = 0;  // every = "auto": the place's mean time between interruptions (s); 0 = the prior
  std::string keep_best =
      "auto";  // a task score whose best checkpoint keep_last never purges: auto | none | task/<task>/<score>
};

// checkpoint.every = "auto" is stored as this value (the key's TOML, JSON and --set forms read
// and write the word; every other reader of `every` sees a number that is not > 0, so a periodic
// save by step count never fires for it).
inline constexpr int64_t kCheckpointEveryAuto = -1;

struct EvalSection {
  int64_t every = 0;         // validation loss every N steps; 0 = only at the end
  int batches = 8;           // validation micro-batches per evaluation
  int64_t sample_every = 0;  // print a text sample every N steps; 0 off
  int sample_tokens = 64;    // tokens per sample
  std::string tasks =
      "";              // evaluation tasks run with the validation loss: "[kind:]path[?option=value&...]; ..."
  int task_limit = 0;  // examples (windows) per task at each evaluation, unless the task sets limit=; 0 all
};

struct BudgetSection {
  double max_usd = 0;             // stop with a checkpoint when the run's spend reaches this; 0 off
  double warn_fraction = 0.8;     // warn when spend reaches this fraction of max_usd
  double usd_per_hour = 0;        // price of the whole run's hardware per hour (0 = free / catalogue)
  std::string price_source = "";  // pricing catalogue entry, e.g. "local" or "aws:p5.48xlarge"
  double max_hours = 0;           // stop with a checkpoint after this wall time; 0 off
};

struct RunConfig {
  RunSection run;
  ModelSection model;
  LoraSection lora;
  DataSection data;
  TrainSection train;
  OptimSection optim;
  ParallelSection parallel;
  CheckpointSection checkpoint;
  EvalSection eval;
  BudgetSection budget;
};

}  // namespace flotilla
