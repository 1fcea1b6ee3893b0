// parallel.bucket_mb and parallel.overlap (issue 36): consecutive layers merged into gradient buckets
// (in backward order, closed at bucket_mb MiB) and buckets launched after backward when overlap is
// off. The bucket plan is checked directly (its all-reduce count per step is the bucket count plus
// the rest); then real dp=2 Gloo runs through the worker with per-layer buckets, merged buckets, one
// bucket and overlap off train bit for bit alike (two ranks: each element is a + b whatever the
// message boundaries and timing) while using 5, 3 and 2 all-reduces per step (rank 0's event), and
// ZeRO with bucket_mb is refused with the reason.
#include <cstring>

#include "check.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/parallel/data_parallel.h"
#include "worker_run.h"

using namespace flotilla_test;
using flotilla::DataParallel;

namespace {

std::string config_text(const std::string& extra) {
  return "[run]\nname = \"dp\"\nseed = 5\nthreads = 1\n"
         "[model]\npreset = \"custom\"\nn_layer = 4\nn_head = 4\nn_embd = 64\nvocab_size = 256\nmax_seq_len "
         "= 64\n"
         "[data]\nsynthetic_tokens = 60000\n"
         "[train]\nsteps = 6\nmicro_batch = 2\nseq_len = 32\n"
         "[optim]\nlr = 0.003\nwarmup_steps = 2\n"
         "[parallel]\ndp = 2\ntimeout_s = 60\n" +
         extra +
         "[checkpoint]\nevery = 6\nkeep_last = 1\n"
         "[eval]\nevery = 0\nbatches = 1\n";
}

const std::vector<std::string> kEnv = {"OMP_NUM_THREADS=1", "FLOTILLA_PEAK_FLOPS=1e11"};

struct Run {
  std::map<int64_t, float> losses;
  std::vector<float> params;
  std::string output;
  int code = -1;
};

Run train(const std::string& root, const std::string& name, const std::string& extra) {
  const std::string cfg = root + "/" + name + ".toml";
  write_text(cfg, config_text(extra));
  auto p = run_worker({"launch", "--nproc-per-node", "2", "--master-port", "0", "--no-bind", "--", "train",
                       "--config", cfg, "--out-dir", root + "/" + name, "--quiet"},
                      kEnv);
  Run r;
  r.code = p.exit_code;
  r.output = p.output;
  r.losses = step_losses(root + "/" + name);
  if (r.code == 0 && !r.losses.empty()) {
    flotilla::CheckpointStore store(root + "/" + name + "/checkpoints");
    for (auto& t : store.load_dir(root + "/" + name + "/checkpoints/step-00000006", 0).tensors)
      if (t.name == "params") {
        r.params.resize(t.data.size() / 4);
        std::memcpy(r.params.data(), t.data.data(), t.data.size());
      }
  }
  return r;
}

bool bitwise_equal(const Run& a, const Run& b) {
  if (a.losses.size() != 6 || a.losses.size() != b.losses.size() || a.params.size() != b.params.size() ||
      a.params.empty())
    return false;
  for (const auto& [s, l] : a.losses)
    if (!b.losses.count(s) || std::memcmp(&l, &b.losses.at(s), 4) != 0) return false;
  return std::memcmp(a.params.data(), b.params.data(), a.params.size() * 4) == 0;
}

}  // namespace

int main() {
  // The plan: 4 layers of 1 MiB each.
  const std::vector<size_t> mib(4, size_t{1} << 20);
  using Plan = std::vector<std::vector<int>>;
  CHECK(DataParallel::bucket_layers(mib, 0) == (Plan{{3}, {2}, {1}, {0}}));  // per layer, backward order
  CHECK(DataParallel::bucket_layers(mib, 1) == (Plan{{3}, {2}, {1}, {0}}));  // one layer reaches 1 MiB
  CHECK(DataParallel::bucket_layers(mib, 1.5) == (Plan{{3, 2}, {1, 0}}));    // two reach 1.5
  CHECK(DataParallel::bucket_layers(mib, 2.5) == (Plan{{3, 2, 1}, {0}}));    // the last one short
  CHECK(DataParallel::bucket_layers(mib, 100) == (Plan{{3, 2, 1, 0}}));      // one bucket
  CHECK(DataParallel::bucket_layers({}, 25).empty());
  const std::vector<size_t> uneven = {100, 3u << 20, 100, 100};
  CHECK(DataParallel::bucket_layers(uneven, 1) == (Plan{{3, 2, 1}, {0}}));

  const std::string root = fresh_dir("dp_buckets");
  // Layers of this model: 12 x 64^2 + 13 x 64 floats = 50,240 floats = 196 KiB each.
  const Run per_layer = train(root, "per-layer", "");
  CHECK_MSG(per_layer.code == 0 && per_layer.losses.size() == 6, "%s", per_layer.output.c_str());
  const Run pairs = train(root, "pairs", "bucket_mb = 0.3\n");  // two layers per bucket
  CHECK_MSG(bitwise_equal(per_layer, pairs), "bucket_mb = 0.3 differs from per-layer buckets\n%s",
            pairs.output.c_str());
  const Run one = train(root, "one", "bucket_mb = 100\n");
  CHECK_MSG(bitwise_equal(per_layer, one), "one bucket differs\n%s", one.output.c_str());
  const Run no_overlap = train(root, "no-overlap", "overlap = false\n");
  CHECK_MSG(bitwise_equal(per_layer, no_overlap), "overlap = false differs\n%s", no_overlap.output.c_str());
  const Run no_overlap_one = train(root, "no-overlap-one", "overlap = false\nbucket_mb = 100\n");
  CHECK(bitwise_equal(per_layer, no_overlap_one));

  // The buckets the runs used (rank 0's event): 4 layers + the rest; 2 pairs + the rest; 1 + the rest.
  const auto buckets = [&](const std::string& name) {
    for (const auto& r : read_metrics(root + "/" + name))
      if (r["type"] == "event" && r.contains("buckets")) return std::stoi(r["buckets"].get<std::string>());
    return -1;
  };
  CHECK_MSG(buckets("per-layer") == 5, "%d", buckets("per-layer"));
  CHECK_MSG(buckets("pairs") == 3, "%d", buckets("pairs"));
  CHECK_MSG(buckets("one") == 2, "%d", buckets("one"));
  CHECK(buckets("no-overlap-one") == 2);

  // ZeRO with buckets: refused before anything starts, saying why.
  write_text(root + "/zero.toml", config_text("zero = 1\nbucket_mb = 10\n"));
  auto refused = run_worker({"train", "--config", root + "/zero.toml", "--out-dir", root + "/zero"}, kEnv);
  CHECK(refused.exit_code != 0);
  CHECK_MSG(refused.output.find("parallel.bucket_mb") != std::string::npos &&
                refused.output.find("zero = 0 only") != std::string::npos,
            "%s", refused.output.c_str());
  return summary("dp_buckets");
}
