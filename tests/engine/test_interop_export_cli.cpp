// `flotilla-worker export` end to end: a checkpoint saved through CheckpointStore (params section +
// trainer.json with the resolved config) is exported by the real binary to a transformers folder
// (model.safetensors + config.json), a bare .safetensors file and an llm.c .bin; each imports back
// bitwise. From a checkpoints root with a damaged newest checkpoint it exports the older one and warns;
// usage and missing-config errors return the documented exit codes.
#include <sys/wait.h>

#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>

#include "check.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/interop/gpt2_safetensors.h"
#include "engine/interop/llmc.h"
#include "engine/model/gpt.h"
#include "test_checkpoint_util.h"

using namespace flotilla;
using namespace ckpt_test;

namespace {

struct Result {
  int code = -1;
  std::string out;
};

Result run(const std::string& args, const std::string& scratch) {
  const std::string log = scratch + "/cmd.log";
  const std::string cmd = std::string(FLOTILLA_WORKER_PATH) + " " + args + " > " + log + " 2>&1";
  const int status = std::system(cmd.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_file(log)};
}

ModelDims dims() {
  ModelDims d;
  d.n_layer = 2;
  d.n_head = 2;
  d.n_embd = 16;
  d.vocab_size = 77;
  d.padded_vocab = pad_vocab(77);
  d.max_seq_len = 12;
  return d;
}

std::string trainer_json(const ModelDims& d, int64_t step) {
  nlohmann::json j;
  j["step"] = step;
  j["config"]["model"] = {{"preset", "custom"}, {"n_layer", d.n_layer},       {"n_head", d.n_head},
                          {"n_embd", d.n_embd}, {"vocab_size", d.vocab_size}, {"max_seq_len", d.max_seq_len}};
  return j.dump();
}

std::vector<float> params_for(const ModelDims& d, float salt) {
  std::vector<float> p(num_parameters(d), 0.0f);
  for (size_t i = 0; i < static_cast<size_t>(d.vocab_size) * d.n_embd; ++i)
    p[i] = salt + 1e-3f * static_cast<float>(i % 977);
  for (size_t i = static_cast<size_t>(d.padded_vocab) * d.n_embd; i < p.size(); ++i)
    p[i] = salt - 1e-4f * static_cast<float>(i % 1013);
  return p;
}

void save(CheckpointStore& store, const ModelDims& d, int64_t step, const std::vector<float>& p,
          const std::string& tj) {
  CheckpointSaveRequest r;
  r.step = step;
  r.tensors.push_back({"params", {static_cast<int64_t>(p.size())}, p.data(), p.size() * 4});
  const std::vector<float> m(p.size(), 0.5f);
  r.tensors.push_back({"adam_m", {static_cast<int64_t>(m.size())}, m.data(), m.size() * 4});
  r.trainer_state_json = tj;
  store.save(r, 3);
}

bool same(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

}  // namespace

static void run_all() {
  const std::string scratch = fresh_dir("export-cli");
  const std::string root = scratch + "/run/checkpoints";
  const ModelDims d = dims();
  const std::vector<float> p10 = params_for(d, 1.0f), p20 = params_for(d, 2.0f);
  CheckpointStore store(root);
  save(store, d, 10, p10, trainer_json(d, 10));
  save(store, d, 20, p20, trainer_json(d, 20));

  // A run directory -> newest verified checkpoint -> a folder transformers can load.
  Result r =
      run("export --checkpoint " + scratch + "/run --format safetensors --out " + scratch + "/hf/", scratch);
  CHECK_MSG(r.code == 0, "exit %d: %s", r.code, r.out.c_str());
  CHECK(contains(r.out, "step 20") && contains(r.out, scratch + "/hf/model.safetensors"));
  CHECK(same(interop::import_gpt2_safetensors(scratch + "/hf/model.safetensors", d), p20));
  const auto cfg = nlohmann::json::parse(read_file(scratch + "/hf/config.json"));
  CHECK(cfg["model_type"] == "gpt2" && cfg["n_layer"] == 2 && cfg["n_head"] == 2 && cfg["n_embd"] == 16 &&
        cfg["vocab_size"] == 77 && cfg["n_positions"] == 12 && cfg["activation_function"] == "gelu_new");
  CHECK(interop::infer_dims_from_safetensors(scratch + "/hf/model.safetensors").n_head ==
        2);  // from config.json

  // A step directory -> a bare file; and llm.c.
  r = run("export --checkpoint " + root + "/step-00000010 --format safetensors --out " + scratch +
              "/m10.safetensors",
          scratch);
  CHECK_MSG(r.code == 0, "exit %d: %s", r.code, r.out.c_str());
  CHECK(same(interop::import_gpt2_safetensors(scratch + "/m10.safetensors", d), p10));
  r = run("export --checkpoint " + root + " --format llmc --out " + scratch + "/m.bin", scratch);
  CHECK_MSG(r.code == 0, "exit %d: %s", r.code, r.out.c_str());
  CHECK(same(interop::import_llmc(scratch + "/m.bin", d), p20));
  CHECK(interop::read_llmc_header(scratch + "/m.bin").dims.padded_vocab == 128);

  // Damaged newest: falls back to step 10 with a warning on stderr.
  flip_byte(root + "/step-00000020/rank-0.bin", 500);
  r = run("export --checkpoint " + root + " --format llmc --out " + scratch + "/m2.bin", scratch);
  CHECK_MSG(r.code == 0, "exit %d: %s", r.code, r.out.c_str());
  CHECK(contains(r.out, "warning: step-00000020: rank-0.bin crc32c mismatch") && contains(r.out, "step 10"));
  CHECK(same(interop::import_llmc(scratch + "/m2.bin", d), p10));
  r = run("export --checkpoint " + root + "/step-00000020 --format llmc --out " + scratch + "/m3.bin",
          scratch);
  CHECK(r.code == 5 && contains(r.out, "does not verify") && !fs::exists(scratch + "/m3.bin"));

  // Errors: usage (2) and a checkpoint without config.model (5).
  r = run("export --checkpoint " + root + " --format onnx --out x", scratch);
  CHECK(r.code == 2 && contains(r.out, "--format onnx is not supported"));
  r = run("export --format llmc --out x", scratch);
  CHECK(r.code == 2 && contains(r.out, "needs --checkpoint"));
  CheckpointStore bare(scratch + "/bare");
  save(bare, d, 5, p10, "{\"step\": 5}");
  r = run("export --checkpoint " + scratch + "/bare --format llmc --out " + scratch + "/x.bin", scratch);
  CHECK(r.code == 5 && contains(r.out, "has no config.model"));
  r = run("export --checkpoint " + scratch + "/nowhere --out " + scratch + "/x.bin", scratch);
  CHECK(r.code == 5 && contains(r.out, "does not exist"));
}

int main() {
  try {
    run_all();
  } catch (const std::exception& e) {
    CHECK_MSG(false, "unexpected exception: %s", e.what());
  }
  return flotilla_test::summary("test_interop_export_cli");
}
