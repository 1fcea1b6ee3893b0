// flotilla-worker bench-nf4 end to end (the real worker): --json has one row per shape and dtype with
// positive forward/backward GFLOP/s for the nf4 kernels and the dense GEMM, the CPU and the kernel
// paths; the text form prints the ratio lines; a shape whose IN is not a multiple of 64 and an
// unknown --dtype are refused with exit code 2, naming the option.
#include <sys/wait.h>

#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "check.h"
#include "engine/cpu/matmul_bf16.h"

namespace {

std::string run(const std::string& args, int* code) {
  std::string out;
  FILE* p = popen((std::string(FLOTILLA_WORKER_PATH) + " " + args + " 2>&1").c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  *code = WEXITSTATUS(pclose(p));
  return out;
}

}  // namespace

int main() {
  int code = -1;
  const std::string out =
      run("bench-nf4 --shapes 192x128,64x256 --tokens 37 --reps 1 --threads 2 --json", &code);
  CHECK_MSG(code == 0, "exit %d: %s", code, out.c_str());
  const auto j = nlohmann::json::parse(out.substr(out.find('{')));
  const bool bf16 = flotilla::cpu::bf16_matmul_refusal().empty();
  CHECK_MSG(j["results"].size() == (bf16 ? 4u : 2u), "%zu rows", j["results"].size());
  for (const auto& r : j["results"]) {
    CHECK(r["tokens"] == 37);
    for (const char* k :
         {"forward_gflops", "forward_dense_gflops", "backward_gflops", "backward_dense_gflops"})
      CHECK_MSG(r[k].get<double>() > 0, "%s = %g", k, r[k].get<double>());
  }
  CHECK(j["results"][0]["out"] == 192 && j["results"][0]["in"] == 128);
  CHECK(j["paths"].get<std::string>().find("dequantisation") != std::string::npos);
  CHECK(j["cpu"].get<std::string>().find("2 threads") != std::string::npos);

  const std::string text = run("bench-nf4 --shapes 64x128 --tokens 16 --reps 1 --dtype fp32", &code);
  CHECK_MSG(code == 0 && text.find("64x128") != std::string::npos &&
                text.find("ratio") != std::string::npos &&
                text.find("kernels: dequantisation") != std::string::npos,
            "exit %d: %s", code, text.c_str());

  const std::string bad = run("bench-nf4 --shapes 64x100", &code);
  CHECK_MSG(code == 2 && bad.find("--shapes") != std::string::npos, "exit %d: %s", code, bad.c_str());
  const std::string bad_dtype = run("bench-nf4 --dtype fp16", &code);
  CHECK_MSG(code == 2 && bad_dtype.find("--dtype") != std::string::npos, "exit %d: %s", code,
            bad_dtype.c_str());
  return flotilla_test::summary("bench_nf4_cli");
}
