// flotilla-worker eval (--checkpoint DIR | --model HF_DIR) --task FILE [--kind K] [--name N]
//                      [--dev FILE --fewshot N] [--limit N] [--stride N] [--regex R]
//                      [--max-tokens N] [--batch N] [--tokenizer TOK] [--json]
//
// Decision: the command is a thin shell over engine/eval (load_task, run_units, scores), the code
// evaluation during training runs, so `eval` on a saved checkpoint gives the score the run
// recorded for that step. Units run in slices only to report progress on stderr; the partials add
// up to the same sums as one call. stdout carries the result alone (a table, or with --json one
// flat JSON line the app's Evaluate dialog and `flotilla runs eval` parse).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "engine/cli/args.h"
#include "engine/cli/commands.h"
#include "engine/core/error.h"
#include "engine/eval/task.h"
#include "engine/infer/load.h"
#include "engine/tokenizer/bpe.h"

namespace flotilla::cli {
namespace {

bool whole_number_score(const std::string& name) {
  return name == "n" || name == "tokens" || name == "bytes";
}

}  // namespace

int cmd_eval(const CommandArgs& argv) {
  Args args(argv);
  if (args.flag("--help")) {
    std::printf(
        "Usage: flotilla-worker eval (--checkpoint DIR | --model HF_DIR) --task FILE [--kind K] [--name N]\n"
        "                            [--dev FILE --fewshot N] [--limit N] [--stride N] [--regex R]\n"
        "                            [--max-tokens N] [--batch N] [--tokenizer TOK] [--device D] [--json]\n\n"
        "Evaluates a model on a task file (formats: docs/eval.md). The model is a checkpoint (a step-N\n"
        "directory, a checkpoints directory or a run directory: the newest verified checkpoint; a LoRA\n"
        "one over its base) or a Hugging Face folder or Hub name (--model); its tokenizer is the run's or\n"
        "the folder's unless --tokenizer is given.\n\n"
        "--kind multiple_choice | perplexity | generate (default: from the file: JSONL with \"choices\"\n"
        "is multiple choice, with \"question\" and \"answer\" generation, any other text perplexity).\n"
        "  multiple_choice: {\"context\", \"choices\", \"answer\"} lines; acc and acc_norm as\n"
        "    lm-evaluation-harness computes them, with their standard errors; --dev FILE --fewshot N\n"
        "    puts the dev file's first N examples (with their answers) before each context.\n"
        "  perplexity: a text file, scored by windows of the model's context moving by --stride tokens\n"
        "    (default half the context); each token is scored once. Perplexity and bits per byte.\n"
        "  generate: {\"question\", \"answer\"} lines; greedy answers to \"Question: ...\\nAnswer:\" up to\n"
        "    --max-tokens (256), a blank line or the end token; --regex R (PCRE2; default GSM8K's\n"
        "    \"#### (\\-?[0-9.,]+)\") extracts the answer from the output and the reference (its first\n"
        "    group); exact match after dropping \",\" \"$\" and a final \".\". --batch N questions at once "
        "(8).\n"
        "--device cpu|cuda where the model runs (cpu).\n"
        "--name N names the task in metric names task/N/<score> (default: the file's name without its\n"
        "extension); --limit N evaluates the first N examples (perplexity: windows) only.\n\n"
        "Prints a table of the scores, or with --json one JSON line: the scores (multiple choice: acc,\n"
        "acc_norm, acc_stderr, acc_norm_stderr, n) and task, kind, seconds, examples_per_s, source (the\n"
        "model loaded) and step (-1 for a Hugging Face folder). Progress goes to stderr. A bad task file\n"
        "is refused naming the file and the line (exit code 4).\n");
    return 0;
  }
  infer::LoadRequest lr;
  lr.checkpoint = args.value_or("--checkpoint", "");
  lr.hf_model = args.value_or("--model", "");
  lr.device = args.value_or("--device", "cpu");
  eval::TaskSpec spec;
  spec.path = args.value_or("--task", "");
  const auto kind = args.value("--kind");
  spec.name = args.value_or("--name", "");
  spec.dev_path = args.value_or("--dev", "");
  spec.fewshot = static_cast<int>(args.int_or("--fewshot", 0));
  spec.limit = static_cast<int>(args.int_or("--limit", 0));
  spec.stride = static_cast<int>(args.int_or("--stride", 0));
  spec.answer_regex = args.value_or("--regex", "");
  spec.max_tokens = static_cast<int>(args.int_or("--max-tokens", 256));
  spec.batch = static_cast<int>(args.int_or("--batch", 8));
  const auto tokenizer_path = args.value("--tokenizer");
  const bool json = args.flag("--json");
  args.finish("eval");
  if (lr.checkpoint.empty() == lr.hf_model.empty())
    throw_usage("eval needs one of --checkpoint DIR or --model HF_DIR");
  if (spec.path.empty()) throw_usage("eval needs --task FILE (formats: docs/eval.md)");
  if (spec.limit < 0) throw_usage("--limit must be 0 (all) or more");
  if (spec.stride < 0) throw_usage("--stride must be 0 (half the context) or more");
  if (spec.fewshot < 0) throw_usage("--fewshot must be 0 or more");
  if (spec.max_tokens < 1 || spec.max_tokens > 100000)
    throw_usage("--max-tokens must be between 1 and 100000");
  if (spec.batch < 1 || spec.batch > 4096) throw_usage("--batch must be between 1 and 4096");
  if (!spec.dev_path.empty() && spec.fewshot == 0)
    throw_usage("--dev FILE needs --fewshot N (how many examples)");
  if (kind) {
    if (!eval::parse_task_kind(*kind, &spec.kind))
      throw_usage("--kind takes multiple_choice, perplexity or generate, not '" + *kind + "'");
  } else {
    spec.kind = eval::detect_task_kind(spec.path);
  }

  infer::LoadedModel lm = infer::load_for_inference(lr);
  for (const auto& w : lm.warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
  if (!lm.description.empty()) std::fprintf(stderr, "%s\n", lm.description.c_str());
  const std::string tok_path = tokenizer_path ? *tokenizer_path : lm.tokenizer;
  if (tok_path.empty())
    throw_usage("no tokenizer was found for " + lm.source + ": give --tokenizer (the run's tokenizer)");
  const Tokenizer tok = Tokenizer::load(tok_path);
  const ModelDims& d = lm.model->dims();
  if (tok.vocab_size() > d.vocab_size)
    throw_usage("the tokenizer " + tok_path + " has " + std::to_string(tok.vocab_size()) +
                " tokens but the model only " + std::to_string(d.vocab_size) +
                ": give the tokenizer the model was trained with (--tokenizer)");

  const auto t0 = std::chrono::steady_clock::now();
  const eval::TaskPtr task = eval::load_task(spec, tok, d.max_seq_len);
  const size_t units = eval::task_units(*task);
  const std::string name = eval::task_spec(*task).name;
  std::fprintf(stderr, "eval %s (%s): %zu %s from %s\n", name.c_str(), eval::task_kind_name(spec.kind), units,
               spec.kind == eval::TaskKind::kPerplexity ? "windows" : "examples", spec.path.c_str());
  eval::Partial total;
  const size_t slice = std::max<size_t>(1, units / 20);
  for (size_t b = 0; b < units; b += slice) {
    const size_t e = std::min(units, b + slice);
    total = eval::add(total, eval::run_units(*lm.model, *task, b, e));
    std::fprintf(stderr, "eval %s: %zu/%zu\n", name.c_str(), e, units);
  }
  if (total.sums.empty()) total = eval::run_units(*lm.model, *task, 0, 0);  // no units: zero sums
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::map<std::string, double> sc = eval::scores(*task, total);
  const double per_s = seconds > 0 ? static_cast<double>(units) / seconds : 0;

  if (json) {
    nlohmann::json j;
    for (const auto& [k, v] : sc) {
      if (whole_number_score(k))
        j[k] = static_cast<int64_t>(std::llround(v));
      else
        j[k] = std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
    }
    j["task"] = name;
    j["kind"] = eval::task_kind_name(spec.kind);
    j["seconds"] = seconds;
    j["examples_per_s"] = per_s;
    j["source"] = lm.source;
    j["step"] = lm.step;
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::printf("task %s (%s), %zu %s, %s%s\n", name.c_str(), eval::task_kind_name(spec.kind), units,
                spec.kind == eval::TaskKind::kPerplexity ? "windows" : "examples", lm.source.c_str(),
                lm.step >= 0 ? (" step " + std::to_string(lm.step)).c_str() : "");
    for (const auto& [k, v] : sc) {
      if (k.ends_with("_stderr")) continue;
      const auto err = sc.find(k + "_stderr");
      if (whole_number_score(k))
        std::printf("  %-16s %lld\n", k.c_str(), static_cast<long long>(std::llround(v)));
      else if (err != sc.end())
        std::printf("  %-16s %.4f ± %.4f\n", k.c_str(), v, err->second);
      else
        std::printf("  %-16s %.4f\n", k.c_str(), v);
    }
    std::printf("  %.1f s, %.2f %s/s\n", seconds, per_s,
                spec.kind == eval::TaskKind::kPerplexity ? "windows" : "examples");
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace flotilla::cli
