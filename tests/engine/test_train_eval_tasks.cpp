// Evaluation tasks during training (eval.tasks) on two data-parallel ranks (Gloo, the real worker
// through `launch`): every eval.every steps each task's units are split across the ranks and their
// partial sums added, and rank 0 writes one task record per task. The scores equal what `eval`
// computes on the saved checkpoint of that step (load_for_inference + the whole task on one
// process, and the worker's own `eval --checkpoint --json`), to 1e-6: multiple choice, perplexity
// and generation (split on whole generation batches). With
// checkpoint.keep_last = 1, the purge keeps the newest checkpoint and the best one by
// checkpoint.keep_best (auto: the first task's acc_norm), and nothing else.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "check.h"
#include "engine/data/synthetic.h"
#include "engine/eval/task.h"
#include "engine/infer/load.h"
#include "engine/tokenizer/bpe.h"
#include "worker_run.h"

using namespace flotilla;
using flotilla_test::ProcResult;
using flotilla_test::run_worker;
namespace fs = std::filesystem;

namespace {

const std::string kRes = std::string(FLOTILLA_SOURCE_DIR) + "/resources/eval/";

// The record's scores by name.
std::map<std::string, double> scores_of(const nlohmann::json& r) {
  std::map<std::string, double> out;
  for (auto it = r["scores"].begin(); it != r["scores"].end(); ++it)
    if (it.value().is_number()) out[it.key()] = it.value().get<double>();
  return out;
}

// `eval` on a checkpoint, in this process: the loader and the task code the worker's eval runs.
std::map<std::string, double> eval_checkpoint(const std::string& dir, const eval::TaskSpec& spec) {
  infer::LoadRequest req;
  req.checkpoint = dir;
  infer::LoadedModel m = infer::load_for_inference(req);
  CHECK_MSG(!m.tokenizer.empty(), "no tokenizer found for %s", dir.c_str());
  const Tokenizer tok = Tokenizer::load(m.tokenizer);
  const eval::TaskPtr t = eval::load_task(spec, tok, m.model->dims().max_seq_len);
  return eval::scores(*t, eval::run_units(*m.model, *t, 0, eval::task_units(*t)));
}

using Recorded = std::map<int64_t, std::map<std::string, std::map<std::string, double>>>;

// step -> task -> scores, from the run's task records.
Recorded task_records(const std::string& out) {
  Recorded recorded;
  for (const auto& r : flotilla_test::read_metrics(out)) {
    if (r["type"] != "task") continue;
    CHECK(r["rank"] == 0);
    recorded[r["step"].get<int64_t>()][r["task"].get<std::string>()] = scores_of(r);
    if (r["task"] == "arc-mini") CHECK(r["kind"] == "multiple_choice" && r["scores"]["n"] == 20);
    if (r["task"] == "wiki") CHECK(r["kind"] == "perplexity" && r["scores"]["n"].get<double>() >= 2);
    if (r["task"] == "gsm-mini") CHECK(r["kind"] == "generate" && r["scores"]["n"] == 20);
  }
  return recorded;
}

// The step with the best acc_norm (the first on ties), as checkpoint.keep_best = "auto" keeps.
int64_t best_step(const Recorded& recorded) {
  int64_t best = -1;
  for (const auto& [step, tasks] : recorded)
    if (best < 0 || tasks.at("arc-mini").at("acc_norm") > recorded.at(best).at("arc-mini").at("acc_norm"))
      best = step;
  return best;
}

std::set<int64_t> kept_steps(const std::string& out) {
  std::set<int64_t> kept;
  for (const auto& e : fs::directory_iterator(fs::path(out) / "checkpoints")) {
    const std::string name = e.path().filename().string();
    if (name.rfind("step-", 0) == 0 && name.find(".tmp") == std::string::npos)
      kept.insert(std::stoll(name.substr(5)));
  }
  return kept;
}

}  // namespace

int main() {
  const fs::path root = fs::path(FLOTILLA_TEST_TMP) / "train_eval_tasks";
  fs::remove_all(root);
  const fs::path data = root / "data";
  // Shards with the run's tokenizer beside them (run_tokenizer.h), trained on the task files.
  write_synthetic_corpus(data.string(), 320, 40000, 4000, 7);
  Tokenizer::train_files({kRes + "arc-mini.jsonl", kRes + "gsm-mini.jsonl", kRes + "wiki-mini.txt"}, 320)
      .save((data / "tokenizer.flotilla.json").string());
  const std::string out = (root / "run").string();
  const std::string cfg = (root / "run.toml").string();
  std::ofstream(cfg)
      << "[run]\nname = \"tasks\"\nthreads = 1\n"
         "[model]\npreset = \"custom\"\narch = \"llama\"\nn_layer = 2\nn_head = 4\nn_kv_head = 2\n"
         "n_embd = 64\nffn_dim = 96\nvocab_size = 320\nmax_seq_len = 64\n"
         "[data]\nsource = \"shards\"\ntrain = \""
      << (data / "train_*.bin").string() << "\"\nval = \"" << (data / "val_*.bin").string()
      << "\"\n[train]\nsteps = 6\nmicro_batch = 2\nseq_len = 32\n"
         "[optim]\nlr = 0.02\nwarmup_steps = 0\n"
         "[parallel]\ndp = 2\ntimeout_s = 60\n"
         "[checkpoint]\nevery = 2\nkeep_last = 1\n"
         "[eval]\nevery = 2\nbatches = 1\ntasks = \""
      << kRes << "arc-mini.jsonl; perplexity:" << kRes << "wiki-mini.txt?stride=16&name=wiki; " << kRes
      << "gsm-mini.jsonl?max_tokens=6&batch=4\"\n";
  const ProcResult run = run_worker({"launch", "--nproc-per-node", "2", "--master-port", "0", "--", "train",
                                     "--config", cfg, "--out-dir", out, "--quiet", "--no-stdout-metrics"});
  CHECK_MSG(run.exit_code == 0, "%s", run.output.c_str());

  const Recorded recorded = task_records(out);
  CHECK_MSG(recorded.size() == 3 && recorded.count(2) && recorded.count(4) && recorded.count(6),
            "task records at %zu steps", recorded.size());

  // The purge kept the newest and the best by acc_norm (the first on ties), nothing else.
  const int64_t best = best_step(recorded);
  const std::set<int64_t> kept = kept_steps(out);
  const std::set<int64_t> want = {best, 6};
  CHECK_MSG(kept == want, "kept %zu checkpoints; best by acc_norm is step %lld", kept.size(),
            static_cast<long long>(best));
  std::fprintf(stderr, "best checkpoint by acc_norm: step %lld (%s the newest)\n",
               static_cast<long long>(best), best == 6 ? "is" : "is not");

  // Each kept checkpoint scores as the run said at its step.
  eval::TaskSpec mc;
  mc.path = kRes + "arc-mini.jsonl";
  eval::TaskSpec ppl;
  ppl.path = kRes + "wiki-mini.txt";
  ppl.name = "wiki";
  ppl.kind = eval::TaskKind::kPerplexity;
  ppl.stride = 16;
  eval::TaskSpec gen;
  gen.path = kRes + "gsm-mini.jsonl";
  gen.kind = eval::TaskKind::kGenerate;
  gen.max_tokens = 6;
  gen.batch = 4;
  const std::map<std::string, std::vector<std::string>> cli_args = {
      {"arc-mini", {"--task", kRes + "arc-mini.jsonl"}},
      {"wiki",
       {"--task", kRes + "wiki-mini.txt", "--kind", "perplexity", "--name", "wiki", "--stride", "16"}},
      {"gsm-mini", {"--task", kRes + "gsm-mini.jsonl", "--max-tokens", "6", "--batch", "4"}}};
  for (int64_t step : kept) {
    char name[32];
    std::snprintf(name, sizeof name, "step-%08lld", static_cast<long long>(step));
    const std::string dir = (fs::path(out) / "checkpoints" / name).string();
    for (const auto& [spec, task] :
         {std::pair{mc, std::string("arc-mini")}, std::pair{ppl, std::string("wiki")}}) {
      const auto got = eval_checkpoint(dir, spec);
      const auto& want_scores = recorded.at(step).at(task);
      CHECK(!want_scores.empty() && got.size() == want_scores.size());
      for (const auto& [score, value] : want_scores)
        CHECK_MSG(
            got.count(score) && std::fabs(got.at(score) - value) <= 1e-6 * std::max(1.0, std::fabs(value)),
            "step %lld %s %s: run %.9g, eval %.9g", static_cast<long long>(step), task.c_str(), score.c_str(),
            value, got.count(score) ? got.at(score) : NAN);
    }
  }
  // Resumed for 4 more steps: the best checkpoint of the first start is still known (trainer.json) and
  // kept, unless a later evaluation beat it.
  const ProcResult more =
      run_worker({"launch", "--nproc-per-node", "2", "--master-port", "0", "--", "train", "--config", cfg,
                  "--out-dir", out, "--set", "train.steps=10", "--quiet", "--no-stdout-metrics"});
  CHECK_MSG(more.exit_code == 0, "%s", more.output.c_str());
  const Recorded all = task_records(out);
  CHECK(all.size() == 5 && all.count(8) && all.count(10));
  const int64_t best_all = best_step(all);
  CHECK_MSG(kept_steps(out) == (std::set<int64_t>{best_all, 10}),
            "after the resume, best by acc_norm is step %lld", static_cast<long long>(best_all));
  const std::string state = flotilla_test::read_file(out + "/checkpoints/step-00000010/trainer.json");
  const auto st = nlohmann::json::parse(state, nullptr, false);
  CHECK_MSG(st.is_object() && st.contains("keep_best") && st["keep_best"]["step"] == best_all &&
                st["keep_best"]["metric"] == "task/arc-mini/acc_norm",
            "%s", state.c_str());
  return flotilla_test::summary("test_train_eval_tasks");
}
