// Evaluation tasks during training (eval.tasks) and the best checkpoint by a task score
// (checkpoint.keep_best).
//
// Decision: a task's units (examples, perplexity windows) are split in contiguous ranges across the
// data-parallel ranks, each rank runs its range on its own whole-model replica (the host model, the
// device's parameters copied into it as for samples), and the partials, being sums, are added over
// the DP group in one all-reduce. Each unit is scored exactly as `flotilla-worker eval` scores it
// (the same engine/eval code, the same per-example batches), so the run's score equals `eval
// --checkpoint` on the checkpoint of that step whatever the number of ranks. Tasks are loaded once,
// on every rank, with the run's tokenizer (data/run_tokenizer.h): a task that does not load fails
// the start, not step 1000.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "engine/backend/registry.h"
#include "engine/checkpoint/store_internal.h"
#include "engine/config/eval_tasks.h"
#include "engine/core/error.h"
#include "engine/data/run_tokenizer.h"
#include "engine/tokenizer/bpe.h"
#include "engine/train/trainer_loop.h"

namespace flotilla::train_detail {

void Loop::setup_tasks() {
  const std::vector<EvalTaskEntry> entries = parse_eval_tasks(cfg.eval.tasks);
  if (entries.empty()) return;
  const std::string tok_path = run_tokenizer_path(cfg);
  if (tok_path.empty())
    throw_config(
        "eval.tasks: evaluation tasks need the run's tokenizer, and this run has none (it is the one of "
        "model.init_from, else a tokenizer file in the train shards' folder: docs/data.md); clear "
        "eval.tasks or train on prepared shards");
  const Tokenizer tok = Tokenizer::load(tok_path);
  std::string first_headline;
  for (const EvalTaskEntry& e : entries) {
    eval::TaskSpec spec;
    spec.name = e.resolved_name();
    spec.path = e.path;
    if (e.kind.empty())
      spec.kind = eval::detect_task_kind(e.path);
    else
      eval::parse_task_kind(e.kind, &spec.kind);
    spec.dev_path = e.dev;
    spec.fewshot = e.fewshot;
    spec.limit = e.limit >= 0 ? e.limit : cfg.eval.task_limit;
    spec.stride = e.stride;
    spec.answer_regex = e.regex;
    spec.max_tokens = e.max_tokens;
    if (e.batch > 0) spec.batch = e.batch;
    eval::TaskPtr task = eval::load_task(spec, tok, dims.max_seq_len);
    if (first_headline.empty()) first_headline = eval::headline_score(spec.kind);
    if (rank == 0)
      progress.line("task %s (%s): %zu units from %s", spec.name.c_str(), eval::task_kind_name(spec.kind),
                    eval::task_units(*task), spec.path.c_str());
    eval_tasks.push_back(std::move(task));
  }
  keep_metric = keep_best_metric(cfg, first_headline);
  if (!keep_metric.empty())
    keep_higher = eval::higher_is_better(keep_metric.substr(keep_metric.rfind('/') + 1));
}

void Loop::evaluate_tasks() {
  if (eval_tasks.empty()) return;
  if (device) device->get_params(model.params());  // the host mirror runs them, as samples do
  // In evaluation mode and with fp32 matmuls, as `eval` runs a checkpoint (a CPU bf16 run's matmuls
  // go back to bf16 after).
  Backend& cpu = get_backend("cpu");
  const DType matmul = cpu.matmul_dtype();
  if (matmul != DType::kF32) cpu.set_matmul_dtype(DType::kF32);
  model.set_training(false);
  struct Restore {
    Model& m;
    Backend& cpu;
    DType matmul;
    ~Restore() {
      m.set_training(true);
      if (matmul != DType::kF32) cpu.set_matmul_dtype(matmul);
    }
  } restore{model, cpu, matmul};
  const size_t parts = static_cast<size_t>(groups.dp->size());
  const size_t me = static_cast<size_t>(coord.dp);
  for (const eval::TaskPtr& task : eval_tasks) {
    const auto t0 = Clock::now();
    const eval::TaskSpec& spec = eval::task_spec(*task);
    const size_t units = eval::task_units(*task);
    // Contiguous ranges; for generation on whole blocks of spec.batch questions, the batches one
    // process (`eval`) generates in, so the outputs are the same.
    const size_t grain =
        spec.kind == eval::TaskKind::kGenerate ? static_cast<size_t>(std::max(1, spec.batch)) : 1;
    const size_t blocks = (units + grain - 1) / grain;
    const size_t begin = std::min(units, blocks * me / parts * grain);
    const size_t end = std::min(units, blocks * (me + 1) / parts * grain);
    eval::Partial partial = eval::run_units(model, *task, begin, end);
    if (parts > 1) groups.dp->all_reduce(partial.sums.data(), partial.sums.size());
    const std::map<std::string, double> scores = eval::scores(*task, partial);
    const std::string metric_prefix = "task/" + spec.name + "/";
    if (!keep_metric.empty() && keep_metric.rfind(metric_prefix, 0) == 0)
      if (const auto it = scores.find(keep_metric.substr(metric_prefix.size())); it != scores.end())
        keep_scores[step] = it->second;
    TaskRecord rec;
    rec.step = step;
    rec.tokens = tokens;
    rec.task = spec.name;
    rec.kind = eval::task_kind_name(spec.kind);
    rec.scores.assign(scores.begin(), scores.end());
    rec.seconds = ms_since(t0) / 1000.0;
    metrics.task(rec);
    const std::string headline = eval::headline_score(spec.kind);
    const auto h = scores.find(headline);
    progress.line("task  step %lld | %s %s %.4f (%zu units, %.1f s)", static_cast<long long>(step),
                  spec.name.c_str(), headline.c_str(), h != scores.end() ? h->second : std::nan(""), units,
                  rec.seconds);
  }
}

void Loop::note_keep_best() {
  if (keep_metric.empty()) return;
  const auto it = keep_scores.find(step);
  if (it != keep_scores.end() && std::isfinite(it->second)) {
    const bool better =
        keep_best_step < 0 || (keep_higher ? it->second > keep_best_value : it->second < keep_best_value);
    if (better) {
      keep_best_step = step;
      keep_best_value = it->second;
    }
  }
  store.set_pinned(keep_best_step);
}

void Loop::restore_keep_best(const TrainerState& st) {
  // The best of an earlier start counts only when it was kept by the same score and its folder is
  // still there (a resume from an older checkpoint set newer ones aside).
  if (keep_metric.empty() || st.best_task_step < 0 || st.best_task_metric != keep_metric) return;
  for (const std::string& dir : store.list())
    if (dir.size() >= ckpt::step_dir_name(st.best_task_step).size() &&
        dir.compare(dir.size() - ckpt::step_dir_name(st.best_task_step).size(), std::string::npos,
                    ckpt::step_dir_name(st.best_task_step)) == 0) {
      keep_best_step = st.best_task_step;
      keep_best_value = st.best_task_value;
      store.set_pinned(keep_best_step);
      return;
    }
}

}  // namespace flotilla::train_detail
