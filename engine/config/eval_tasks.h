// eval.tasks and checkpoint.keep_best: the evaluation tasks a run scores while it trains, read from
// one config string, and the task score whose best checkpoint is kept from purging.
//
// Decision: the config schema has scalar keys only (one table row per key: TOML, JSON, --set, the
// wizard, docs, diffs all enumerate it), so the task list is one string rather than an array of
// tables: entries separated by ';', each `[kind:]path[?option=value&option=value...]`, e.g.
//   eval.tasks = "resources/eval/arc-mini.jsonl?fewshot=2&dev=resources/eval/arc-dev.jsonl;
//                 perplexity:resources/eval/wiki.txt?stride=128"
// The kind prefix is only read as one when it is a kind's name (so "C:/x" stays a path); without it
// the kind is found from the file (engine/eval: JSONL with "choices" is multiple choice, with
// "question" generation, other text perplexity). Options: name, dev, fewshot, limit, stride,
// regex, max_tokens, batch (a regex may not hold '&' or ';'). Parsing is pure; validate() adds the file
// checks (each path exists) and reports problems under the key's path.
#pragma once

#include <string>
#include <vector>

#include "engine/config/run_config.h"

namespace flotilla {

struct EvalTaskEntry {
  std::string kind;  // multiple_choice | perplexity | generate; "" = found from the file
  std::string path;
  std::string name;  // "" = the file's stem
  std::string dev;   // few-shot examples' file ("" none)
  int fewshot = 0;
  int limit = -1;  // -1: eval.task_limit
  int stride = 0;  // perplexity: 0 = the model's context / 2
  std::string regex;
  int max_tokens = 256;
  int batch = 0;  // generation: questions per batch (0: eval's default, as `eval --batch`)

  // The task's name as metrics carry it: `name`, else the path's stem ("arc-mini.jsonl" -> "arc-mini").
  std::string resolved_name() const;
};

// Parses eval.tasks. Throws Error(kConfig) "eval.tasks: <what is wrong>" (the entry quoted).
std::vector<EvalTaskEntry> parse_eval_tasks(const std::string& text);

// Problems of eval.tasks and checkpoint.keep_best, as (path, message) pairs for validate(): a bad
// entry, a bad name ([A-Za-z0-9._-]{1,64}), two tasks with one name, a file that does not exist,
// keep_best naming no task of the list.
std::vector<std::pair<std::string, std::string>> eval_task_problems(const RunConfig& config);

// The metric checkpoint.keep_best asks for: "" for none (keep_best = "none", or "auto" without
// tasks), else "task/<task>/<score>". `auto_score` is the first task's headline score name (the
// caller knows the kinds; "" when it does not yet).
std::string keep_best_metric(const RunConfig& config, const std::string& auto_score);

}  // namespace flotilla
