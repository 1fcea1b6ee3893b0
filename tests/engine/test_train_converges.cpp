// Training the tiny model on the synthetic corpus drives validation loss well below what a model
// of token frequencies alone can reach, and never below the corpus's exact entropy rate.
//
// Justification of the threshold: synthetic_stats() gives the unigram entropy H1 (the best loss
// without context) and the entropy rate H (the best loss of any model). Both are exact properties
// of the corpus process. A model that uses context must land between them; we require it to close
// at least half of the gap H1 - H within 150 steps, and we check loss at initialisation is
// ln(vocab) within 0.1 (GPT-2 init gives near-uniform logits).
#include <cmath>

#include "check.h"
#include "engine/data/synthetic.h"
#include "worker_run.h"

using namespace flotilla_test;

int main() {
  const std::string root = fresh_dir("train_converges");
  const std::string cfg = root + "/run.toml";
  write_text(cfg, R"(
[run]
name = "converge"
seed = 11
[model]
preset = "custom"
n_layer = 2
n_head = 4
n_embd = 64
vocab_size = 256
max_seq_len = 64
[data]
synthetic_tokens = 200000
[train]
steps = 150
micro_batch = 8
seq_len = 64
[optim]
lr = 0.004
warmup_steps = 10
weight_decay = 0.0
[checkpoint]
save_final = false
[eval]
every = 50
batches = 4
)");
  auto r =
      run_worker({"train", "--config", cfg, "--out-dir", root + "/run", "--quiet", "--no-stdout-metrics"},
                 {"FLOTILLA_PEAK_FLOPS=1e11"});
  CHECK_MSG(r.exit_code == 0, "%s", r.output.c_str());

  const auto st = flotilla::synthetic_stats(256, 11);
  std::printf("entropy rate %.3f, unigram %.3f, uniform %.3f nats\n", st.entropy_rate, st.unigram_entropy,
              st.uniform_entropy);
  CHECK(st.entropy_rate < st.unigram_entropy - 0.5);  // the corpus has structure to learn

  const auto losses = step_losses(root + "/run");
  CHECK(losses.size() == 150);
  CHECK_NEAR(losses.at(1), std::log(256.0), 0.1);

  float val = -1;
  for (const auto& rec : read_metrics(root + "/run"))
    if (rec["type"] == "eval" && rec["step"] == 150) val = static_cast<float>(rec["val_loss"].get<double>());
  std::printf("val loss at step 150: %.4f\n", val);
  const double threshold = st.unigram_entropy - 0.5 * (st.unigram_entropy - st.entropy_rate);
  CHECK_MSG(val > 0 && val < threshold, "val loss %.4f, threshold %.4f", val, threshold);
  CHECK(val > st.entropy_rate - 0.05);
  return summary("train_converges");
}
