// docs/config.md, generated from the schema table, the presets and the defaults in run_config.h.
//
// Decision: the whole file is generated and a test compares it byte for byte with the committed
// one, so the reference can never lag the code; the prose that is not per-key (derived values,
// rules, the example) lives here beside the generator. Regenerate with
// `flotilla-worker plan --print-config-docs > docs/config.md`.
#include <cctype>
#include <string>

#include "engine/config/config_schema.h"
#include "engine/config/presets.h"
#include "engine/model/gpt.h"

namespace flotilla {
namespace {

std::string cell(const std::string& text) {
  std::string out;
  for (char ch : text) {
    if (ch == '|')
      out += "\\|";
    else if (ch == '<')
      out += "&lt;";
    else if (ch == '>')
      out += "&gt;";
    else
      out += ch;
  }
  return out;
}

// Inside a code span only the table's '|' needs escaping.
std::string code_cell(const std::string& text) {
  std::string out;
  for (char ch : text) out += ch == '|' ? std::string("\\|") : std::string(1, ch);
  return out;
}

std::string with_commas(size_t n) {
  std::string s = std::to_string(n), out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i && (s.size() - i) % 3 == 0) out += ',';
    out += s[i];
  }
  return out;
}

const char* kIntro = R"(# Run config reference

<!-- Generated from engine/config/config_schema.cpp and run_config.h; do not edit by hand.
     Regenerate: flotilla-worker plan --print-config-docs > docs/config.md
     (test engine_test_config_docs fails when this file and the code disagree). -->

A training run is described by one TOML file with up to nine sections: `[run]`, `[model]`,
`[data]`, `[train]`, `[optim]`, `[parallel]`, `[checkpoint]`, `[eval]` and `[budget]`. Every key
is optional: a missing key takes the default shown below, so an empty file is a valid run (the
tiny model on the synthetic corpus).

The reader is strict, so a typo never silently changes a run:

- an unknown section or key is an error with a suggestion and its line:
  `run.toml:7: unknown key 'optim.warmup' (did you mean 'optim.warmup_steps'?)`;
- a value of the wrong type is an error naming the key and what was given:
  `run.toml:9: train.steps: expected an integer, got string ("fifty")`
  (an integer is accepted where a float is expected, never the reverse);
- an enumerated string outside its choices is an error listing them;
- all errors of a file are reported together (exit code 3, never retried).

After reading, `validate()` checks the rules below and again reports every problem at once, each
with its field path and all the numbers involved, e.g.
`model.n_head: 12 does not divide model.n_embd 700 (head size 700/12 is not whole)`.

On the command line, `--set key=value` overrides one key after the file is read (`train`, `plan`):
the value is read as TOML (`--set optim.lr=3e-4`, `--set data.shuffle=true`), and string values
may be given bare (`--set model.preset=gpt2-124m`). `--set model.preset=...` is applied before the
other overrides and sets the preset's dimensions, which later `--set model.n_layer=...` refine.

The run directory keeps the resolved config with every key written out (`config_to_toml`);
reading it back gives the identical config.
)";

const char* kPresetsNote = R"(
`model.preset` sets `arch`, `n_layer`, `n_head` and `n_embd` unless the file gives them explicitly;
a Llama-family preset also sets the `llama:` keys, and a released model's shape (`smollm2-135m`,
`qwen2.5-0.5b`, `qwen3-0.6b`, `llama3.2-1b`, `llama3.1-8b`, `qwen2.5-7b`, `qwen3-8b`) its
`vocab_size` and `max_seq_len` too. Any of them can be overridden (`preset = "gpt2-124m"` with
`n_layer = 6` is a 6-layer GPT-2 small). `custom` applies no preset: the dimensions are the ones
given (or the defaults). `model.init_from` naming a Hugging Face folder, or a Hub name
`org/name[@revision]` (found in the Hugging Face cache, else downloaded: docs/models.md), takes every
shape key from its config.json instead (docs/checkpoints.md); a name is pinned to its commit
(`org/name@<commit>`) when the run starts.
Parameter counts of the GPT-2-sized presets use GPT-2's vocabulary (50257) and 1024 positions;
the engine allocates the token embedding padded to a multiple of 128 rows (50304), which adds rows
that never see a target.

)";

const char* kDerived = R"(## Derived values

- **Tokens per step** = `train.global_batch_tokens`, or when it is 0,
  `train.micro_batch x train.seq_len x parallel.dp` (times `parallel.micro_batches` when
  `parallel.pp > 1`: a pipeline step runs that many micro-batches).
- **Gradient accumulation** (micro-batches per data-parallel rank per step) =
  tokens per step / (`train.micro_batch x train.seq_len x parallel.dp`); gradients are
  communicated once, after the last one. With `parallel.pp > 1` the pipeline runs them
  `parallel.micro_batches` at a time.
- **Run directory** = `run.out_dir`, or `runs/<run.name>` under the working directory when empty.
- **Config hash** (stored in checkpoints): FNV-1a over `model.arch`, `model.n_layer`,
  `model.n_head`, `model.n_embd`, `model.vocab_size` and `model.max_seq_len` (and, for
  `arch = "llama"`, every `llama:` key), the fields that shape the parameters and the AdamW state.
  A checkpoint with another hash is refused on resume.
- **Recomputation** (`train.recompute = true`): each block keeps only its input; backward re-runs
  the block's forward (up to its GELU) just before the block's backward, in one block-sized region.
  Losses and parameters are bitwise those without it; activation memory drops by
  (L − 1) × one block less its input, compute grows by one block forward up to the GELU per block
  (docs/planner.md).
- **The fused LM head** (`train.logits_chunk_mb`, default 1024): the LM head and the loss run over
  chunks of rows of the (B·T, V) logits, each chunk `logits_chunk_mb` MiB (rows a multiple of 64, at
  least 256; per rank: V / `parallel.tp` columns), so training never holds B × T × V logits. Backward
  recomputes every chunk's logits but the last (one head GEMM per chunk). With one chunk (B·T rows
  fit) nothing changes; with several, losses and gradients equal the unchunked ones within fp32
  rounding. `0` computes the whole tensor at once (docs/planner.md). The default keeps runs whose
  logits fit 1 GiB in one chunk (no recompute: qwen2.5-0.5b at B·T = 1024 measured 87.2% of the FMA
  ceiling unchunked against 79.3% in 384-row chunks of 256 MiB) and caps longer ones.
- **Deterministic mode** (`train.deterministic`, default `true`): two runs of one config on the
  same kind of machine give bit-identical losses, metrics values and checkpoints. On the CPU the
  kernels already sum in a fixed order (LayerNorm, bias, embedding and norm reductions,
  attention with disjoint outputs, ring collectives); deterministic mode adds what is not
  otherwise guaranteed: matmuls in fixed chunks whatever the thread count (so `run.threads` and
  the core count do not change a bit), and OpenMP teams never shrunk (`OMP_DYNAMIC` ignored). On
  CUDA: cuBLASLt algorithms without split-K reductions, the algorithm chosen once per shape and
  kept for the run; the embedding, LayerNorm, bias and attention backward use no float atomics in
  either mode. `false` lets the CPU split matmuls one slice per thread (fewer, larger BLAS calls;
  bit-identical only for one thread count) and CUDA use any cuBLASLt algorithm.

## Evaluation tasks during training

`eval.tasks` lists the tasks (file formats: docs/eval.md) scored every `eval.every` steps and at
the end, beside the validation loss: entries separated by `;`, each
`[kind:]path[?option=value&option=value...]`, for example

```
[eval]
every = 100
tasks = "resources/eval/arc-mini.jsonl?fewshot=2&dev=resources/eval/arc-mini-dev.jsonl; perplexity:wiki.txt?stride=128"
task_limit = 200
```

The kind prefix (`multiple_choice:`, `perplexity:`, `generate:`) may be left out: it is then found
from the file as `flotilla-worker eval` finds it. Options: `name` (default: the file's stem; the
metric names are `task/<name>/<score>`), `dev` and `fewshot` (few-shot examples), `limit` (first N
examples; default `eval.task_limit`), `stride` (perplexity window step), `regex`, `max_tokens` and
`batch` (generation, as `eval --batch`; a regex may not contain `&` or `;`). The run needs a
tokenizer (the one of `model.init_from`, else of the train shards' folder: the run's tokenizer, as
samples use). Each task's examples (or windows; generation: whole batches) are split across the
data-parallel ranks and their partial sums added, so a score equals `flotilla-worker eval
--checkpoint` with the same options on the checkpoint of that step. Each
evaluation writes a `task` record per task (docs/metrics-protocol.md), which the store keeps as
metrics `task/<task>/<score>`.

`checkpoint.keep_best = "auto"` (the default) keeps the checkpoint with the best score so far of
the first task's headline score (`acc_norm`, `bits_per_byte` or `exact_match`) from the
`keep_last` purge; `"task/<task>/<score>"` names another score, `"none"` keeps nothing extra
(docs/checkpoints.md).

## Validation rules

- `run.name`: non-empty, at most 100 characters of letters, digits, `-`, `_`, `.`; not starting
  with `.`. `run.seed` < 2^63. `run.threads` >= 0. `run.max_restarts` >= 0.
- `model`: `n_layer`, `n_head`, `n_embd`, `max_seq_len` >= 1; `n_head` divides `n_embd` (for
  llama unless `head_dim` is set); `vocab_size` in [2, 2^30]; `init_from` empty, `*.safetensors`,
  `*.bin`, a Hugging Face folder with a `config.json` or a Hub name `org/name[@revision]`. llama: `n_kv_head` divides `n_head`,
  `norm_eps` > 0, `rope_theta` > 1, `rope_factor` >= 1 when scaled, llama3 scaling needs
  0 < `rope_low_freq_factor` < `rope_high_freq_factor`; the llama-only keys are refused for gpt2.
- `checkpoint.export_hf` only for llama and with `checkpoint.save_final = true`.
- `data.source = "shards"` needs `data.train`; `eval.every > 0` with shards needs `data.val`
  (unless `eval.tasks` lists tasks: then `eval.every` times the tasks alone).
  With the synthetic source, `data.synthetic_tokens` must hold one micro-batch per rank
  (`micro_batch x seq_len x dp + 1`) and its validation tenth one micro-batch (`micro_batch x seq_len + 1`).
- `train`: `steps`, `micro_batch`, `seq_len`, `log_every` >= 1; `seq_len` <= `model.max_seq_len`;
  `global_batch_tokens` is 0 or a multiple of `micro_batch x seq_len x parallel.dp`;
  `grad_clip` >= 0; `spike_factor` 0 or > 1; `logits_chunk_mb` >= 0. `dtype = "bf16"` on `run.device = "cpu"` is checked at
  start: the CPU needs AVX512_BF16 or AMX-BF16 and the worker oneDNN (docs/models.md).
- `optim`: `lr` and `eps` finite and > 0; `beta1`, `beta2` in [0, 1); `min_lr_ratio` and
  `decay_fraction` in [0, 1]; `weight_decay` >= 0; `warmup_steps` >= 0 (it may exceed
  `train.steps`: a shortened run then stays in warmup).
- `parallel`: `dp`, `tp`, `pp`, `micro_batches` >= 1; `zero` in {0, 1, 2}; `tp` divides
  `model.n_head` and the padded vocabulary; `pp` <= `model.n_layer`; `zero = 2` not with `pp > 1`;
  with `pp > 1`, `micro_batches` divides the accumulation steps, with `pp = 1` it must be 1;
  `backend = "nccl"` only with `run.device = "cuda"`; `timeout_s` > 0; `bucket_mb` >= 0, and
  > 0 only with `zero = 0` (ZeRO reduce-scatters at once or stages one layer). At start the worker also
  checks `dp x tp x pp` equals the number of ranks (1 without `launch`).
- `checkpoint`: `every` >= 0 or `"auto"` (Daly's interval from the measured save time and
  `mtbi_s`: docs/scheduling.md), `mtbi_s` >= 0, `keep_last` >= 1, `resume` non-empty,
  `preempt_grace_s` >= 0.
- `eval`: `every`, `sample_every` >= 0; `batches`, `sample_tokens` >= 1; `task_limit` >= 0; every
  `eval.tasks` entry parses, names an existing file (and `dev` file), has a unique name of 1 to 64
  letters, digits, `.`, `_`, `-`; tasks need `parallel.tp = 1` and `parallel.pp = 1`.
  `checkpoint.keep_best` is `auto`, `none` or `task/<task>/<score>` naming a listed task.
- `budget`: all amounts finite and >= 0; `warn_fraction` in (0, 1]; `max_usd > 0` needs
  `usd_per_hour` or `price_source`.

`flotilla-worker plan --config run.toml` prints the parameters, FLOPs, memory per device and the
predicted step time of a config (docs/planner.md).

## Example

The CPU demo (`resources/configs/demo.toml`): the tiny model on the synthetic corpus with a small
vocabulary, checkpoints every 50 steps and validation every 25.

```toml
[run]
name = "demo"

[model]
preset = "tiny"
vocab_size = 512
max_seq_len = 256

[data]
source = "synthetic"
synthetic_tokens = 1000000

[train]
steps = 200
micro_batch = 8
seq_len = 128

[optim]
lr = 3e-3
schedule = "cosine"
warmup_steps = 10

[checkpoint]
every = 50
keep_last = 2

[eval]
every = 25
batches = 4
```
)";

}  // namespace

std::string config_docs_markdown() {
  const RunConfig defaults;
  std::string out = kIntro;

  out += "\n## Model presets\n\n";
  out +=
      "| preset | arch | n_layer | n_head | n_kv_head | n_embd | ffn_dim | vocab_size | parameters | "
      "description |\n";
  out += "|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& p : model_presets()) {
    ModelSection shape = p.shape;
    if (!p.sets_vocab) {  // parameter counts with GPT-2's vocabulary and 1024 positions
      shape.vocab_size = 50257;
      shape.max_seq_len = 1024;
    }
    const ModelDims d = dims_from_config(shape);
    const bool llama = d.llama();
    out += std::string("| `") + p.name + "` | " + arch_name(d.arch) + " | " + std::to_string(d.n_layer) +
           " | " + std::to_string(d.n_head) + " | " +
           (llama ? std::to_string(d.kv_heads()) : std::string("-")) + " | " + std::to_string(d.n_embd) +
           " | " + std::to_string(d.ffn()) + " | " +
           (p.sets_vocab ? std::to_string(d.vocab_size) : std::string("(yours)")) + " | " +
           with_commas(num_parameters_unpadded(d)) + " | " + cell(p.description) + " |\n";
  }
  out += kPresetsNote;

  for (const auto& section : config_sections()) {
    std::string doc = section.doc;
    doc[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(doc[0])));
    out += "## [" + std::string(section.name) + "]\n\n" + doc + ".\n\n";
    out += "| key | type | default | meaning |\n|---|---|---|---|\n";
    for (const auto& key : config_keys()) {
      if (key.section != section.name) continue;
      std::string meaning = key.doc;
      bool listed = true;  // the doc line already names every choice
      for (const auto& choice : key.choices) listed = listed && key.doc.find(choice) != std::string::npos;
      if (!listed) {
        meaning += ". Allowed: ";
        for (size_t i = 0; i < key.choices.size(); ++i) meaning += (i ? ", `" : "`") + key.choices[i] + "`";
      }
      out += "| `" + key.path() + "` | " + key_type_name(key.type()) + " | `" +
             code_cell(format_toml_value(key, defaults)) + "` | " + cell(meaning) + " |\n";
    }
    out += "\n";
  }
  out += kDerived;
  return out;
}

}  // namespace flotilla
