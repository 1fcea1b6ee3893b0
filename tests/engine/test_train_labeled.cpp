// Training on masked, packed fine-tuning data (labeled shards from `data prepare` of chat JSONL)
// with the real worker: the loss is the mean over every counted (assistant) target of the global
// batch, so the same global batch gives the same losses however it is split: one micro-batch of 4,
// two accumulated micro-batches of 2, two data-parallel ranks, tensor parallelism (the masked
// vocab-parallel cross-entropy) and pipeline stages; the micro-batches of the data really hold
// different numbers of targets (a mean of per-micro-batch means would differ). A Llama model, so
// the packed documents' positions drive RoPE and the attention masks. Also: the first step's loss
// equals the CPU model's forward of that global batch with the same initialisation.
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/config/config_io.h"
#include "engine/data/loader.h"
#include "engine/model/model.h"
#include "tests/engine/test_hybrid_util.h"

using namespace hybrid_test;

namespace {

// Conversations of uneven lengths, so packed rows carry uneven numbers of assistant tokens.
std::string chats() {
  const char* words[] = {"model", "train", "loss", "gradient", "token",
                         "layer", "batch", "rope", "norm",     "head"};
  std::string out;
  uint32_t x = 7;
  for (int i = 0; i < 60; ++i) {
    auto sentence = [&](int n) {
      std::string s;
      for (int k = 0; k < n; ++k) {
        x = x * 1664525u + 1013904223u;
        if (k) s += ' ';
        s += words[(x >> 10) % 10];
      }
      return s;
    };
    const nlohmann::json rec = {{"messages",
                                 {{{"role", "user"}, {"content", "What is " + sentence(1 + i % 4) + "?"}},
                                  {{"role", "assistant"}, {"content", sentence(1 + (i * 7) % 13)}}}}};
    out += rec.dump() + "\n";
  }
  return out;
}

std::string config(const std::string& data, const std::string& parallel, int micro) {
  return "[run]\nname = \"labeled\"\nseed = 3\nthreads = 1\n"
         "[model]\npreset = \"custom\"\narch = \"llama\"\nn_layer = 2\nn_head = 4\nn_kv_head = 2\nn_embd = "
         "64\n"
         "ffn_dim = 96\nvocab_size = 916\nmax_seq_len = 64\n"
         "[data]\nsource = \"shards\"\ntrain = \"" +
         data + "/train_*.bin\"\n" + "[train]\nsteps = 6\nmicro_batch = " + std::to_string(micro) +
         "\nseq_len = 32\nglobal_batch_tokens = 128\n"
         "[optim]\nlr = 0.003\nwarmup_steps = 2\n"
         "[parallel]\ntimeout_s = 60\n" +
         parallel + "\n[checkpoint]\nevery = 0\n[eval]\nevery = 0\n";
}

}  // namespace

int main() {
  const std::string root = fresh_dir("train_labeled");
  const std::string tok = std::string(FLOTILLA_SOURCE_DIR) + "/tests/engine/golden/tokenizers/llama3";
  write_text(root + "/chats.jsonl", chats());
  const auto prep =
      flotilla_test::run_worker({"data", "prepare", "--input", root + "/chats.jsonl", "--tokenizer", tok,
                                 "--out", root + "/data", "--val-fraction", "0", "--seq-len", "32"});
  CHECK_MSG(prep.exit_code == 0, "data prepare: %s", prep.output.c_str());

  // The first global batch: 4 rows; its two halves hold different numbers of targets.
  flotilla::LoaderOptions lo;
  lo.pattern = root + "/data/train_*.bin";
  lo.B = 2;
  lo.T = 32;
  flotilla::DataLoader loader(lo);
  CHECK(loader.has_labels());
  std::vector<int32_t> in(128), tg(128), pos(128);
  loader.next_batch(in.data(), tg.data(), pos.data());
  loader.next_batch(in.data() + 64, tg.data() + 64, pos.data() + 64);
  int first = 0, second = 0, restarts = 0;
  for (int i = 0; i < 128; ++i) {
    (i < 64 ? first : second) += tg[i] != flotilla::kIgnoreTarget ? 1 : 0;
    restarts += i % 32 != 0 && pos[i] == 0 ? 1 : 0;
  }
  CHECK_MSG(first != second && first > 0 && second > 0, "targets per micro-batch: %d and %d", first, second);
  CHECK_MSG(restarts > 0, "no document starts inside a row: packing is not exercised");

  const std::string data = root + "/data";
  const Run one = train(root, "one", 1, config(data, "", 4));
  CHECK_MSG(one.code == 0 && one.losses.size() == 6, "%s", one.output.c_str());
  expect_close(one, train(root, "accum", 1, config(data, "", 2)), "2 accumulated micro-batches");
  expect_close(one, train(root, "dp2", 2, config(data, "dp = 2", 2)), "dp=2");
  expect_close(one, train(root, "tp2", 2, config(data, "tp = 2", 4)), "tp=2 (masked vocab-parallel CE)");
  expect_close(one, train(root, "pp2", 2, config(data, "pp = 2\nmicro_batches = 2", 2)), "pp=2");

  // Step 1's loss is the model's mean over the batch's counted targets (same seed, same init).
  flotilla::RunConfig cfg = flotilla::parse_config_toml(config(data, "", 4), "labeled.toml");
  const flotilla::ModelDims dims = flotilla::dims_from_config(cfg.model);
  flotilla::Model model(dims);
  model.init_random(cfg.run.seed);
  const float want = model.forward(in.data(), tg.data(), 4, 32, pos.data());
  CHECK_MSG(model.counted_targets() == first + second, "counted %lld",
            static_cast<long long>(model.counted_targets()));
  CHECK_MSG(std::fabs(one.losses.at(1) - want) <= 1e-6 * std::fabs(want), "step 1 loss %.7f, model %.7f",
            one.losses.at(1), want);
  std::printf("step 1 loss %.6f over %d counted targets (%d + %d)\n", want, first + second, first, second);
  return flotilla_test::summary("test_train_labeled");
}
