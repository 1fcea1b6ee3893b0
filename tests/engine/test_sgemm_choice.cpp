// The default fp32 sgemm is the library measured faster on this CPU (blas.h), never a model table:
//  - the pure rule: oneDNN only when faster by more than kSgemmMargin, and the words bench prints;
//  - the cache: the figures round-trip through sgemm-choice.json (beside cpu-peaks.json) under a key
//    naming the CPU and both library versions; a damaged entry is not trusted;
//  - in fresh processes (the choice is made once per process), with the timing injected through
//    FLOTILLA_TEST_SGEMM_GFLOPS: the faster one is chosen (either way round), the next process
//    reads the kept figures instead of timing again (even when a new timing would disagree, so
//    every rank of a run agrees), FLOTILLA_SGEMM overrides both ways, FLOTILLA_CPU_PATH means
//    OpenBLAS, and an unwritable cache means OpenBLAS (processes could not agree);
//  - a real timing (no seam) on this machine picks one, keeps it and says so.
// (`bench` printing the library and why is checked in test_cpu_kernel_paths, on its bench runs.)
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "check.h"
#include "engine/cpu/blas.h"
#include "engine/cpu/onednn.h"
#include "engine/cpu/peak_cache.h"
#include "worker_run.h"

using namespace flotilla;
using namespace flotilla_test;

namespace {

int child() {
  const cpu::BlasInfo& info = cpu::blas_info();
  std::printf("choice: onednn=%d measured_now=%d library=[%s] why=[%s]\n", info.onednn_sgemm ? 1 : 0,
              info.sgemm_measured_now ? 1 : 0, info.sgemm_library.c_str(), info.sgemm_choice.c_str());
  return 0;
}

struct Child {
  int code = -1;
  std::string out;
  bool onednn() const { return out.find("onednn=1") != std::string::npos; }
  bool measured_now() const { return out.find("measured_now=1") != std::string::npos; }
  bool says(const std::string& s) const { return out.find(s) != std::string::npos; }
};

Child run_child(const std::string& dir, const std::vector<std::string>& env) {
  static int n = 0;
  const std::string log = dir + "/child-" + std::to_string(n++) + ".log";
  Child c;
  c.code = wait_exit(spawn({"/proc/self/exe", "--child"}, env, log));
  c.out = read_file(log);
  std::printf("  %s", c.out.c_str());
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "--child") return child();
  const std::string dir = fresh_dir("sgemm-choice");

  // The rule and its words.
  CHECK(cpu::prefer_onednn_sgemm({218, 210, 0}));
  CHECK(!cpu::prefer_onednn_sgemm({210, 218, 0}));
  CHECK(!cpu::prefer_onednn_sgemm({101, 100, 0}));  // within the margin: OpenBLAS
  CHECK(cpu::describe_sgemm_measurement({218, 210, 0}) ==
        "measured faster on this CPU: onednn 218 vs openblas 210 GFLOP/s");
  CHECK(cpu::describe_sgemm_measurement({150, 210, 0}) ==
        "measured faster on this CPU: openblas 210 vs onednn 150 GFLOP/s");
  CHECK_MSG(cpu::describe_sgemm_measurement({101, 100, 0.3})
                    .find("within 2%: openblas, other processes used 30%") != std::string::npos,
            "%s", cpu::describe_sgemm_measurement({101, 100, 0.3}).c_str());

  // The cache.
  {
    const std::string path = dir + "/unit/sgemm-choice.json";
    const std::string key = cpu::sgemm_choice_key("2.6.3", "Cooperlake");
    CHECK(key.find("oneDNN 2.6.3") != std::string::npos &&
          key.find("OpenBLAS Cooperlake") != std::string::npos &&
          key.find(cpu::cpu_features().brand) != std::string::npos);
    CHECK(cpu::sgemm_choice_key("3.11.2", "Cooperlake") != key);
    CHECK(!cpu::load_sgemm_measurement(path, key));
    CHECK(cpu::store_sgemm_measurement(path, key, {218.5, 210.25, 0.05}));
    const auto m = cpu::load_sgemm_measurement(path, key);
    CHECK(m && m->onednn_gflops == 218.5 && m->openblas_gflops == 210.25 && m->other_load == 0.05);
    const char* was = std::getenv("FLOTILLA_CACHE_DIR");
    const std::string saved = was != nullptr ? was : "";
    setenv("FLOTILLA_CACHE_DIR", (dir + "/unit").c_str(), 1);
    CHECK(cpu::sgemm_cache_path() == path && cpu::peak_cache_path() == dir + "/unit/cpu-peaks.json");
    if (was != nullptr)
      setenv("FLOTILLA_CACHE_DIR", saved.c_str(), 1);
    else
      unsetenv("FLOTILLA_CACHE_DIR");
    write_text(path, "{\"" + key + "\": {\"onednn_gflops\": \"fast\"}}");
    CHECK(!cpu::load_sgemm_measurement(path, key));
  }

  if (!cpu::onednn_info().loaded) {
    std::printf("oneDNN not loaded (%s): only OpenBLAS to choose\n", cpu::onednn_info().error.c_str());
    const Child c = run_child(dir, {"FLOTILLA_CACHE_DIR=" + dir + "/none"});
    CHECK(c.code == 0 && !c.onednn() && c.says("oneDNN not loaded"));
    return summary("sgemm_choice");
  }

  // oneDNN measured faster: chosen, timed now and kept; the next process reads it, even though its
  // own timing would now say the opposite.
  const std::string a = "FLOTILLA_CACHE_DIR=" + dir + "/a";
  Child c = run_child(dir, {a, "FLOTILLA_TEST_SGEMM_GFLOPS=onednn=218,openblas=210"});
  CHECK(c.code == 0 && c.onednn() && c.measured_now());
  CHECK(c.says(
      "measured faster on this CPU: onednn 218 vs openblas 210 GFLOP/s (one thread; measured now, kept in"));
  CHECK(c.says("library=[oneDNN " + cpu::onednn_info().version + " sgemm, ISA "));
  c = run_child(dir, {a, "FLOTILLA_TEST_SGEMM_GFLOPS=onednn=100,openblas=300"});
  CHECK(c.code == 0 && c.onednn() && !c.measured_now() &&
        c.says("onednn 218 vs openblas 210 GFLOP/s (one thread; kept in"));
  // The overrides.
  c = run_child(dir, {a, "FLOTILLA_SGEMM=openblas"});
  CHECK(c.code == 0 && !c.onednn() && c.says("why=[FLOTILLA_SGEMM=openblas]") &&
        c.says("library=[OpenBLAS sgemm"));
  c = run_child(dir, {a, "FLOTILLA_CPU_PATH=avx2"});
  CHECK(c.code == 0 && !c.onednn() && c.says("why=[FLOTILLA_CPU_PATH=avx2 sets OpenBLAS's core]"));

  // OpenBLAS measured faster: chosen; FLOTILLA_SGEMM=onednn still overrides.
  const std::string b = "FLOTILLA_CACHE_DIR=" + dir + "/b";
  c = run_child(dir, {b, "FLOTILLA_TEST_SGEMM_GFLOPS=onednn=150,openblas=210"});
  CHECK(c.code == 0 && !c.onednn() && c.measured_now() &&
        c.says("measured faster on this CPU: openblas 210 vs onednn 150 GFLOP/s"));
  c = run_child(dir, {b, "FLOTILLA_SGEMM=onednn"});
  CHECK(c.code == 0 && c.onednn() && c.says("why=[FLOTILLA_SGEMM=onednn]"));

  // Nowhere to keep the figures: OpenBLAS, whatever the timing, and the reason.
  write_text(dir + "/file", "not a directory");
  c = run_child(dir, {"FLOTILLA_CACHE_DIR=" + dir + "/file/cache",
                      "FLOTILLA_TEST_SGEMM_GFLOPS=onednn=300,openblas=100"});
  CHECK(c.code == 0 && !c.onednn() && c.says("OpenBLAS, as the figures cannot be kept in"));

  // A real timing on this machine: one of them, kept, and read back by the next process.
  const std::string r = "FLOTILLA_CACHE_DIR=" + dir + "/real";
  const Child first = run_child(dir, {r});
  const Child second = run_child(dir, {r});
  CHECK(first.code == 0 && first.measured_now() && first.says("(one thread; measured now, kept in"));
  CHECK(second.code == 0 && !second.measured_now() && second.onednn() == first.onednn());

  return summary("sgemm_choice");
}
