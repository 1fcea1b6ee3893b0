// ZeRO-2 lowers gradient memory (issue 4, "gradients sharded too"): dp=2 runs of a 6-layer model
// under ZeRO-1 and ZeRO-2, two real Gloo ranks each. Asserted exactly: the gradient-sized bytes
// each rank allocates, as the "gradient memory" event reports them (Model::grad_bytes() +
// DataParallel::grad_bytes()), against the formulas below. Asserted loosely: rank 0's measured peak
// RSS drops by at least half of that accounted difference (RSS also holds the allocator's and
// Gloo's buffers, so only the direction and rough size are checked).
//
//   ZeRO-1: model grads n + reduce-scatter scratch dp*chunk + shard chunk          (chunk = ceil(n/dp))
//   ZeRO-2: model's wte/wpe/lnf grads + 2 layer staging slots + shard chunk
//           + all-gather scratch (dp+1) * min(chunk, kGatherPiece)
#include <cstdint>
#include <string>

#include "check.h"
#include "engine/model/gpt.h"
#include "engine/parallel/data_parallel.h"
#include "worker_run.h"

using namespace flotilla_test;

namespace {

constexpr int kLayers = 6, kEmbd = 192, kVocab = 256, kSeq = 64;

std::string config_text(int zero) {
  return "[run]\nname = \"z2mem\"\nseed = 3\nthreads = 1\n"
         "[model]\npreset = \"custom\"\nn_layer = " +
         std::to_string(kLayers) + "\nn_head = 4\nn_embd = " + std::to_string(kEmbd) +
         "\nvocab_size = " + std::to_string(kVocab) + "\nmax_seq_len = " + std::to_string(kSeq) +
         "\n[data]\nsynthetic_tokens = 20000\n"
         "[train]\nsteps = 2\nmicro_batch = 1\nseq_len = 32\n"
         "[optim]\nlr = 0.001\n"
         "[parallel]\ndp = 2\nzero = " +
         std::to_string(zero) +
         "\ntimeout_s = 60\n"
         "[checkpoint]\nevery = 0\n"
         "[eval]\nevery = 0\nbatches = 1\n";
}

struct Measured {
  int code = -1;
  std::string output;
  int64_t model_bytes = -1, dp_bytes = -1;
  int64_t peak_rss = -1;
};

Measured run(const std::string& root, int zero) {
  const std::string name = "zero" + std::to_string(zero);
  write_text(root + "/" + name + ".toml", config_text(zero));
  auto p = run_worker({"launch", "--nproc-per-node", "2", "--master-port", "0", "--no-bind", "--", "train",
                       "--config", root + "/" + name + ".toml", "--out-dir", root + "/" + name, "--quiet"},
                      {"OMP_NUM_THREADS=1", "FLOTILLA_PEAK_FLOPS=1e11"});
  Measured m;
  m.code = p.exit_code;
  m.output = p.output;
  for (const auto& r : read_metrics(root + "/" + name)) {
    if (r["type"] == "event" && r.contains("grad_bytes_model")) {
      m.model_bytes = std::stoll(r["grad_bytes_model"].get<std::string>());
      m.dp_bytes = std::stoll(r["grad_bytes_dp"].get<std::string>());
    }
    if (r["type"] == "step" && r.contains("peak_rss_bytes"))
      m.peak_rss = std::max(m.peak_rss, r["peak_rss_bytes"].get<int64_t>());
  }
  return m;
}

}  // namespace

int main() {
  const std::string root = fresh_dir("zero2_memory");
  flotilla::ModelDims d;
  d.n_layer = kLayers;
  d.n_head = 4;
  d.n_embd = kEmbd;
  d.vocab_size = kVocab;
  d.padded_vocab = flotilla::pad_vocab(kVocab);
  d.max_seq_len = kSeq;
  const auto sizes = flotilla::param_sizes(d);
  int64_t n = 0, rest = 0, layer = 0;
  for (int i = 0; i < flotilla::kNumParamTensors; ++i) {
    const auto s = static_cast<int64_t>(sizes[static_cast<size_t>(i)]);
    n += s;
    if (flotilla::is_layer_param(i))
      layer += s / kLayers;
    else
      rest += s;
  }
  const int64_t chunk = (n + 1) / 2;
  const int64_t piece = std::min<int64_t>(chunk, static_cast<int64_t>(flotilla::DataParallel::kGatherPiece));

  const Measured z1 = run(root, 1);
  CHECK_MSG(z1.code == 0, "%s", z1.output.c_str());
  const Measured z2 = run(root, 2);
  CHECK_MSG(z2.code == 0, "%s", z2.output.c_str());

  CHECK(z1.model_bytes == 4 * n);
  CHECK(z1.dp_bytes == 4 * (2 * chunk + chunk));
  CHECK(z2.model_bytes == 4 * (rest + 2 * layer));
  CHECK(z2.dp_bytes == 4 * (chunk + 3 * piece));
  const int64_t saved = (z1.model_bytes + z1.dp_bytes) - (z2.model_bytes + z2.dp_bytes);
  const int64_t rss_saved = z1.peak_rss - z2.peak_rss;
  std::printf(
      "params %lld (layer %lld, rest %lld): gradient bytes zero1 %lld, zero2 %lld (saved %.1f MiB); "
      "peak RSS zero1 %.1f MiB, zero2 %.1f MiB (saved %.1f MiB)\n",
      static_cast<long long>(n), static_cast<long long>(layer), static_cast<long long>(rest),
      static_cast<long long>(z1.model_bytes + z1.dp_bytes),
      static_cast<long long>(z2.model_bytes + z2.dp_bytes), saved / 1048576.0, z1.peak_rss / 1048576.0,
      z2.peak_rss / 1048576.0, rss_saved / 1048576.0);
  // The saving is at least the full gradient times (1 - 1/dp), less the staging.
  CHECK(saved >= 4 * (n - chunk - 2 * layer));
  CHECK_MSG(z1.peak_rss > 0 && z2.peak_rss > 0 && rss_saved > saved / 2, "RSS saved %lld of %lld accounted",
            static_cast<long long>(rss_saved), static_cast<long long>(saved));
  return summary("zero2_memory");
}
