// Shared harness of the resume-on-another-layout tests (test_reshard*.cpp), with the real worker
// and real Gloo ranks through `launch`.
//
// A case is a chain of layouts: the run trains on the first for some steps (--stop-after, which
// checkpoints), then NEW processes on the next layout resume it in the same run directory
// (checkpoint.resume = "auto", the layout given as --set overrides, the way the runs layer asks),
// and so on. It is compared with one uninterrupted run on the first layout:
// - losses of every step within 1e-4 relative, and the final parameters (gathered by
//   load_model_checkpoint from whatever layout wrote them) within 1e-3 absolute (the tolerances
//   docs/distributed.md keeps between layouts); whether they are bitwise equal is reported;
// - the rows of tokens every step read (FLOTILLA_TEST_TRACE_ROWS, one file per DP rank), as a
//   multiset per step, equal: the data order neither repeats nor skips a sequence.
// Every run uses the global batch of 4 sequences of 32 tokens with micro_batch 1, so dp=4 reads
// one micro-batch per step, dp=2 two, one process four (accumulation).
#pragma once

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "tests/engine/test_hybrid_util.h"

namespace reshard_test {

using namespace hybrid_test;

struct Layout {
  int ranks = 1;
  std::string parallel;  // --set overrides, e.g. {"parallel.dp=2", "parallel.zero=1"}
  std::vector<std::string> sets;
};

inline Layout layout(int dp, int tp = 1, int pp = 1, int zero = 0) {
  Layout l;
  l.ranks = dp * tp * pp;
  l.sets = {"parallel.dp=" + std::to_string(dp), "parallel.tp=" + std::to_string(tp),
            "parallel.pp=" + std::to_string(pp), "parallel.zero=" + std::to_string(zero),
            "parallel.micro_batches=" + std::to_string(pp > 1 ? 2 : 1)};
  l.parallel = "dp=" + std::to_string(dp) + (tp > 1 ? " tp=" + std::to_string(tp) : "") +
               (pp > 1 ? " pp=" + std::to_string(pp) : "") + (zero > 0 ? " z" + std::to_string(zero) : "");
  return l;
}

inline std::string base_config(int steps) {
  return "[run]\nname = \"reshard\"\nseed = 5\nthreads = 1\n"
         "[model]\npreset = \"custom\"\nn_layer = 2\nn_head = 4\nn_embd = 64\nvocab_size = 256\n"
         "max_seq_len = 64\n"
         "[data]\nsynthetic_tokens = 60000\n"
         "[train]\nsteps = " +
         std::to_string(steps) +
         "\nmicro_batch = 1\nseq_len = 32\nglobal_batch_tokens = 128\n"
         "[optim]\nlr = 0.003\nwarmup_steps = 2\n"
         "[parallel]\ntimeout_s = 60\n"
         "[checkpoint]\nevery = 100\nkeep_last = 5\n"
         "[eval]\nevery = 0\nbatches = 1\n";
}

using Rows = std::map<int64_t, std::vector<std::string>>;  // step -> its rows, sorted

inline Rows read_rows(const std::string& trace_dir) {
  Rows rows;
  for (const auto& e : std::filesystem::directory_iterator(trace_dir)) {
    std::ifstream in(e.path());
    std::string line;
    while (std::getline(in, line)) {
      const size_t space = line.find(' ');
      rows[std::stoll(line.substr(0, space))].push_back(line.substr(space + 1));
    }
  }
  for (auto& [step, r] : rows) std::sort(r.begin(), r.end());
  return rows;
}

// One segment: `l` on the run directory root/name, until `stop_after` (0: train.steps).
inline flotilla_test::ProcResult segment(const std::string& root, const std::string& name,
                                         const std::string& cfg, const Layout& l, int stop_after,
                                         std::vector<std::string> env_extra,
                                         const std::vector<std::string>& extra_sets = {}) {
  std::vector<std::string> args;
  if (l.ranks > 1)
    args = {"launch", "--nproc-per-node", std::to_string(l.ranks), "--master-port", "0", "--no-bind", "--"};
  for (const std::string& a : {std::string("train"), std::string("--config"), cfg, std::string("--out-dir"),
                               root + "/" + name, std::string("--quiet"), std::string("--no-stdout-metrics")})
    args.push_back(a);
  for (const std::string& s : l.sets) args.insert(args.end(), {"--set", s});
  for (const std::string& s : extra_sets) args.insert(args.end(), {"--set", s});
  if (stop_after > 0) args.insert(args.end(), {"--stop-after", std::to_string(stop_after)});
  std::vector<std::string> env = worker_env();
  env.insert(env.end(), env_extra.begin(), env_extra.end());
  std::filesystem::create_directories(root + "/" + name + "-rows");
  env.push_back("FLOTILLA_TEST_TRACE_ROWS=" + root + "/" + name + "-rows");
  return flotilla_test::run_worker(args, env);
}

struct ChainResult {
  Run run;
  Rows rows;
};

// Trains through `chain`: layout i until stops[i] (the last until `steps`).
inline ChainResult chain_run(const std::string& root, const std::string& name, const std::string& cfg_text,
                             const std::vector<Layout>& chain, const std::vector<int>& stops, int steps,
                             const std::vector<std::string>& env_extra = {},
                             const std::vector<std::string>& extra_sets = {}) {
  const std::string cfg = root + "/" + name + ".toml";
  write_text(cfg, cfg_text);
  ChainResult r;
  for (size_t i = 0; i < chain.size(); ++i) {
    const int stop = i + 1 < chain.size() ? stops[i] : 0;
    const auto p =
        segment(root, name, cfg, chain[i], stop, i > 0 ? env_extra : std::vector<std::string>{}, extra_sets);
    r.run.output += p.output;
    r.run.code = p.exit_code;
    if (p.exit_code != 0) return r;
  }
  r.run.losses = step_losses(root + "/" + name);
  if (!r.run.losses.empty() && r.run.losses.rbegin()->first == steps)
    r.run.params = gathered_params(root + "/" + name, steps);
  r.rows = read_rows(root + "/" + name + "-rows");
  return r;
}

// The "re-cut to this layout" events a run wrote (one per resume on another layout).
inline int recut_events(const std::string& run_dir) {
  int n = 0;
  for (const auto& r : flotilla_test::read_metrics(run_dir))
    if (r.value("type", "") == "event" && contains(r.value("message", ""), "re-cut to this layout")) ++n;
  return n;
}

struct Compared {
  double loss_rel = 0, param_abs = 0;
  bool bitwise = false, rows_equal = false;
};

inline Compared compare(const ChainResult& ref, const ChainResult& got) {
  Compared c;
  for (const auto& [step, loss] : ref.run.losses) {
    if (!got.run.losses.count(step)) {
      c.loss_rel = INFINITY;
      continue;
    }
    c.loss_rel = std::max(c.loss_rel,
                          std::fabs(static_cast<double>(got.run.losses.at(step)) - loss) / std::fabs(loss));
  }
  if (got.run.losses.size() != ref.run.losses.size()) c.loss_rel = INFINITY;
  c.param_abs = max_abs_diff(ref.run.params, got.run.params);
  c.bitwise = bitwise_equal(ref.run, got.run);
  c.rows_equal = !ref.rows.empty() && ref.rows == got.rows;
  return c;
}

// Runs the chain and checks it against `ref`; prints one table row.
inline Compared expect_chain(const std::string& root, const std::string& name, const ChainResult& ref,
                             const std::string& cfg_text, const std::vector<Layout>& chain,
                             const std::vector<int>& stops, int steps) {
  const ChainResult got = chain_run(root, name, cfg_text, chain, stops, steps);
  std::string label;
  for (size_t i = 0; i < chain.size(); ++i)
    label += (i ? " -> " : "") + chain[i].parallel +
             (i + 1 < chain.size() ? " (" + std::to_string(stops[i]) + ")" : "");
  CHECK_MSG(got.run.code == 0, "%s: exit %d\n%s", label.c_str(), got.run.code, got.run.output.c_str());
  const Compared c = compare(ref, got);
  std::printf("| %-40s | %d | %.2e | %.2e | %s | rows %s |\n", label.c_str(), steps, c.loss_rel, c.param_abs,
              c.bitwise ? "bitwise" : "no", c.rows_equal ? "equal" : "DIFFER");
  CHECK_MSG(c.loss_rel < kLossRelTol, "%s: loss rel diff %.3g", label.c_str(), c.loss_rel);
  CHECK_MSG(c.param_abs < kParamAbsTol, "%s: param diff %.3g", label.c_str(), c.param_abs);
  CHECK_MSG(c.rows_equal, "%s: the rows read differ from the uninterrupted run's", label.c_str());
  CHECK_MSG(recut_events(root + "/" + name) == static_cast<int>(chain.size()) - 1,
            "%s: %d re-cut events for %zu layout changes", label.c_str(), recut_events(root + "/" + name),
            chain.size() - 1);
  return c;
}

}  // namespace reshard_test
