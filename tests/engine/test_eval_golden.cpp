// Evaluation against transformers and lm-evaluation-harness (goldens written by
// tests/reference/make_eval_goldens.py into tests/engine/golden/eval/): on small random GPT-2, Llama
// (a BOS-adding tokenizer) and Qwen3 folders with a BPE tokenizer trained by `tokenizers`,
//  - every multiple-choice request (0-shot and 2-shot, cut from the left to the context) has the
//    token ids lm-evaluation-harness builds, each choice's log-likelihood is transformers' to 1e-4
//    relative and its greedy flag the same, so acc / acc_norm are identical (the script checked
//    them against lm_eval 0.4.13 itself) and their stderrs equal;
//  - sliding-window perplexity (strides 32 and 13) scores the same tokens as transformers' loop and
//    its perplexity matches to 1e-4 relative;
//  - the generation task's prompts are transformers' tokens and greedy generation equals
//    transformers' generate() token for token;
//  - `flotilla-worker eval --model DIR --json` prints those scores.
#include <sys/wait.h>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include <omp.h>

#include "check.h"
#include "engine/eval/task.h"
#include "engine/eval/task_impl.h"
#include "engine/infer/generate.h"
#include "engine/infer/load.h"
#include "engine/infer/score.h"
#include "engine/interop/gpt2_safetensors.h"
#include "engine/tokenizer/bpe.h"

using namespace flotilla;

namespace {

const std::string kSrc = FLOTILLA_SOURCE_DIR;
const std::string kGold = kSrc + "/tests/engine/golden/eval/";
const std::string kRes = kSrc + "/resources/eval/";

double rel(double a, double b) { return std::fabs(a - b) / std::max(1e-30, std::fabs(b)); }

std::string run(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int rc = pclose(p);
  CHECK_MSG(rc == 0, "%s exited %d", cmd.c_str(), rc);
  return out;
}

void check_model(const std::string& name, const nlohmann::json& g, int ctx) {
  // load_for_inference reads the Llama family's folders; a GPT-2 folder is read as `export` writes
  // it (engine/interop/gpt2_safetensors.h), into the engine's own GPT-2.
  infer::LoadRequest lr;
  lr.hf_model = kGold + name;
  infer::LoadedModel lm;
  if (name == "gpt2") {
    const std::string st = lr.hf_model + "/model.safetensors";
    const ModelDims d = interop::infer_dims_from_safetensors(st);
    lm.model = std::make_unique<Model>(d);
    lm.model->set_params_from_full(interop::import_gpt2_safetensors(st, d).data());
    lm.model->set_training(false);
    lm.tokenizer = lr.hf_model;
  } else {
    lm = infer::load_for_inference(lr);
  }
  CHECK(lm.model->dims().max_seq_len == ctx);
  CHECK_MSG(!lm.tokenizer.empty(), "%s: the folder's tokenizer is found", name.c_str());
  const Tokenizer tok = Tokenizer::load(lm.tokenizer.empty() ? lr.hf_model : lm.tokenizer);
  double worst = 0;
  for (int shots : {0, 2}) {
    const nlohmann::json& mc = g.at("mc_" + std::to_string(shots) + "shot");
    eval::TaskSpec spec;
    spec.path = kRes + "arc-mini.jsonl";
    if (shots) spec.dev_path = kRes + "arc-mini-dev.jsonl", spec.fewshot = shots;
    const eval::TaskPtr t = eval::load_task(spec, tok, ctx);
    CHECK(t->mc.size() == mc.at("choices").size());
    size_t ids_same = 0, greedy_same = 0, total = 0;
    for (size_t i = 0; i < t->mc.size(); ++i) {
      const auto& e = t->mc[i];
      const auto s = infer::score(*lm.model, e.requests, static_cast<int>(e.requests.size()));
      for (size_t k = 0; k < e.requests.size(); ++k) {
        const nlohmann::json& want = mc["choices"][i][k];
        ++total;
        ids_same += e.requests[k].ids == want.at("ids").get<std::vector<int32_t>>() &&
                    e.requests[k].first == want.at("first").get<size_t>();
        worst = std::max(worst, rel(s[k].sum(), want.at("ll").get<double>()));
        greedy_same += s[k].all_greedy() == want.at("greedy").get<bool>();
      }
    }
    CHECK_MSG(ids_same == total, "%s %d-shot: %zu of %zu requests tokenized as lm-evaluation-harness does",
              name.c_str(), shots, ids_same, total);
    CHECK_MSG(greedy_same == total, "%s %d-shot: greedy flags %zu of %zu", name.c_str(), shots, greedy_same,
              total);
    const auto sc = eval::scores(*t, eval::run_units(*lm.model, *t, 0, eval::task_units(*t)));
    CHECK_MSG(
        sc.at("acc") == mc.at("acc").get<double>() && sc.at("acc_norm") == mc.at("acc_norm").get<double>(),
        "%s %d-shot: acc %g acc_norm %g, transformers %g %g", name.c_str(), shots, sc.at("acc"),
        sc.at("acc_norm"), mc.at("acc").get<double>(), mc.at("acc_norm").get<double>());
    CHECK_NEAR(sc.at("acc_stderr"), mc.at("acc_stderr").get<double>(), 1e-12);
    CHECK_NEAR(sc.at("acc_norm_stderr"), mc.at("acc_norm_stderr").get<double>(), 1e-12);
  }
  CHECK_MSG(worst < 1e-4, "%s: worst relative log-likelihood difference %.3g", name.c_str(), worst);
  std::printf("%s: multiple choice log-likelihoods within %.2g relative of transformers\n", name.c_str(),
              worst);
  // Generation: the generate task's prompts are transformers' tokens of "Question: ...\nAnswer:"
  // (cut to leave room for the answer) and greedy generation continues them as transformers'
  // generate() does, token for token, stopping at the same end tokens.
  {
    eval::TaskSpec spec;
    spec.path = kRes + "gsm-mini.jsonl";
    spec.kind = eval::TaskKind::kGenerate;
    spec.max_tokens = 16;  // expected.json gen_tokens
    const eval::TaskPtr t = eval::load_task(spec, tok, ctx);
    CHECK(t->stop_ids == g.at("gen_stop_ids").get<std::vector<int32_t>>());
    infer::GenerateOptions o;
    o.max_tokens = spec.max_tokens;
    o.temperature = 0;
    o.stop_ids = t->stop_ids;
    std::vector<std::vector<int32_t>> prompts;
    size_t prompts_same = 0;
    for (size_t i = 0; i < g.at("gen").size(); ++i) {
      prompts.push_back(t->gen[i].prompt);
      prompts_same += t->gen[i].prompt == g["gen"][i].at("prompt").get<std::vector<int32_t>>();
    }
    CHECK_MSG(prompts_same == prompts.size(), "%s: %zu of %zu prompts as transformers tokenizes them",
              name.c_str(), prompts_same, prompts.size());
    const auto out = infer::generate(*lm.model, prompts, o);
    size_t same = 0;
    for (size_t i = 0; i < out.size(); ++i)
      same += out[i].ids == g["gen"][i].at("output").get<std::vector<int32_t>>();
    CHECK_MSG(same == out.size(), "%s: %zu of %zu greedy generations equal transformers' generate()",
              name.c_str(), same, out.size());
  }
  for (int stride : {32, 13}) {
    const nlohmann::json& p = g.at("ppl_" + std::to_string(stride));
    eval::TaskSpec spec;
    spec.path = kRes + "wiki-mini.txt";
    spec.kind = eval::TaskKind::kPerplexity;
    spec.stride = stride;
    const eval::TaskPtr t = eval::load_task(spec, tok, ctx);
    CHECK(eval::task_units(*t) == p.at("windows").get<size_t>());
    const auto sc = eval::scores(*t, eval::run_units(*lm.model, *t, 0, eval::task_units(*t)));
    CHECK(sc.at("tokens") == p.at("tokens").get<double>());
    const double r = rel(sc.at("perplexity"), p.at("perplexity").get<double>());
    CHECK_MSG(r < 1e-4, "%s stride %d: perplexity %.6f, transformers %.6f", name.c_str(), stride,
              sc.at("perplexity"), p.at("perplexity").get<double>());
    std::printf("%s stride %d: perplexity %.4f (transformers %.4f, relative %.2g)\n", name.c_str(), stride,
                sc.at("perplexity"), p.at("perplexity").get<double>(), r);
  }
}

}  // namespace

int main() {
  // One thread: tiny matmuls gain nothing from two on a shared machine, and lose to OpenMP's waits.
  omp_set_num_threads(1);
  std::ifstream in(kGold + "expected.json");
  const nlohmann::json g = nlohmann::json::parse(in);
  const int ctx = g.at("ctx").get<int>();
  for (const char* name : {"gpt2", "llama", "qwen3"}) check_model(name, g.at("models").at(name), ctx);

  // The worker command prints the same scores as one JSON line.
  const std::string out = run("OMP_NUM_THREADS=1 " + std::string(FLOTILLA_WORKER_PATH) + " eval --model " +
                              kGold + "llama --task " + kRes + "arc-mini.jsonl --dev " + kRes +
                              "arc-mini-dev.jsonl --fewshot 2 --json 2>/dev/null");
  const nlohmann::json j = nlohmann::json::parse(out, nullptr, false);
  const nlohmann::json& want = g["models"]["llama"]["mc_2shot"];
  CHECK_MSG(j.is_object(), "eval --json printed: %s", out.c_str());
  if (j.is_object()) {
    CHECK(j.value("acc", -1.0) == want["acc"].get<double>() &&
          j.value("acc_norm", -1.0) == want["acc_norm"].get<double>());
    CHECK(j.value("n", 0) == 20 && j.value("task", "") == "arc-mini" &&
          j.value("kind", "") == "multiple_choice");
    CHECK(j.value("step", 0) == -1 && j.contains("acc_stderr") && j.contains("acc_norm_stderr"));
    CHECK(j.value("examples_per_s", 0.0) > 0 && j.contains("seconds") && j.contains("source"));
  }
  const std::string ppl =
      run("OMP_NUM_THREADS=1 " + std::string(FLOTILLA_WORKER_PATH) + " eval --model " + kGold +
          "qwen3 --task " + kRes + "wiki-mini.txt --stride 13 --json 2>/dev/null");
  const nlohmann::json pj = nlohmann::json::parse(ppl, nullptr, false);
  CHECK_MSG(
      pj.is_object() && pj.value("kind", "") == "perplexity" &&
          rel(pj.value("perplexity", 0.0), g["models"]["qwen3"]["ppl_13"]["perplexity"].get<double>()) < 1e-4,
      "eval --json (perplexity) printed: %s", ppl.c_str());
  // A bad task file: exit 4 (data), the file and line on stderr.
  const std::string bad = std::string(FLOTILLA_TEST_TMP) + "/eval_golden_bad.jsonl";
  std::ofstream(bad)
      << "{\"context\": \"a\", \"choices\": [\"b\", \"c\"], \"answer\": 0}\n{\"context\": \"a\", "
         "\"choices\": [\"b\", \"c\"], \"answer\": 5}\n";
  const std::string cmd =
      std::string(FLOTILLA_WORKER_PATH) + " eval --model " + kGold + "qwen3 --task " + bad + " 2>&1";
  std::string err;
  FILE* p = popen(cmd.c_str(), "r");
  char buf[4096];
  size_t n = 0;
  while (p && (n = std::fread(buf, 1, sizeof buf, p)) > 0) err.append(buf, n);
  const int rc = p ? pclose(p) : -1;
  CHECK_MSG(WIFEXITED(rc) && WEXITSTATUS(rc) == 4, "exit status %d", rc);
  CHECK_MSG(err.find(bad + ":2: answer 5 is out of range") != std::string::npos, "stderr: %s", err.c_str());
  return flotilla_test::summary("test_eval_golden");
}
