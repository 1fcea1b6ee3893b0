// `flotilla-worker eval --checkpoint RUN` on a run trained here: the newest verified checkpoint is
// loaded with the run's tokenizer (the one beside its shards, found as the run found it), its step
// is reported, and the scores it prints equal engine/eval's on the same checkpoint loaded in
// process — the equality evaluation during training relies on. The three kinds run through the
// command, with --limit and --name.
#include <omp.h>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "check.h"
#include "engine/eval/task.h"
#include "engine/infer/load.h"
#include "engine/tokenizer/bpe.h"
#include "worker_run.h"

using namespace flotilla_test;

namespace {

const std::string kRes = std::string(FLOTILLA_SOURCE_DIR) + "/resources/eval/";

std::string config(const std::string& data) {
  return "[run]\nname = \"evalck\"\nseed = 3\nthreads = 1\n"
         "[model]\npreset = \"custom\"\narch = \"llama\"\nn_layer = 2\nn_head = 4\nn_kv_head = 2\n"
         "n_embd = 64\nffn_dim = 128\nvocab_size = 384\nmax_seq_len = 64\n"
         "[data]\nsource = \"shards\"\ntrain = \"" +
         data +
         "/train_*.bin\"\n"
         "[train]\nsteps = 6\nmicro_batch = 2\nseq_len = 64\n"
         "[optim]\nlr = 0.01\nwarmup_steps = 2\n"
         "[checkpoint]\nevery = 6\n[eval]\nevery = 0\n";
}

// The last line of the output that parses as a JSON object (stderr lines are around it).
nlohmann::json json_line(const std::string& output) {
  nlohmann::json found;
  size_t at = 0;
  while (at < output.size()) {
    const size_t end = output.find('\n', at);
    const auto j = nlohmann::json::parse(
        output.substr(at, end == std::string::npos ? std::string::npos : end - at), nullptr, false);
    if (j.is_object()) found = j;
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return found;
}

}  // namespace

int main() {
  // One thread: tiny matmuls gain nothing from two on a shared machine, and lose to OpenMP's waits.
  omp_set_num_threads(1);
  const std::string root = fresh_dir("eval_checkpoint");
  const std::string tok_dir = std::string(FLOTILLA_SOURCE_DIR) + "/tests/engine/golden/eval/llama";
  const auto prep = run_worker({"data", "prepare", "--input", kRes + "wiki-mini.txt", "--tokenizer", tok_dir,
                                "--out", root + "/data", "--val-fraction", "0"});
  CHECK_MSG(prep.exit_code == 0, "data prepare: %s", prep.output.c_str());
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    std::filesystem::copy_file(tok_dir + "/" + f, root + "/data/" + f);
  const std::string run = root + "/run";
  write_text(root + "/evalck.toml", config(root + "/data"));
  const auto trained = run_worker({"train", "--config", root + "/evalck.toml", "--out-dir", run, "--quiet"},
                                  {"OMP_NUM_THREADS=1", "FLOTILLA_PEAK_FLOPS=1e11"});
  CHECK_MSG(trained.exit_code == 0, "train: %s", trained.output.c_str());

  // In process: the checkpoint as load_for_inference gives it, its tokenizer, engine/eval.
  flotilla::infer::LoadRequest lr;
  lr.checkpoint = run;
  flotilla::infer::LoadedModel lm = flotilla::infer::load_for_inference(lr);
  CHECK(lm.step == 6);
  CHECK_MSG(!lm.tokenizer.empty(), "the run's tokenizer is found");
  const flotilla::Tokenizer tok = flotilla::Tokenizer::load(lm.tokenizer);
  struct Case {
    std::vector<std::string> flags;
    flotilla::eval::TaskSpec spec;
  };
  flotilla::eval::TaskSpec mc, ppl, gen;
  mc.path = kRes + "arc-mini.jsonl";
  mc.dev_path = kRes + "arc-mini-dev.jsonl";
  mc.fewshot = 1;
  mc.name = "arc1";
  ppl.path = kRes + "wiki-mini.txt";
  ppl.kind = flotilla::eval::TaskKind::kPerplexity;
  ppl.stride = 16;
  gen.path = kRes + "gsm-mini.jsonl";
  gen.kind = flotilla::eval::TaskKind::kGenerate;
  gen.limit = 3;
  gen.max_tokens = 8;
  const std::vector<Case> cases = {
      {{"--task", mc.path, "--dev", mc.dev_path, "--fewshot", "1", "--name", "arc1"}, mc},
      {{"--task", ppl.path, "--stride", "16"}, ppl},
      {{"--task", gen.path, "--limit", "3", "--max-tokens", "8"}, gen},
  };
  for (const Case& c : cases) {
    std::vector<std::string> argv = {"eval", "--checkpoint", run, "--json"};
    argv.insert(argv.end(), c.flags.begin(), c.flags.end());
    const auto r = run_worker(argv, {"OMP_NUM_THREADS=1"});
    CHECK_MSG(r.exit_code == 0, "eval: %s", r.output.c_str());
    const nlohmann::json j = json_line(r.output);
    const auto task = flotilla::eval::load_task(c.spec, tok, lm.model->dims().max_seq_len);
    const auto want = flotilla::eval::scores(
        *task, flotilla::eval::run_units(*lm.model, *task, 0, flotilla::eval::task_units(*task)));
    CHECK_MSG(j.is_object() && j.value("step", -2) == 6, "eval --json: %s", r.output.c_str());
    CHECK(j.value("task", "") == flotilla::eval::task_spec(*task).name);
    CHECK(j.value("kind", "") == flotilla::eval::task_kind_name(c.spec.kind));
    for (const auto& [k, v] : want) {
      CHECK_MSG(j.contains(k) && std::abs(j[k].get<double>() - v) <= 1e-12 * std::max(1.0, std::abs(v)),
                "%s %s: %s vs %.17g", j.value("task", "").c_str(), k.c_str(),
                j.contains(k) ? j[k].dump().c_str() : "-", v);
    }
  }
  return flotilla_test::summary("test_eval_checkpoint");
}
