// Deterministic mode (train.deterministic, issue 8), with the real worker:
//  1. Two identical 5-step runs (same config, same run directory, one after the other) write
//     bit-identical metrics values (every step's loss, grad norm and lr, the eval loss) and
//     checkpoints: every rank file byte for byte, trainer.json and MANIFEST equal but for the
//     wall-clock fields (created, created_unix, last_save_seconds, and so trainer.json's crc32c
//     and size).
//  2. What deterministic mode enforces beyond that: the same run on 5 threads instead of 2 gives
//     the same metrics values and the same parameter and optimizer bytes (matmuls in fixed
//     chunks). Control, printed only (it depends on the BLAS build): with train.deterministic =
//     false, OpenBLAS 0.3.21 here gives other bits on 5 threads than on 2 (per-thread slices of
//     another shape), which is what the fixed chunks remove.
//  3. The run records show the mode: run_start carries train.deterministic = true.
#include <filesystem>
#include <string>
#include <vector>

#include "check.h"
#include "worker_run.h"

using namespace flotilla_test;
namespace fs = std::filesystem;

namespace {

std::string config(int threads, bool deterministic = true) {
  return "[run]\nname = \"det\"\nseed = 3\nthreads = " + std::to_string(threads) +
         "\n"
         "[model]\npreset = \"custom\"\nn_layer = 2\nn_head = 4\nn_embd = 96\nvocab_size = 300\n"
         "max_seq_len = 64\n"
         "[data]\nsynthetic_tokens = 40000\nshuffle = true\n"
         "[train]\nsteps = 5\nmicro_batch = 3\nseq_len = 48\nglobal_batch_tokens = 288\n"
         "deterministic = " + (deterministic ? "true" : "false") + "\n"
         "[optim]\nlr = 0.003\nwarmup_steps = 2\n"
         "[checkpoint]\nevery = 2\nkeep_last = 5\n"
         "[eval]\nevery = 0\nbatches = 2\n";
}

// Trains into root/run (the same absolute out_dir for every run, so trainer.json's config is
// the same), then moves it to root/<keep>.
std::string train(const std::string& root, int threads, const std::string& keep, bool deterministic = true) {
  const std::string cfg = root + "/run.toml", out = root + "/run";
  write_text(cfg, config(threads, deterministic));
  auto r = run_worker({"train", "--config", cfg, "--out-dir", out, "--quiet"},
                      {"OMP_NUM_THREADS=2", "FLOTILLA_PEAK_FLOPS=1e11"});
  CHECK_MSG(r.exit_code == 0, "threads=%d: exit %d\n%s", threads, r.exit_code, r.output.c_str());
  fs::rename(out, root + "/" + keep);
  return root + "/" + keep;
}

// The deterministic content of the metrics: the values of step and eval records.
std::vector<std::string> metric_values(const std::string& run_dir) {
  std::vector<std::string> out;
  for (const auto& r : read_metrics(run_dir)) {
    if (r["type"] == "step")
      out.push_back("step " + r["step"].dump() + " loss " + r["loss"].dump() + " norm " + r["grad_norm"].dump() +
                    " lr " + r["lr"].dump());
    if (r["type"] == "eval") out.push_back("eval " + r["step"].dump() + " val_loss " + r["val_loss"].dump());
    if (r["type"] == "run_start") out.push_back("deterministic " + r["config"]["train"]["deterministic"].dump());
  }
  return out;
}

nlohmann::json without(nlohmann::json j, const std::vector<std::string>& keys) {
  for (const auto& k : keys) j.erase(k);
  return j;
}

// Checkpoint directories of a run, compared file by file.
void compare_checkpoints(const std::string& a, const std::string& b, bool rank_files_only) {
  int dirs = 0, rank_files = 0;
  for (const auto& e : fs::directory_iterator(a + "/checkpoints")) {
    if (!e.is_directory()) continue;
    ++dirs;
    const std::string name = e.path().filename().string();
    const std::string da = a + "/checkpoints/" + name, db = b + "/checkpoints/" + name;
    CHECK_MSG(fs::is_directory(db), "%s missing in the second run", name.c_str());
    for (const auto& f : fs::directory_iterator(da)) {
      const std::string file = f.path().filename().string();
      const std::string ta = read_file(da + "/" + file), tb = read_file(db + "/" + file);
      if (file.rfind("rank-", 0) == 0) {
        ++rank_files;
        CHECK_MSG(!ta.empty() && ta == tb, "%s/%s differs (%zu vs %zu bytes)", name.c_str(), file.c_str(),
                  ta.size(), tb.size());
      } else if (rank_files_only) {
        continue;
      } else if (file == "trainer.json") {
        CHECK_MSG(without(nlohmann::json::parse(ta), {"last_save_seconds"}) ==
                      without(nlohmann::json::parse(tb), {"last_save_seconds"}),
                  "%s/trainer.json differs beyond last_save_seconds", name.c_str());
      } else if (file == "MANIFEST") {
        auto ma = without(nlohmann::json::parse(ta), {"created", "created_unix"});
        auto mb = without(nlohmann::json::parse(tb), {"created", "created_unix"});
        for (auto* m : {&ma, &mb})
          for (auto& entry : (*m)["files"])
            if (entry["name"] == "trainer.json") entry.erase("crc32c"), entry.erase("size");
        CHECK_MSG(ma == mb, "%s/MANIFEST differs beyond its timestamps", name.c_str());
      } else {
        CHECK_MSG(ta == tb, "%s/%s differs", name.c_str(), file.c_str());
      }
    }
  }
  CHECK_MSG(dirs == 3 && rank_files == 3, "expected checkpoints at steps 2, 4, 5; found %d (%d rank files)",
            dirs, rank_files);
}

}  // namespace

int main() {
  const std::string root = fresh_dir("train_deterministic");
  const std::string a = train(root, 2, "a"), b = train(root, 2, "b"), five = train(root, 5, "five-threads");

  const auto va = metric_values(a), vb = metric_values(b), v5 = metric_values(five);
  CHECK_MSG(va.size() == 7, "expected run_start, 5 steps and 1 eval; got %zu records", va.size());
  CHECK(!va.empty() && va[0] == "deterministic true");
  CHECK_MSG(va == vb, "metrics values differ between two identical runs");
  for (size_t i = 0; i < va.size() && i < vb.size(); ++i)
    if (va[i] != vb[i]) std::printf("  a: %s\n  b: %s\n", va[i].c_str(), vb[i].c_str());
  compare_checkpoints(a, b, false);

  // 5 threads instead of 2: the same numbers (enforced by the fixed matmul chunks).
  CHECK_MSG(va == v5, "5 threads give other metrics values than 2");
  for (size_t i = 0; i < va.size() && i < v5.size(); ++i)
    if (va[i] != v5[i]) std::printf("  2 threads: %s\n  5 threads: %s\n", va[i].c_str(), v5[i].c_str());
  compare_checkpoints(a, five, true);

  const std::string off2 = train(root, 2, "off-2", false), off5 = train(root, 5, "off-5", false);
  const char* leaf = "/checkpoints/step-00000005/rank-0.bin";
  std::printf("control, train.deterministic = false: 2 and 5 threads give %s parameters\n",
              read_file(off2 + leaf) == read_file(off5 + leaf) ? "the same" : "different");
  return summary("train_deterministic");
}
