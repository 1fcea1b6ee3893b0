// Shared helpers of the tensor/pipeline/hybrid parallel tests (test_tp_*, test_pp_*,
// test_hybrid_*): one tiny model config, a launcher for real Gloo ranks, and comparisons against
// the single-process run.
//
// Every run uses the same global batch: train.global_batch_tokens = 128 = 4 sequences of 32, with
// micro_batch 2. One process therefore accumulates 2 micro-batches per step; tp=2 does the same
// with the model split; pp=2 with micro_batches=2 pipelines those same 2 micro-batches; dp=2 gives
// each replica 1 of them. The data loader hands out the same sequences in every layout.
//
// Tolerance (why not bitwise): the sharded runs compute the same sums in another order. Tensor
// parallel: the row-parallel matmuls (attention-out, MLP-down) add two half-sums over the input
// columns instead of one running sum, the LM head's d(input) likewise over the vocabulary, and the
// cross-entropy combines two per-rank log-sum-exps; pipeline parallel: the tied wte gradient adds
// the LM-head part and the embedding part after accumulating each over the micro-batches, instead
// of interleaved; every layout: the gradient norm sums per-shard partial sums. Each reordering
// changes a float result by about one ulp (~6e-8 relative); AdamW normalises updates, so these
// differences grow through 10 steps but stay far below the 1e-4 relative (loss) and 1e-3 absolute
// (parameters, typically 0.02-1 in size, lr 0.003) allowed here. A wrong shard mapping, a missing
// all-reduce or a dropped micro-batch moves the loss by 1e-2 or more within the first steps.
#pragma once

#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "check.h"
#include "engine/checkpoint/model_checkpoint.h"
#include "worker_run.h"

namespace hybrid_test {

using namespace flotilla_test;

constexpr double kLossRelTol = 1e-4;
constexpr double kParamAbsTol = 1e-3;

inline std::string config_text(int n_layer, const std::string& parallel, int steps = 10) {
  return "[run]\nname = \"hybrid\"\nseed = 5\nthreads = 1\n"
         "[model]\npreset = \"custom\"\nn_layer = " +
         std::to_string(n_layer) +
         "\nn_head = 4\nn_embd = 64\nvocab_size = 256\nmax_seq_len = 64\n"
         "[data]\nsynthetic_tokens = 60000\n"
         "[train]\nsteps = " +
         std::to_string(steps) +
         "\nmicro_batch = 2\nseq_len = 32\nglobal_batch_tokens = 128\n"
         "[optim]\nlr = 0.003\nwarmup_steps = 2\n"
         "[parallel]\ntimeout_s = 60\n" +
         parallel +
         "\n"
         "[checkpoint]\nevery = 5\nkeep_last = 3\n"
         "[eval]\nevery = 0\nbatches = 1\n";
}

inline const std::vector<std::string>& worker_env() {
  static const std::vector<std::string> env = {"OMP_NUM_THREADS=1", "FLOTILLA_PEAK_FLOPS=1e11"};
  return env;
}

struct Run {
  std::map<int64_t, float> losses;
  std::vector<float> params;  // final parameters, gathered into the full llm.c layout
  std::string output;
  int code = -1;
};

inline std::vector<float> gathered_params(const std::string& run_dir, int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "/step-%08lld", static_cast<long long>(step));
  return flotilla::load_model_checkpoint(run_dir + "/checkpoints" + name, nullptr).params;
}

// Trains `name` under root with `ranks` processes (launch) or one (plain train).
inline Run train(const std::string& root, const std::string& name, int ranks, const std::string& cfg_text,
                 std::vector<std::string> extra = {}) {
  const std::string cfg = root + "/" + name + ".toml";
  write_text(cfg, cfg_text);
  std::vector<std::string> args;
  if (ranks > 1)
    args = {"launch", "--nproc-per-node", std::to_string(ranks), "--master-port", "0", "--no-bind", "--"};
  for (const char* a : {"train", "--config"}) args.push_back(a);
  args.push_back(cfg);
  args.push_back("--out-dir");
  args.push_back(root + "/" + name);
  args.push_back("--quiet");
  args.insert(args.end(), extra.begin(), extra.end());
  Run r;
  auto p = run_worker(args, worker_env());
  r.code = p.exit_code;
  r.output = p.output;
  r.losses = step_losses(root + "/" + name);
  const int64_t last = r.losses.empty() ? 0 : r.losses.rbegin()->first;
  if (r.code == 0 && last > 0) r.params = gathered_params(root + "/" + name, last);
  return r;
}

inline double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size() || a.empty()) return INFINITY;
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(static_cast<double>(a[i]) - b[i]));
  return m;
}

inline void expect_close(const Run& single, const Run& multi, const char* what) {
  CHECK_MSG(multi.code == 0, "%s: exit %d\n%s", what, multi.code, multi.output.c_str());
  CHECK_MSG(multi.losses.size() == single.losses.size(), "%s: %zu vs %zu steps", what, multi.losses.size(),
            single.losses.size());
  double worst = 0;
  for (const auto& [step, loss] : single.losses) {
    if (!multi.losses.count(step)) {
      worst = INFINITY;
      continue;
    }
    worst = std::max(worst, std::fabs(static_cast<double>(multi.losses.at(step)) - loss) / std::fabs(loss));
  }
  const double pdiff = max_abs_diff(single.params, multi.params);
  std::printf("%-22s max loss rel diff %.2e, max param abs diff %.2e\n", what, worst, pdiff);
  CHECK_MSG(worst < kLossRelTol, "%s: loss rel diff %.3g", what, worst);
  CHECK_MSG(pdiff < kParamAbsTol, "%s: param diff %.3g", what, pdiff);
}

inline bool bitwise_equal(const Run& a, const Run& b) {
  if (a.losses.size() != b.losses.size() || a.params.size() != b.params.size() || a.params.empty())
    return false;
  for (const auto& [s, l] : a.losses)
    if (!b.losses.count(s) || std::memcmp(&l, &b.losses.at(s), 4) != 0) return false;
  return std::memcmp(a.params.data(), b.params.data(), a.params.size() * 4) == 0;
}

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace hybrid_test
