// Evaluation tasks: the files a user has (docs/eval.md), loaded and checked, run on a model in
// pieces any rank can take, and scored. The worker's `eval` command and evaluation during training
// (eval.tasks) run the same code, so a score during training equals `eval` on the saved checkpoint.
//
// Three kinds:
//  - multiple choice (HellaSwag / ARC / MMLU style, JSONL {"context", "choices", "answer"}):
//    lm-evaluation-harness's acc and acc_norm (its context/continuation tokenization included)
//    with their standard errors, few-shot prompts from a dev split;
//  - perplexity on a text file: a sliding window of a stated stride; perplexity, bits per byte;
//  - generation with exact match (GSM8K style, JSONL {"question", "answer"}): a regex extracts the
//    answer from the output and from the reference.
//
// Decision: a task's partial result is a fixed vector of sums (counts, sums of scores and of their
// squares, log-likelihoods, bytes), so ranks split the examples, add their partials (one all-reduce)
// and the scores come out the same for any number of ranks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/model/gpt.h"

namespace flotilla {
class Tokenizer;
}

namespace flotilla::eval {

enum class TaskKind { kMultipleChoice, kPerplexity, kGenerate };
const char* task_kind_name(TaskKind k);                  // "multiple_choice", "perplexity", "generate"
bool parse_task_kind(const std::string& s, TaskKind* out);  // the names above

struct TaskSpec {
  std::string name;  // used in metric names ([A-Za-z0-9._-], 1..64); "" = the file's stem
  std::string path;  // the task file
  TaskKind kind = TaskKind::kMultipleChoice;
  std::string dev_path;  // few-shot examples (multiple choice, generation): a file of the same format
  int fewshot = 0;       // examples from dev_path put before each question (the first N, in order)
  int limit = 0;         // only the first N examples (0: all)
  int stride = 0;        // perplexity: tokens a window moves by (0: the model's context / 2)
  std::string answer_regex;  // generation: PCRE2; its first group (else the whole match) is the answer
  int max_tokens = 256;      // generation: most new tokens per question
  int batch = 8;             // generation: questions per batched generate() (added for issue 35's eval)
};

// The kind a task file holds, for when none is given: JSONL whose first example has "choices" is
// multiple choice, one with "question" and "answer" generation, anything else a text (perplexity).
// Throws Error(kData) naming the file and line for an unreadable or empty file, or a first line that
// starts with '{' but is not one of those objects.
TaskKind detect_task_kind(const std::string& path);

// A task loaded and tokenized for one model's context length. Opaque.
struct Task;
struct TaskDeleter {
  void operator()(Task* t) const;
};
using TaskPtr = std::unique_ptr<Task, TaskDeleter>;

// Reads and checks the file(s). Throws Error(kData) naming the file and line (1-based) and what is
// wrong: missing or mistyped fields, an answer index out of range, invalid UTF-8, a line over
// 1 MiB, an empty file; Error(kUsage) for a spec that cannot be (a bad name, a bad regex).
TaskPtr load_task(const TaskSpec& spec, const Tokenizer& tokenizer, int max_seq_len);

const TaskSpec& task_spec(const Task& t);
// Units of work ranks split: examples (multiple choice, generation) or windows (perplexity).
size_t task_units(const Task& t);

// Additive partial result: partials of disjoint unit ranges add element-wise (all-reduce SUM).
struct Partial {
  std::vector<double> sums;
};
// Runs units [begin, end) (the model in evaluation mode; its activations are overwritten).
Partial run_units(Model& model, const Task& t, size_t begin, size_t end);
Partial add(const Partial& a, const Partial& b);

// The scores from the whole task's partial, by name:
//  multiple choice: acc, acc_norm, acc_stderr, acc_norm_stderr, n
//  perplexity:      perplexity, bits_per_byte, nll_per_token, tokens, bytes, n (windows)
//  generate:        exact_match, exact_match_stderr, n
std::map<std::string, double> scores(const Task& t, const Partial& total);

// The score a task is judged by (acc_norm, bits_per_byte, exact_match) and whether higher is better:
// the one Live plots first, Compare's "cost to reach a score" uses, and "best checkpoint by task"
// keeps.
std::string headline_score(TaskKind k);
bool higher_is_better(const std::string& score_name);

// A task's scores on one line, the same in the terminal and the app's log: each score with its
// standard error folded in ("acc_norm 0.85 ± 0.082"), counts as whole numbers last ("n 20").
std::string scores_line(const std::vector<std::pair<std::string, double>>& scores);

// The metric name a score is stored and plotted under: "task/<name>/<score>".
std::string metric_name(const std::string& task_name, const std::string& score_name);

}  // namespace flotilla::eval
