// LoRA in every parallel layout, with real Gloo ranks and the real worker, against one process on
// the same global batch (the tolerances and batch plan of test_hybrid_util.h): data parallelism
// with ZeRO 0/1/2 over the adapters, tensor parallelism (A replicated and B split by rows for the
// column-parallel targets, A split by columns and B replicated for o and down), 1F1B pipeline
// stages holding their layers' adapters, and the hybrids tp x pp and dp x tp with ZeRO-1; the
// adapters gathered from the checkpoints are compared, not just the losses. Two bases from the
// hf goldens: qwen3 (GQA, per-head q/k norm, head_dim 16, tied) and llama (untied head, llama3
// RoPE). Also, on one process: recomputation is bitwise; dropout draws the same masks run to run
// (bitwise), under recomputation (bitwise) and after a resume (bitwise); a stop and resume is
// bitwise equal to never stopping; the checkpoint holds the adapters only; the base in a folder
// whose weights changed after training is refused on resume, naming the file.
#include <filesystem>
#include <fstream>
#include <string>

#include "engine/checkpoint/checkpoint.h"
#include "engine/model/gpt.h"
#include "engine/model/lora.h"
#include "engine/model/param_layout.h"
#include "tests/engine/test_hybrid_util.h"

using namespace hybrid_test;
namespace fs = std::filesystem;

namespace {

std::string golden(const std::string& name) {
  return std::string(FLOTILLA_SOURCE_DIR) + "/tests/engine/golden/hf/" + name;
}

std::string lora_config(const std::string& base, const std::string& parallel, const std::string& lora = "",
                        const std::string& train = "") {
  return "[run]\nname = \"lora-layouts\"\nseed = 11\nthreads = 1\n"
         "[model]\ninit_from = \"" +
         base +
         "\"\n"
         "[lora]\nenabled = true\nrank = 4\nalpha = 8.0\ntargets = \"all-linear\"\n" +
         lora +
         "[data]\nsynthetic_tokens = 60000\n"
         "[train]\nsteps = 10\nmicro_batch = 2\nseq_len = 16\nglobal_batch_tokens = 64\n" +
         train +
         "[optim]\nlr = 0.01\nwarmup_steps = 2\n"
         "[parallel]\ntimeout_s = 60\n" +
         parallel + "\n[checkpoint]\nevery = 5\nkeep_last = 3\n[eval]\nevery = 0\nbatches = 1\n";
}

void layouts(const std::string& root, const char* name, const std::string& base) {
  const std::string r = root + "/" + name;
  fs::create_directories(r);
  const Run single = train(r, "single", 1, lora_config(base, ""));
  CHECK_MSG(single.code == 0 && single.losses.size() == 10, "%s single: %s", name, single.output.c_str());
  // The loss must move: the adapters train (B starts at zero, so only step 1's loss is the base's).
  CHECK_MSG(single.losses.rbegin()->second < single.losses.begin()->second - 1e-3,
            "%s: the loss did not fall", name);
  const Run recompute = train(r, "recompute", 1, lora_config(base, "", "", "recompute = true\n"));
  CHECK_MSG(bitwise_equal(single, recompute), "%s: recompute is not bitwise equal", name);
  const std::string tag = std::string(name) + " LoRA ";
  expect_close(single, train(r, "dp2", 2, lora_config(base, "dp = 2")), (tag + "dp=2").c_str());
  expect_close(single, train(r, "dp2z1", 2, lora_config(base, "dp = 2\nzero = 1")),
               (tag + "dp=2 zero1").c_str());
  expect_close(single, train(r, "dp2z2", 2, lora_config(base, "dp = 2\nzero = 2")),
               (tag + "dp=2 zero2").c_str());
  expect_close(single, train(r, "tp2", 2, lora_config(base, "tp = 2")), (tag + "tp=2").c_str());
  expect_close(single, train(r, "pp2", 2, lora_config(base, "pp = 2\nmicro_batches = 2")),
               (tag + "pp=2").c_str());
  expect_close(single, train(r, "tp2pp2", 4, lora_config(base, "tp = 2\npp = 2\nmicro_batches = 2")),
               (tag + "tp=2 x pp=2").c_str());
  expect_close(single, train(r, "dp2tp2", 4, lora_config(base, "dp = 2\ntp = 2\nzero = 1")),
               (tag + "dp=2 x tp=2 zero1").c_str());
}

// Sizes of one checkpoint's rank file: the adapters and their two moments, not the base.
void checkpoint_holds_adapters(const std::string& run_dir) {
  const flotilla::ModelCheckpoint ck = flotilla::load_model_checkpoint(run_dir + "/checkpoints", nullptr);
  CHECK(ck.lora.enabled() && ck.lora.rank == 4);
  const size_t adapters = flotilla::lora_parameter_count(ck.dims, ck.lora);
  CHECK_MSG(ck.params.size() == adapters, "checkpoint params %zu, adapters %zu", ck.params.size(), adapters);
  size_t bytes = 0;
  for (const auto& e : fs::directory_iterator(ck.dir))
    if (e.path().filename().string().rfind("rank-", 0) == 0) bytes += fs::file_size(e.path());
  const size_t base_bytes = flotilla::num_parameters(ck.dims) * 4;
  CHECK_MSG(bytes < 3 * adapters * 4 + 4096 && bytes < base_bytes,
            "rank file %zu bytes: more than 3 x %zu adapter floats (the base has %zu bytes)", bytes, adapters,
            base_bytes);
  CHECK(!ck.base_weights.empty() && ck.base_weights.find(".safetensors") != std::string::npos);
}

void resume_and_dropout(const std::string& root) {
  const std::string r = root + "/resume";
  fs::create_directories(r);
  const std::string base = golden("qwen3");
  for (const char* dropout : {"0.0", "0.1"}) {
    const std::string lora = std::string("dropout = ") + dropout + "\n";
    const std::string tag = std::string("dropout ") + dropout;
    const Run straight = train(r, std::string("straight-") + dropout, 1, lora_config(base, "", lora));
    CHECK_MSG(straight.code == 0 && straight.losses.size() == 10, "%s: %s", tag.c_str(),
              straight.output.c_str());
    // The same masks run to run and under recomputation.
    const Run again = train(r, std::string("again-") + dropout, 1, lora_config(base, "", lora));
    CHECK_MSG(bitwise_equal(straight, again), "%s: two identical runs differ", tag.c_str());
    const Run rec =
        train(r, std::string("recompute-") + dropout, 1, lora_config(base, "", lora, "recompute = true\n"));
    CHECK_MSG(bitwise_equal(straight, rec), "%s: recompute is not bitwise equal", tag.c_str());
    // Stop after step 4 (a checkpoint), resume in a new process: bitwise the straight run.
    const std::string name = std::string("stopped-") + dropout;
    const Run first = train(r, name, 1, lora_config(base, "", lora), {"--stop-after", "4"});
    CHECK_MSG(first.code == 0 && first.losses.size() == 4, "%s: stop-after: %s", tag.c_str(),
              first.output.c_str());
    const Run resumed = train(r, name, 1, lora_config(base, "", lora));
    CHECK_MSG(resumed.code == 0, "%s: resume: %s", tag.c_str(), resumed.output.c_str());
    CHECK_MSG(bitwise_equal(straight, resumed),
              "%s: a stop and resume is not bitwise equal to never stopping", tag.c_str());
    if (std::string(dropout) == "0.1") {
      // Dropout really changes the training (masks are drawn).
      const Run plain = train(r, "straight-0.0", 1, lora_config(base, "", "dropout = 0.0\n"));
      CHECK(!bitwise_equal(plain, straight));
    }
    checkpoint_holds_adapters(r + "/" + name);
  }
}

void changed_base_refused(const std::string& root) {
  const std::string r = root + "/changed-base";
  fs::create_directories(r);
  const std::string base = r + "/base";
  fs::copy(golden("qwen2"), base, fs::copy_options::recursive);
  const Run first = train(r, "run", 1, lora_config(base, ""), {"--stop-after", "3"});
  CHECK_MSG(first.code == 0, "%s", first.output.c_str());
  // Flip one byte in the middle of the weights (the tensor data, not the header).
  const std::string weights = base + "/model.safetensors";
  {
    std::fstream f(weights, std::ios::in | std::ios::out | std::ios::binary);
    const auto size = static_cast<std::streamoff>(fs::file_size(weights));
    f.seekg(size - 100);
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x10);
    f.seekp(size - 100);
    f.write(&c, 1);
  }
  const Run again = train(r, "run", 1, lora_config(base, ""));
  CHECK_MSG(again.code == 5, "resume on a changed base: exit %d (want 5)\n%s", again.code,
            again.output.c_str());
  CHECK_MSG(contains(again.output, "model.safetensors changed content"), "the refusal names the file: %s",
            again.output.c_str());
  CHECK_MSG(contains(again.output, "other base weights"), "%s", again.output.c_str());
}

}  // namespace

int main() {
  const std::string root = fresh_dir("lora_layouts");
  layouts(root, "qwen3", golden("qwen3"));
  layouts(root, "llama", golden("llama"));
  resume_and_dropout(root);
  changed_base_refused(root);
  return flotilla_test::summary("test_lora_layouts");
}
