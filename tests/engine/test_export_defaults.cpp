// Export defaults and messages (issue 34 #26): a Llama trained from random weights in fp32 exports
// fp32 by default (the source's dtype, said so), where it exported bf16 before; --dtype bf16 still
// rounds; the run's own checkpoint.export_hf (a relative folder, as the wizard writes it) is logged
// with its absolute path and the source's dtype; and the command prints the absolute folder.
#include <filesystem>
#include <string>

#include "check.h"
#include "engine/interop/hf_config.h"
#include "worker_run.h"

using namespace flotilla_test;
namespace fs = std::filesystem;

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

int main() {
  const std::string root = fresh_dir("export_defaults");
  write_text(root + "/run.toml",
             "[run]\nname = \"exp\"\nseed = 1\nthreads = 1\n"
             "[model]\npreset = \"custom\"\narch = \"llama\"\nn_layer = 1\nn_head = 2\nn_kv_head = 1\n"
             "n_embd = 32\nffn_dim = 64\nvocab_size = 128\nmax_seq_len = 32\n"
             "[data]\nsynthetic_tokens = 20000\n"
             "[train]\nsteps = 2\nmicro_batch = 2\nseq_len = 16\n"
             "[checkpoint]\nevery = 0\nexport_hf = \"hf\"\n[eval]\nevery = 0\n");
  const std::string run = root + "/run";
  fs::current_path(root);  // relative folders (export_hf = "hf", --out out) land here
  const auto trained = run_worker({"train", "--config", root + "/run.toml", "--out-dir", run, "--quiet"},
                                  {"OMP_NUM_THREADS=1", "FLOTILLA_PEAK_FLOPS=1e11"});
  CHECK_MSG(trained.exit_code == 0, "train: %s", trained.output.c_str());

  // The end-of-run export: fp32 (the checkpoint's), logged with the folder's absolute path.
  std::string logged;
  for (const nlohmann::json& r : read_metrics(run))
    if (r.value("type", "") == "event" && contains(r.value("message", ""), "as a Hugging Face folder"))
      logged = r.value("message", "");
  const std::string folder = fs::path(logged.substr(logged.rfind(" to ") + 4)).string();
  CHECK_MSG(contains(logged, "(fp32, as the source: the dtype of the checkpoint's weights)") &&
                fs::path(folder).is_absolute() && fs::exists(folder + "/config.json"),
            "logged: %s", logged.c_str());
  CHECK(folder == (fs::path(root) / "hf").string() &&
        flotilla::interop::read_hf_config(folder).dtype == "float32");

  // The command: fp32 by default, said so, the folder named absolutely even when given relative.
  const auto e = run_worker({"export", "--checkpoint", run, "--format", "hf", "--out", "out"});
  CHECK_MSG(e.exit_code == 0 &&
                contains(e.output, "(fp32, as the source: the dtype of the checkpoint's weights)") &&
                contains(e.output, ": " + (fs::path(root) / "out").string() + " ("),
            "%s", e.output.c_str());
  CHECK(flotilla::interop::read_hf_config(root + "/out").dtype == "float32");
  const auto b =
      run_worker({"export", "--checkpoint", run, "--format", "hf", "--dtype", "bf16", "--out", "out16"});
  CHECK_MSG(b.exit_code == 0 && contains(b.output, "(bf16)"), "%s", b.output.c_str());
  CHECK(flotilla::interop::read_hf_config(root + "/out16").dtype == "bfloat16");
  std::printf("export defaults: fp32 source exports fp32, folders named absolutely\n");
  return flotilla_test::summary("test_export_defaults");
}
