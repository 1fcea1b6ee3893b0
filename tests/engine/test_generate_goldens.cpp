// Greedy generation against transformers' generate() (tests/reference/make_generate_goldens.py ->
// tests/engine/golden/generate/goldens.json) on the small Llama / Qwen 2 / Qwen 3 folders of
// tests/engine/golden/hf, loaded by infer::load_for_inference: the engine's ids are token-identical,
// with the KV cache and without it, plain and with a repetition penalty, the prompts batched (where
// transformers ran each alone). Then the worker: `sample --model HF_DIR --prompt-ids ... --temperature
// 0 --json` prints the same ids (cache and --no-cache), and a tp=2 run's checkpoint (trained on two
// real Gloo ranks) samples exactly as its single-device Hugging Face export (`export --format hf`,
// then `sample --model`), greedy and seeded.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "check.h"
#include "engine/infer/generate.h"
#include "engine/infer/load.h"
#include "worker_run.h"

using namespace flotilla;
using flotilla_test::run_worker;

namespace {

const std::string kGolden = std::string(FLOTILLA_SOURCE_DIR) + "/tests/engine/golden";

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

// The JSON object `sample --json` prints (its own line; stderr lines are around it).
nlohmann::json json_line(const std::string& output) {
  std::istringstream in(output);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty() && line[0] == '{') return nlohmann::json::parse(line, nullptr, false);
  return nlohmann::json();
}

std::string ids_text(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += (s.empty() ? "" : " ") + std::to_string(id);
  return s;
}

void engine_matches_transformers(const nlohmann::json& g) {
  const int max_new = g["max_new_tokens"];
  const float penalty = g["repetition_penalty"];
  for (const auto& [name, entry] : g["models"].items()) {
    infer::LoadRequest req;
    req.hf_model = kGolden + "/hf/" + name;
    infer::LoadedModel lm = infer::load_for_inference(req);
    const auto prompts = entry["prompts"].get<std::vector<std::vector<int32_t>>>();
    for (bool cache : {true, false})
      for (bool penalised : {false, true}) {
        infer::GenerateOptions o;
        o.max_tokens = max_new;
        o.temperature = 0;
        o.use_cache = cache;
        o.repetition_penalty = penalised ? penalty : 1.0f;
        const auto want = entry[penalised ? "greedy_repetition_penalty" : "greedy"]
                              .get<std::vector<std::vector<int32_t>>>();
        const auto got = infer::generate(*lm.model, prompts, o);
        for (size_t k = 0; k < prompts.size(); ++k)
          CHECK_MSG(got[k].ids == want[k], "%s prompt %zu (%s, %s): engine %s, transformers %s", name.c_str(),
                    k, cache ? "cache" : "recompute", penalised ? "repetition penalty" : "plain",
                    ids_text(got[k].ids).c_str(), ids_text(want[k]).c_str());
      }
  }
}

void sample_model_cli(const nlohmann::json& g) {
  const auto& e = g["models"]["qwen3"];
  const auto prompt = e["prompts"][2].get<std::vector<int32_t>>();
  for (const char* extra : {"", "--no-cache"}) {
    std::vector<std::string> args = {"sample",
                                     "--model",
                                     kGolden + "/hf/qwen3",
                                     "--prompt-ids",
                                     ids_text(prompt),
                                     "--temperature",
                                     "0",
                                     "--tokens",
                                     std::to_string(g["max_new_tokens"].get<int>()),
                                     "--json"};
    if (*extra) args.push_back(extra);
    const auto r = run_worker(args);
    CHECK_MSG(r.exit_code == 0, "%s", r.output.c_str());
    const nlohmann::json j = json_line(r.output);
    CHECK_MSG(j.is_object() && j["ids"] == e["greedy"][2], "%s", r.output.c_str());
    args.push_back("--repetition-penalty");
    args.push_back("1.3");
    const nlohmann::json p = json_line(run_worker(args).output);
    CHECK(p.is_object() && p["ids"] == e["greedy_repetition_penalty"][2]);
  }
  const auto tpu = run_worker({"sample", "--model", kGolden + "/hf/qwen3", "--device", "tpu"});
  CHECK_MSG(tpu.exit_code == 2 && tpu.output.find("--device takes cpu or cuda") != std::string::npos, "%s",
            tpu.output.c_str());
  const auto both = run_worker({"sample", "--model", kGolden + "/hf/qwen3", "--checkpoint", "/nowhere"});
  CHECK_MSG(both.exit_code != 0 && both.output.find("one of --checkpoint") != std::string::npos, "%s",
            both.output.c_str());
}

void tp2_checkpoint_samples_as_its_export() {
  const std::string root = std::string(FLOTILLA_TEST_TMP) + "/generate_goldens_tp2";
  std::filesystem::remove_all(root);
  std::filesystem::create_directories(root);
  const std::string cfg = root + "/run.toml";
  std::ofstream(cfg)
      << "[run]\nname = \"tp2\"\nseed = 3\nthreads = 1\n"
         "[model]\npreset = \"custom\"\narch = \"llama\"\nn_layer = 2\nn_head = 4\nn_kv_head = 2\n"
         "n_embd = 64\nffn_dim = 96\nvocab_size = 256\nmax_seq_len = 32\nqk_norm = true\n"
         "[data]\nsynthetic_tokens = 20000\n"
         "[train]\nsteps = 4\nmicro_batch = 2\nseq_len = 32\nglobal_batch_tokens = 64\n"
         "[optim]\nlr = 0.01\nwarmup_steps = 1\n"
         "[parallel]\ntp = 2\ntimeout_s = 60\n"
         "[checkpoint]\nevery = 4\nkeep_last = 1\n"
         "[eval]\nevery = 0\nbatches = 1\n";
  const auto train = run_worker({"launch", "--nproc-per-node", "2", "--master-port", "0", "--no-bind", "--",
                                 "train", "--config", cfg, "--out-dir", root + "/run", "--quiet"});
  CHECK_MSG(train.exit_code == 0, "%s", train.output.c_str());
  const auto ex =
      run_worker({"export", "--checkpoint", root + "/run", "--format", "hf", "--out", root + "/hf"});
  CHECK_MSG(ex.exit_code == 0, "%s", ex.output.c_str());
  // Past max_seq_len (32): 20 prompt tokens + 24 new, so the window slides too.
  const std::string prompt = "5 17 99 3 250 8 8 41 77 120 6 1 200 33 64 90 12 4 180 7";
  for (const std::vector<std::string>& how :
       {std::vector<std::string>{"--temperature", "0"},
        std::vector<std::string>{"--temperature", "0.8", "--top-k", "50", "--seed", "9"}}) {
    std::vector<std::string> base = {"sample", "--prompt-ids", prompt, "--tokens", "24", "--json"};
    base.insert(base.end(), how.begin(), how.end());
    std::vector<std::string> a = base, b = base;
    a.insert(a.end(), {"--checkpoint", root + "/run"});
    b.insert(b.end(), {"--model", root + "/hf"});
    const auto ra = run_worker(a), rb = run_worker(b);
    const nlohmann::json ja = json_line(ra.output), jb = json_line(rb.output);
    CHECK_MSG(ja.is_object() && ja["ids"].size() == 24, "%s", ra.output.c_str());
    CHECK_MSG(jb.is_object() && ja["ids"] == jb["ids"], "checkpoint %s\nexport %s", ra.output.c_str(),
              rb.output.c_str());
  }
}

}  // namespace

int main() {
  const nlohmann::json g = read_json(kGolden + "/generate/goldens.json");
  engine_matches_transformers(g);
  sample_model_cli(g);
  tp2_checkpoint_samples_as_its_export();
  return flotilla_test::summary("generate_goldens");
}
