// `flotilla runs eval RUN --task FILE` (issue 35) with the real worker: a tiny Llama trained by
// `flotilla run` (text prepared with the 600-token golden SmolLM2 tokenizer, left beside the shards:
// the run's tokenizer), checkpoints at steps 10 and 20. Evaluating step 10 on a small multiple-choice
// file prints the worker's scores and stores each one as the run's metric task/<task>/<score> at
// step 10, equal to `flotilla-worker eval --checkpoint <step-10> --json` run directly; the newest
// checkpoint is the default (few-shot from a dev file there); perplexity and generation files store
// bits_per_byte and exact_match; a step without a checkpoint is refused (exit 2) and a task file the
// worker refuses stores nothing (the worker's exit status, its reason on stderr). `flotilla compare
// --target-score` then reads the stored score.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "check.h"
#include "db/database.h"
#include "db/queries.h"
#include "db/run_store.h"
#include "worker_run.h"

using namespace flotilla_test;
namespace fs = std::filesystem;
namespace db = flotilla::db;

namespace {

std::string g_root;
int g_calls = 0;

// stdout apart from stderr: the --json line is stdout.
ProcResult cli(const std::vector<std::string>& args, std::string* out = nullptr) {
  const std::string log = g_root + "/cli" + std::to_string(++g_calls);
  std::vector<std::string> argv = {
      "/bin/sh",           "-c", "cd \"$0\" && exec \"$@\" 2>\"$0/err\"", g_root, FLOTILLA_CLI_PATH, "--db",
      g_root + "/store.db"};
  argv.insert(argv.end(), args.begin(), args.end());
  ProcResult r;
  r.exit_code =
      wait_exit(spawn(argv, {"OMP_NUM_THREADS=2", "DISPLAY=", "WAYLAND_DISPLAY=", "QT_QPA_PLATFORM="}, log));
  if (out) *out = read_file(log);
  r.output = read_file(log) + read_file(g_root + "/err");
  return r;
}

// A multiple-choice file made here (docs/eval.md): context, choices, answer.
std::string mc_file() {
  std::string s;
  const char* rows[][4] = {
      {"The cat sat on the", "mat", "sky", "0"},     {"Water is", "wet", "a number", "0"},
      {"The sun rises in the", "west", "east", "1"}, {"One plus one is", "two", "blue", "0"},
      {"Birds can", "swim upward", "fly", "1"},      {"Snow is", "cold", "hot", "0"}};
  for (const auto& r : rows)
    s += nlohmann::json({{"context", r[0]}, {"choices", {r[1], r[2]}}, {"answer", std::stoi(r[3])}}).dump() +
         "\n";
  return s;
}

}  // namespace

int main() {
  g_root = fresh_dir("runs_eval_cli");
  const std::string tok = std::string(FLOTILLA_SOURCE_DIR) + "/tests/engine/golden/tokenizers/smollm2";
  std::string text;
  for (int i = 0; i < 300; ++i)
    text += "The cat sat on the mat. Water is wet. The sun rises in the east. Snow is cold.\n";
  write_text(g_root + "/corpus.txt", text);
  const auto prep = run_worker({"data", "prepare", "--input", g_root + "/corpus.txt", "--tokenizer", tok,
                                "--out", g_root + "/data", "--val-fraction", "0"});
  CHECK_MSG(prep.exit_code == 0, "%s", prep.output.c_str());
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    fs::copy_file(tok + "/" + f, g_root + "/data/" + f);
  write_text(g_root + "/tiny.toml",
             "[run]\nname = \"tiny\"\nseed = 3\nthreads = 2\n"
             "[model]\npreset = \"custom\"\narch = \"llama\"\nn_layer = 1\nn_head = 2\nn_kv_head = 1\n"
             "n_embd = 32\nffn_dim = 64\nvocab_size = 600\nmax_seq_len = 64\n"
             "[data]\nsource = \"shards\"\ntrain = \"" +
                 g_root +
                 "/data/train_*.bin\"\n"
                 "[train]\nsteps = 20\nmicro_batch = 2\nseq_len = 32\n"
                 "[optim]\nlr = 0.01\nwarmup_steps = 2\n"
                 "[checkpoint]\nevery = 10\nkeep_last = 3\n[eval]\nevery = 0\n");
  const ProcResult trained = cli({"run", g_root + "/tiny.toml", "--quiet"});
  CHECK_MSG(trained.exit_code == 0, "%s", trained.output.c_str());
  write_text(g_root + "/qa.jsonl", mc_file());

  // Step 10, as JSON: stored at step 10, the worker's own numbers.
  std::string out;
  ProcResult r = cli({"runs", "eval", "tiny", "--task", "qa.jsonl", "--step", "10", "--json"}, &out);
  CHECK_MSG(r.exit_code == 0, "%s", r.output.c_str());
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(out);
  } catch (const std::exception& e) {
    CHECK_MSG(false, "%s: %s", e.what(), r.output.c_str());
  }
  CHECK(j.value("run", "") == "tiny" && j.value("step", -1) == 10 && j.value("task", "") == "qa");
  CHECK(j.value("kind", "") == "multiple_choice");
  CHECK_MSG(j["scores"].contains("acc") && j["scores"].contains("acc_norm") && j["scores"].contains("n"),
            "%s", out.c_str());
  CHECK(j["scores"].value("n", 0.0) == 6);
  std::string run_dir, step10;
  {
    db::Database d(g_root + "/store.db");
    run_dir = db::get_run(d, "tiny").run_dir;
  }
  for (const auto& e : fs::recursive_directory_iterator(run_dir))
    if (e.is_directory() && e.path().filename() == "step-00000010") step10 = e.path().string();
  CHECK_MSG(!step10.empty(), "no step-10 checkpoint under %s", run_dir.c_str());
  const ProcResult direct =
      run_worker({"eval", "--checkpoint", step10, "--task", g_root + "/qa.jsonl", "--json"});
  CHECK_MSG(direct.exit_code == 0, "%s", direct.output.c_str());
  {
    db::Database d(g_root + "/store.db");
    const db::Run run = db::get_run(d, "tiny");
    const auto acc = db::metric_points(d, run.id, "task/qa/acc_norm");
    CHECK(acc.size() == 1 && acc[0].step == 10);
    CHECK_MSG(!acc.empty() && std::abs(acc[0].value - j["scores"].value("acc_norm", -1.0)) < 1e-12, "%s",
              out.c_str());
    // The direct run's line holds the same acc_norm.
    const size_t at = direct.output.rfind("\"acc_norm\":");
    CHECK_MSG(at != std::string::npos, "%s", direct.output.c_str());
    if (at != std::string::npos && !acc.empty())
      CHECK_NEAR(std::stod(direct.output.substr(at + 11)), acc[0].value, 1e-9);
    const auto n = db::metric_points(d, run.id, "task/qa/n");
    CHECK(n.size() == 1 && n[0].value == 6);
    // Stored with step 10's training time.
    const auto loss = db::metric_points(d, run.id, "loss");
    for (const auto& p : loss)
      if (p.step == 10 && !acc.empty()) CHECK_NEAR(acc[0].time, p.time, 1e-6);
  }

  // Few-shot from a dev file, and the other kinds: perplexity on a text file (bits per byte, lower is
  // better) and generation (exact match), from the example files the eval helper made.
  const std::string res = std::string(FLOTILLA_SOURCE_DIR) + "/resources/eval/";
  // ... with the newest checkpoint (20) by default; the text table names what was stored.
  r = cli({"runs", "eval", "tiny", "--task", res + "arc-mini.jsonl", "--dev", res + "arc-mini-dev.jsonl",
           "--fewshot", "2", "--limit", "4"},
          &out);
  CHECK_MSG(r.exit_code == 0 && out.find("step 20, task arc-mini") != std::string::npos &&
                out.find("stored at step 20 as task/arc-mini/acc,") != std::string::npos,
            "%s", r.output.c_str());
  {
    db::Database d(g_root + "/store.db");
    const auto n = db::metric_points(d, db::get_run(d, "tiny").id, "task/arc-mini/n");
    CHECK(n.size() == 1 && n[0].step == 20 && n[0].value == 4);
  }
  r = cli({"runs", "eval", "tiny", "--task", res + "wiki-mini.txt", "--limit", "2", "--step", "20", "--json"},
          &out);
  CHECK_MSG(r.exit_code == 0 && out.find("\"kind\":\"perplexity\"") != std::string::npos &&
                out.find("task/wiki-mini/bits_per_byte") != std::string::npos,
            "%s", r.output.c_str());
  r = cli({"runs", "eval", "tiny", "--task", res + "gsm-mini.jsonl", "--limit", "2", "--max-tokens", "8",
           "--step", "20", "--json"},
          &out);
  CHECK_MSG(r.exit_code == 0 && out.find("task/gsm-mini/exact_match") != std::string::npos, "%s",
            r.output.c_str());
  {
    db::Database d(g_root + "/store.db");
    const int64_t id = db::get_run(d, "tiny").id;
    const auto bpb = db::metric_points(d, id, "task/wiki-mini/bits_per_byte");
    CHECK(bpb.size() == 1 && bpb[0].step == 20 && bpb[0].value > 0);
    CHECK(db::metric_points(d, id, "task/gsm-mini/exact_match").size() == 1);
  }

  // Refusals: a step without a checkpoint; a file the worker refuses (an answer out of range) stores nothing.
  r = cli({"runs", "eval", "tiny", "--task", "qa.jsonl", "--step", "15"});
  CHECK_MSG(r.exit_code == 2 && r.output.find("no checkpoint at step 15") != std::string::npos, "%s",
            r.output.c_str());
  write_text(g_root + "/bad.jsonl", "{\"context\":\"a\",\"choices\":[\"b\",\"c\"],\"answer\":5}\n");
  r = cli({"runs", "eval", "tiny", "--task", "bad.jsonl"});
  CHECK_MSG(r.exit_code != 0 && r.output.find("bad.jsonl") != std::string::npos, "%s", r.output.c_str());
  {
    db::Database d(g_root + "/store.db");
    CHECK(db::metric_points(d, db::get_run(d, "tiny").id, "task/bad/acc").empty());
  }
  // Compare reads it: acc_norm reached (>= 0) at step 10.
  r = cli({"compare", "tiny", "tiny", "--target-score", "task/qa/acc_norm=0", "--json"}, &out);
  CHECK_MSG(r.exit_code == 0 && out.find("\"score_reached_step\": 10") != std::string::npos, "%s",
            out.c_str());
  return summary("test_runs_eval_cli");
}
