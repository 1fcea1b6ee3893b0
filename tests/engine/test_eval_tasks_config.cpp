// eval.tasks, eval.task_limit and checkpoint.keep_best: the task list string parses into entries
// (kind prefix, options, the name from the file's stem), every bad entry is refused under the key's
// path with the entry named, the files must exist, and keep_best must name a listed task. The keys
// travel through TOML and --set like any other.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "check.h"
#include "engine/config/config_io.h"
#include "engine/config/config_schema.h"
#include "engine/config/config_validate.h"
#include "engine/config/eval_tasks.h"
#include "engine/core/error.h"

using namespace flotilla;
namespace fs = std::filesystem;

namespace {

std::string problems_text(const RunConfig& c) {
  std::string out;
  for (const auto& p : validate(c)) out += to_string(p) + "\n";
  return out;
}

bool has(const std::string& text, const std::string& piece) { return text.find(piece) != std::string::npos; }

void test_parse(const std::string& dir) {
  const auto t = parse_eval_tasks(
      " " + dir + "/arc-mini.jsonl ; perplexity:" + dir +
      "/wiki.txt?stride=64&name=wiki2&limit=5 ;; generate:" + dir +
      "/gsm.jsonl?regex=#### (\\-?[0-9.,]+)&max_tokens=32&batch=4&fewshot=2&dev=" + dir + "/gsm-dev.jsonl");
  CHECK(t.size() == 3);
  if (t.size() != 3) return;
  CHECK(t[0].kind.empty() && t[0].path == dir + "/arc-mini.jsonl" && t[0].resolved_name() == "arc-mini");
  CHECK(t[0].limit == -1 && t[0].fewshot == 0 && t[0].stride == 0);
  CHECK(t[1].kind == "perplexity" && t[1].stride == 64 && t[1].resolved_name() == "wiki2" && t[1].limit == 5);
  CHECK(t[2].kind == "generate" && t[2].regex == "#### (\\-?[0-9.,]+)" && t[2].max_tokens == 32 &&
        t[2].batch == 4);
  CHECK(t[2].fewshot == 2 && t[2].dev == dir + "/gsm-dev.jsonl");
  CHECK(parse_eval_tasks("").empty() && parse_eval_tasks(" ; ").empty());
  // A path with a colon that is not a kind stays a path.
  CHECK(parse_eval_tasks("C:/tasks/a.jsonl").at(0).path == "C:/tasks/a.jsonl");

  const auto refused = [](const std::string& text, const std::string& piece) {
    try {
      (void)parse_eval_tasks(text);
      CHECK_MSG(false, "accepted %s", text.c_str());
    } catch (const Error& e) {
      CHECK_MSG(has(e.what(), "eval.tasks") && has(e.what(), piece), "%s: %s", text.c_str(), e.what());
    }
  };
  refused("a.jsonl?fewshot=x", "fewshot=x is not a whole number");
  refused("a.jsonl?limit=-2", "limit=-2 must be >= 0");
  refused("a.jsonl?colour=red", "unknown option \"colour\"");
  refused("a.jsonl?stride", "has no '='");
  refused("a.jsonl?kind=essay", "kind=essay");
  refused("a.jsonl?name=a b", "task name \"a b\"");
  refused("a.jsonl?fewshot=3", "needs dev=FILE");
  refused("perplexity:?stride=2", "no task file");
}

void test_validate(const std::string& dir) {
  RunConfig c;
  c.eval.tasks = dir + "/arc-mini.jsonl; perplexity:" + dir + "/wiki.txt";
  CHECK_MSG(validate(c).empty(), "%s", problems_text(c).c_str());
  c.checkpoint.keep_best = "task/wiki/bits_per_byte";
  CHECK_MSG(validate(c).empty(), "%s", problems_text(c).c_str());
  c.checkpoint.keep_best = "none";
  CHECK(validate(c).empty());

  RunConfig missing = c;
  missing.eval.tasks = dir + "/nothere.jsonl";
  std::string text = problems_text(missing);
  CHECK_MSG(has(text, "eval.tasks: task file \"" + dir + "/nothere.jsonl\" does not exist"), "%s",
            text.c_str());

  RunConfig twice = c;
  twice.eval.tasks = dir + "/arc-mini.jsonl; " + dir + "/arc-mini.jsonl";
  text = problems_text(twice);
  CHECK_MSG(has(text, "eval.tasks: two tasks are named \"arc-mini\""), "%s", text.c_str());

  RunConfig bad_best = c;
  bad_best.checkpoint.keep_best = "task/hellaswag/acc_norm";
  text = problems_text(bad_best);
  CHECK_MSG(has(text, "checkpoint.keep_best: \"task/hellaswag/acc_norm\" names task \"hellaswag\""), "%s",
            text.c_str());
  bad_best.checkpoint.keep_best = "val_loss";
  text = problems_text(bad_best);
  CHECK_MSG(has(text, "checkpoint.keep_best: \"val_loss\" is not auto, none or task/<task>/<score>"), "%s",
            text.c_str());

  RunConfig sharded = c;
  sharded.parallel.tp = 2;
  text = problems_text(sharded);
  CHECK_MSG(has(text, "eval.tasks: evaluation tasks run on whole-model replicas"), "%s", text.c_str());

  RunConfig limit = c;
  limit.eval.task_limit = -1;
  text = problems_text(limit);
  CHECK_MSG(has(text, "eval.task_limit: -1 must be >= 0"), "%s", text.c_str());

  RunConfig entry = c;
  entry.eval.tasks = dir + "/arc-mini.jsonl?fewshot=two";
  text = problems_text(entry);
  CHECK_MSG(has(text, "eval.tasks: \"" + dir + "/arc-mini.jsonl?fewshot=two\": fewshot=two"), "%s",
            text.c_str());

  // Shards without validation data: eval.every > 0 only asks for the tasks, which need none.
  RunConfig noval = c;
  noval.data.source = "shards";
  noval.data.train = dir + "/train_*.bin";
  noval.eval.every = 5;
  CHECK_MSG(validate(noval).empty(), "%s", problems_text(noval).c_str());
  noval.eval.tasks = "";
  noval.checkpoint.keep_best = "auto";
  text = problems_text(noval);
  CHECK_MSG(has(text, "eval.every: 5 asks for validation loss but data.val is empty"), "%s", text.c_str());

  // keep_best "auto": the first task's headline score, once the kind (so the score) is known.
  CHECK(keep_best_metric(c, "acc_norm").empty());  // c says "none"
  RunConfig autob = c;
  autob.checkpoint.keep_best = "auto";
  CHECK(keep_best_metric(autob, "acc_norm") == "task/arc-mini/acc_norm");
  CHECK(keep_best_metric(autob, "").empty());
  autob.eval.tasks = "";
  CHECK(keep_best_metric(autob, "acc_norm").empty());
  autob.checkpoint.keep_best = "task/wiki/bits_per_byte";
  CHECK(keep_best_metric(autob, "acc_norm") == "task/wiki/bits_per_byte");
}

void test_toml_and_set(const std::string& dir) {
  const std::string toml = "[eval]\nevery = 5\ntasks = \"" + dir +
                           "/arc-mini.jsonl?limit=3\"\ntask_limit = 7\n" +
                           "[checkpoint]\nkeep_best = \"task/arc-mini/acc\"\n";
  RunConfig c = parse_config_toml(toml, "run.toml");
  CHECK(c.eval.tasks == dir + "/arc-mini.jsonl?limit=3" && c.eval.task_limit == 7);
  CHECK(c.checkpoint.keep_best == "task/arc-mini/acc");
  CHECK_MSG(validate(c).empty(), "%s", problems_text(c).c_str());
  // The resolved config written out reads back the same.
  CHECK(configs_equal(parse_config_toml(config_to_toml(c), "again.toml"), c));
  apply_override(c, "eval.tasks=perplexity:" + dir + "/wiki.txt");
  CHECK(c.eval.tasks == "perplexity:" + dir + "/wiki.txt");
}

}  // namespace

int main() {
  const fs::path dir = fs::temp_directory_path() / ("flotilla-eval-tasks-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  for (const char* f : {"arc-mini.jsonl", "wiki.txt", "gsm.jsonl", "gsm-dev.jsonl"})
    std::ofstream(dir / f) << "x\n";
  test_parse(dir.string());
  test_validate(dir.string());
  test_toml_and_set(dir.string());
  fs::remove_all(dir);
  return flotilla_test::summary("test_eval_tasks_config");
}
