// GPU pinning by `flotilla-worker launch` (issue 8), testable without a GPU:
//  1. The choice of device per rank (assign_gpus, a pure function): rank l gets GPU l, or the
//     l-th entry of --gpus; fewer GPUs than ranks, a short --gpus list or an ordinal that does not
//     exist are refused with both numbers in the message; --gpus syntax and duplicates.
//  2. What a rank selects (rank_cuda_device): FLOTILLA_CUDA_DEVICE when set, else LOCAL_RANK
//     modulo the GPU count; a bad value is refused naming the variable.
//  3. Ranks receive the variable: run_launch with an injected GPU count starts /bin/sh ranks that
//     print FLOTILLA_CUDA_DEVICE and LOCAL_RANK; a CPU run (no device) gets no variable.
//  4. The refusal happens before any rank starts: the real worker, `launch --nproc-per-node 3`
//     of a run.device = "cuda" config with FLOTILLA_TEST_GPU_COUNT=2, exits with the config
//     error code, names 3 and 2, and no rank ran (no run directory, no rank output).
#include <filesystem>
#include <string>
#include <vector>

#include "check.h"
#include "engine/core/error.h"
#include "engine/launch/gpu_pinning.h"
#include "engine/launch/launcher.h"
#include "worker_run.h"

using namespace flotilla;
using namespace flotilla_test;

namespace {

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The message of the Error f() throws ("" when it does not throw).
template <typename F>
std::string error_of(F f, ExitCode* code = nullptr) {
  try {
    f();
  } catch (const Error& e) {
    if (code) *code = e.code();
    return e.what();
  }
  return "";
}

void test_assign() {
  CHECK((assign_gpus(2, 4, {}, "") == std::vector<int>{0, 1}));
  CHECK((assign_gpus(3, 3, {}, "") == std::vector<int>{0, 1, 2}));
  CHECK((assign_gpus(2, 4, {3, 1}, "") == std::vector<int>{3, 1}));
  ExitCode code = ExitCode::kOk;
  std::string e = error_of([] { assign_gpus(4, 2, {}, "CUDA_VISIBLE_DEVICES=0,1"); }, &code);
  CHECK_MSG(has(e, "--nproc-per-node 4") && has(e, "only 2 GPUs are visible") &&
                has(e, "CUDA_VISIBLE_DEVICES=0,1") && has(e, "lower --nproc-per-node to 2"),
            "%s", e.c_str());
  CHECK(code == ExitCode::kConfig);
  e = error_of([] { assign_gpus(1, 0, {}, "this worker was built without CUDA"); });
  CHECK_MSG(has(e, "0 GPUs are visible (this worker was built without CUDA)") && has(e, "run.device = \"cpu\""),
            "%s", e.c_str());
  e = error_of([] { assign_gpus(3, 8, {0, 1}, ""); });
  CHECK_MSG(has(e, "--gpus lists 2 GPUs but --nproc-per-node is 3"), "%s", e.c_str());
  e = error_of([] { assign_gpus(2, 2, {0, 5}, ""); });
  CHECK_MSG(has(e, "GPU 5 for local rank 1") && has(e, "only 2 GPUs are visible"), "%s", e.c_str());

  CHECK((parse_gpu_list("0,2,3", "--gpus") == std::vector<int>{0, 2, 3}));
  CHECK(parse_gpu_list("", "--gpus").empty());
  code = ExitCode::kOk;
  e = error_of([] { parse_gpu_list("0,x", "--gpus"); }, &code);
  CHECK_MSG(has(e, "'x' is not a GPU ordinal") && code == ExitCode::kUsage, "%s", e.c_str());
  e = error_of([] { parse_gpu_list("1,1", "--gpus"); });
  CHECK_MSG(has(e, "lists GPU 1 twice"), "%s", e.c_str());
  CHECK(!error_of([] { parse_gpu_list("-1", "--gpus"); }).empty());
}

void test_rank_device() {
  CHECK(rank_cuda_device("2", 0, 4) == 2);
  CHECK(rank_cuda_device(nullptr, 3, 4) == 3);
  CHECK(rank_cuda_device(nullptr, 5, 4) == 1);
  std::string e = error_of([] { rank_cuda_device("4", 0, 4); });
  CHECK_MSG(has(e, "FLOTILLA_CUDA_DEVICE=4") && has(e, "4 visible GPUs"), "%s", e.c_str());
  CHECK(!error_of([] { rank_cuda_device("gpu0", 0, 4); }).empty());
  CHECK(!error_of([] { rank_cuda_device(nullptr, 0, 0); }).empty());
}

// run_launch over /bin/sh ranks; returns the merged log (rank stderr is prefixed "[rank R] ").
std::string launch_sh(const std::string& dir, int nproc, const std::string& device, std::vector<int> gpus,
                      int gpu_count, int* code) {
  const std::string log_path = dir + "/launch-" + device + ".log";
  std::FILE* log = std::fopen(log_path.c_str(), "w");
  LaunchOptions o;
  o.nproc_per_node = nproc;
  o.master_port = 0;
  o.bind_cores = false;
  o.init_timeout_s = 30;
  o.device = device;
  o.gpus = std::move(gpus);
  o.gpu_count = gpu_count;
  o.worker_binary = "/bin/sh";
  o.worker_args = {"-c", "touch " + dir + "/started-$LOCAL_RANK; echo \"local=$LOCAL_RANK dev=${" +
                             std::string(kCudaDeviceEnv) + "-unset}\" >&2"};
  o.log = log;
  try {
    *code = run_launch(o);
  } catch (const Error& e) {
    *code = static_cast<int>(e.code());
    std::fprintf(log, "error: %s\n", e.what());
  }
  std::fclose(log);
  return read_file(log_path);
}

void test_ranks_receive(const std::string& dir) {
  int code = -1;
  std::string log = launch_sh(dir, 2, "cuda", {3, 1}, 4, &code);
  CHECK_MSG(code == 0, "exit %d\n%s", code, log.c_str());
  CHECK_MSG(has(log, "[rank 0] local=0 dev=3") && has(log, "[rank 1] local=1 dev=1"), "%s", log.c_str());
  CHECK_MSG(has(log, "local rank 0 -> GPU 3, local rank 1 -> GPU 1"), "%s", log.c_str());

  log = launch_sh(dir, 2, "cuda", {}, 2, &code);
  CHECK_MSG(code == 0 && has(log, "[rank 0] local=0 dev=0") && has(log, "[rank 1] local=1 dev=1"), "%s",
            log.c_str());

  log = launch_sh(dir, 2, "cpu", {}, 0, &code);  // a CPU run is not pinned
  CHECK_MSG(code == 0 && has(log, "[rank 0] local=0 dev=unset") && has(log, "[rank 1] local=1 dev=unset"), "%s",
            log.c_str());

  // Refused before any rank starts.
  std::filesystem::remove(dir + "/started-0");
  log = launch_sh(dir, 3, "cuda", {}, 2, &code);
  CHECK_MSG(code == static_cast<int>(ExitCode::kConfig), "exit %d\n%s", code, log.c_str());
  CHECK_MSG(has(log, "--nproc-per-node 3") && has(log, "only 2 GPUs are visible"), "%s", log.c_str());
  CHECK(!std::filesystem::exists(dir + "/started-0"));
}

void test_worker_cli(const std::string& dir) {
  const std::string cfg = dir + "/cuda.toml";
  write_text(cfg, "[run]\nname = \"pin\"\ndevice = \"cuda\"\n[model]\npreset = \"tiny\"\n");
  auto r = run_worker({"launch", "--nproc-per-node", "3", "--master-port", "0", "--no-bind", "--", "train",
                       "--config", cfg, "--out-dir", dir + "/pin-run"},
                      {"FLOTILLA_TEST_GPU_COUNT=2"});
  CHECK_MSG(r.exit_code == static_cast<int>(ExitCode::kConfig), "exit %d\n%s", r.exit_code, r.output.c_str());
  CHECK_MSG(has(r.output, "--nproc-per-node 3 starts one rank per GPU, but only 2 GPUs are visible"), "%s",
            r.output.c_str());
  CHECK_MSG(!has(r.output, "[rank "), "a rank started:\n%s", r.output.c_str());
  CHECK(!std::filesystem::exists(dir + "/pin-run"));

  // The device can also come from --set; --gpus with the wrong count is refused the same way.
  write_text(dir + "/cpu.toml", "[run]\nname = \"pin\"\n[model]\npreset = \"tiny\"\n");
  r = run_worker({"launch", "--nproc-per-node", "2", "--gpus", "0", "--master-port", "0", "--", "train",
                  "--config", dir + "/cpu.toml", "--set", "run.device=cuda"},
                 {"FLOTILLA_TEST_GPU_COUNT=4"});
  CHECK_MSG(r.exit_code == static_cast<int>(ExitCode::kConfig) &&
                has(r.output, "--gpus lists 1 GPU but --nproc-per-node is 2"),
            "exit %d\n%s", r.exit_code, r.output.c_str());
  CHECK(worker_run_device({"train", "--config", dir + "/cpu.toml"}) == "cpu");
  CHECK(worker_run_device({"train", "--config", dir + "/cpu.toml", "--set", "run.device=cuda"}) == "cuda");
  CHECK(worker_run_device({"train", "--config=" + dir + "/cuda.toml"}) == "cuda");
  CHECK(worker_run_device({"bench", "--device", "cuda"}).empty());
  CHECK(worker_run_device({"train", "--config", dir + "/missing.toml"}).empty());
}

}  // namespace

int main() {
  const std::string dir = fresh_dir("launch_gpus");
  test_assign();
  test_rank_device();
  test_ranks_receive(dir);
  test_worker_cli(dir);
  return summary("launch_gpus");
}
