// `flotilla-worker plan` end to end: the table and JSON for the shipped configs, --set, named GPU
// profiles, and the exit codes and messages of config errors (3) and usage errors (2).
#include <sys/wait.h>

#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "check.h"

namespace {

struct Result {
  int status = -1;
  std::string output;  // stdout and stderr
};

Result run(const std::string& args) {
  const std::string cmd = std::string("'") + FLOTILLA_WORKER_PATH + "' plan " + args + " 2>&1";
  Result r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

bool has(const Result& r, const std::string& text) { return r.output.find(text) != std::string::npos; }

const std::string kConfigs = std::string(FLOTILLA_SOURCE_DIR) + "/resources/configs/";

void test_table() {
  const Result r = run("--config '" + kConfigs + "demo.toml'");
  CHECK_MSG(r.status == 0, "%s", r.output.c_str());
  CHECK(has(r, "plan for run 'demo'"));
  CHECK(has(r, "PaLM 6N+12LCT") && has(r, "llm.c 6N+6LCT"));
  CHECK(has(r, "AdamW m") && has(r, "activations") && has(r, "(fits)"));
  CHECK(has(r, "1,024 tokens = 8 x 128 x dp 1 x 1 micro-batches per rank"));
}

void test_json() {
  const Result r =
      run("--config '" + kConfigs + "gpt2-124m-shards.toml' --device h100-sxm --set parallel.dp=8 --json");
  CHECK_MSG(r.status == 0, "%s", r.output.c_str());
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(r.output);
  } catch (const std::exception& e) {
    CHECK_MSG(false, "not JSON: %s\n%s", e.what(), r.output.c_str());
    return;
  }
  CHECK(j["parameters"]["total"] == 124439808);
  CHECK(j["parameters"]["allocated"] == 124475904);
  CHECK(j["flops_per_token"]["palm"]["value"].get<double>() == 855166464.0);
  CHECK(j["batch"]["tokens_per_step"] == 524288 && j["batch"]["grad_accum_steps"] == 2);
  CHECK(j["layout"]["dp"] == 8 && j["layout"]["ranks"] == 8 && j["layout"]["dtype"] == "bf16");
  CHECK(j["device"]["flops_per_s"].get<double>() == 989e12);
  const auto& m = j["memory_per_device"];
  CHECK(m["weights"] == 2 * 124475904ull && m["master_weights"] == 4 * 124475904ull);
  uint64_t sum = 0;
  for (const char* k :
       {"weights", "master_weights", "gradients", "adam_m", "adam_v", "activations", "workspace", "runtime"})
    sum += m[k].get<uint64_t>();
  CHECK(sum == m["total"].get<uint64_t>());
  CHECK(j["fits"] == true);
  CHECK(j["time"]["step_s"].get<double>() > 0);
  // The all-reduce of bf16 gradients over 8 ranks: 2 x 7/8 x 2 bytes x parameters.
  CHECK_NEAR(j["stages"][0]["comm_bytes"]["dp"].get<double>(), 2.0 * 7 / 8 * 2 * 124475904.0, 1.0);
}

void test_errors() {
  Result r = run("--set parallel.tp=3 --set model.n_head=4 --set optim.lr=0");
  CHECK_MSG(r.status == 3, "%d %s", r.status, r.output.c_str());
  CHECK(has(r, "config error") && has(r, "2 problems"));
  CHECK(has(r, "parallel.tp=3 does not divide model.n_head=4"));
  CHECK(has(r, "optim.lr: 0.0 must be a finite number > 0"));
  r = run("--set optim.warmup=3");
  CHECK(r.status == 3 && has(r, "did you mean 'optim.warmup_steps'?"));
  r = run("--config /nonexistent/run.toml");
  CHECK(r.status == 3 && has(r, "/nonexistent/run.toml"));
  r = run("--device tpu-v5");
  CHECK(r.status == 2 && has(r, "--device 'tpu-v5' is not a known profile"));
  r = run("--frobnicate");
  CHECK(r.status == 2 && has(r, "unexpected argument '--frobnicate'"));
  r = run("--set model.preset=gpt2-1.5b --device rtx-4090 --set run.device=cuda --set train.dtype=bf16");
  // 1.5B with AdamW on 24 GiB: the table, then exit 8 (issue 19: a plan that does not fit is a failure)
  CHECK_MSG(r.status == 8 && has(r, "DOES NOT FIT") && has(r, "plan: the run does not fit"), "%s",
            r.output.c_str());
}

void test_maintainer_outputs() {
  const Result keys = run("--print-config-keys");
  CHECK(keys.status == 0 && has(keys, "train.steps integer\n") && has(keys, "optim.lr float\n"));
  const Result docs = run("--print-config-docs");
  CHECK(docs.status == 0 && has(docs, "# Run config reference"));
  const Result shown = run("--set train.steps=7 --show-config");
  CHECK(shown.status == 0 && has(shown, "\nsteps = 7 "));
}

}  // namespace

int main() {
  test_table();
  test_json();
  test_errors();
  test_maintainer_outputs();
  return flotilla_test::summary("test_plan_cli");
}
