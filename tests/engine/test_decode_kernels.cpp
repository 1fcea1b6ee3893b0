// The CPU kernels a decode step runs on few rows, and `bench-generate` end to end. matmul_forward's
// few-rows path (N <= kMatmulRowsMax: a dot per output that reads the weight once) equals an fp64
// reference for every N from 1 to 8 (with and without a bias, an IC that is not a multiple of 16, an
// odd OC), gives bit-identical results on 1 and 2 threads, and equals what the row gives through the
// sgemm path (N = 9) to fp32 rounding. The worker's `bench-generate --json` on the golden Llama folder
// reports positive prefill and decode tokens/s and its kernel path; bad options exit with 2.
#include <omp.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "check.h"
#include "engine/core/rng.h"
#include "engine/cpu/matmul.h"

using namespace flotilla;

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

void few_rows_matmul() {
  const int IC = 200, OC = 1031;  // IC % 16 != 0, OC odd; OC * IC crosses the parallel threshold
  Rng r(3);
  std::vector<float> x(9 * IC), w(static_cast<size_t>(OC) * IC), b(OC);
  for (float& v : x) v = r.uniform() - 0.5f;
  for (float& v : w) v = r.uniform() - 0.5f;
  for (float& v : b) v = r.uniform() - 0.5f;
  std::vector<float> nine(9 * static_cast<size_t>(OC));
  cpu::matmul_forward(nine.data(), x.data(), w.data(), b.data(), 9, IC, OC);  // the sgemm path
  for (int N = 1; N <= cpu::kMatmulRowsMax; ++N)
    for (const float* bias : {static_cast<const float*>(nullptr), static_cast<const float*>(b.data())}) {
      std::vector<float> one(static_cast<size_t>(N) * OC), two(one.size());
      omp_set_num_threads(1);
      cpu::matmul_forward(one.data(), x.data(), w.data(), bias, N, IC, OC);
      omp_set_num_threads(2);
      cpu::matmul_forward(two.data(), x.data(), w.data(), bias, N, IC, OC);
      CHECK_MSG(one == two, "N %d: 1 and 2 threads differ", N);
      double worst = 0, worst_sgemm = 0;
      for (int n = 0; n < N; ++n)
        for (int o = 0; o < OC; ++o) {
          double want = bias != nullptr ? bias[o] : 0.0;
          for (int i = 0; i < IC; ++i)
            want +=
                static_cast<double>(x[static_cast<size_t>(n) * IC + i]) * w[static_cast<size_t>(o) * IC + i];
          const size_t k = static_cast<size_t>(n) * OC + static_cast<size_t>(o);
          worst = std::max(worst, std::abs(one[k] - want));
          if (bias != nullptr)
            worst_sgemm = std::max(worst_sgemm, static_cast<double>(std::abs(one[k] - nine[k])));
        }
      CHECK_MSG(worst < 1e-4, "N %d: %g from fp64", N, worst);
      CHECK_MSG(worst_sgemm < 1e-4, "N %d: %g from the sgemm path", N, worst_sgemm);
    }
}

void bench_generate_cli() {
  const std::string llama = std::string(FLOTILLA_SOURCE_DIR) + "/tests/engine/golden/hf/llama";
  int code = -1;
  const std::string out = run(
      "bench-generate --model " + llama + " --batch 3 --prompt-len 9 --tokens 5 --threads 1 --json", &code);
  CHECK_MSG(code == 0, "exit %d: %s", code, out.c_str());
  const auto j = nlohmann::json::parse(out.substr(out.find('{')), nullptr, false);
  CHECK_MSG(j.is_object(), "%s", out.c_str());
  if (!j.is_object()) return;
  CHECK(j["batch"] == 3 && j["prompt_len"] == 9 && j["tokens"] == 5 && j["cache"] == true);
  CHECK(j["prefill_tokens_per_s"].get<double>() > 0 && j["decode_tokens_per_s"].get<double>() > 0);
  CHECK(j["backend"].get<std::string>().find("cpu") == 0);
  run("bench-generate --model " + llama + " --tokens 1", &code);
  CHECK(code == 2);
  run("bench-generate --model " + llama + " --dtype fp16", &code);
  CHECK(code == 2);
}

}  // namespace

int main() {
  few_rows_matmul();
  bench_generate_cli();
  return flotilla_test::summary("decode_kernels");
}
