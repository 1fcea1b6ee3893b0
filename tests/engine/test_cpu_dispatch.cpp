// The kernel-path choice from given feature sets (a pure function), the MFU rules and the peak
// cache: an unknown CPU model with AVX-512 gets the AVX-512 path (issue 17: OpenBLAS's table sent a
// Xeon family 6 model 207 to its SSE3 kernel), features the OS has not enabled are not used, MFU
// never exceeds 100% and has no ceiling for bf16 without bf16 instructions, and only quiet
// measurements are kept in the cache, under the CPU model and thread count.
#include <cmath>
#include <filesystem>
#include <fstream>

#include "check.h"
#include "engine/cpu/blas.h"
#include "engine/cpu/cpu_features.h"
#include "engine/cpu/peak.h"
#include "engine/cpu/peak_cache.h"
#include "worker_run.h"

using namespace flotilla;
using namespace flotilla::cpu;

namespace {

CpuFeatures avx2_cpu() {
  CpuFeatures f;
  f.avx2 = f.fma = f.os_avx = true;
  return f;
}
CpuFeatures avx512_cpu() {
  CpuFeatures f = avx2_cpu();
  f.avx512f = f.avx512dq = f.avx512cd = f.avx512bw = f.avx512vl = f.os_avx512 = true;
  return f;
}
CpuFeatures spr_cpu() {  // Sapphire Rapids-like: AVX-512, AVX512_BF16, AMX, an unknown model number
  CpuFeatures f = avx512_cpu();
  f.vendor = "GenuineIntel";
  f.family = 6;
  f.model = 207;
  f.avx512_bf16 = f.amx_tile = f.amx_bf16 = f.os_amx = f.amx_permitted = true;
  return f;
}

void test_choice() {
  const KernelChoice spr = choose_kernel_path(spr_cpu());
  CHECK(spr.widest == KernelPath::kAmxBf16);
  CHECK(spr.fp32 == KernelPath::kAvx512);
  CHECK(spr.bf16 == KernelPath::kAmxBf16);
  CHECK(std::string(spr.openblas_core) == "Cooperlake");
  CHECK(spr.blas_path == KernelPath::kAvx512);

  // The model number never matters: any family/model with the same features, same choice.
  for (int model : {0, 85, 143, 207, 255}) {
    CpuFeatures f = spr_cpu();
    f.model = model;
    f.vendor = model % 2 ? "AuthenticAMD" : "GenuineIntel";
    f.family = model % 2 ? 26 : 6;
    CHECK(std::string(choose_kernel_path(f).openblas_core) == "Cooperlake");
  }
  // Zen 4/5: AVX-512 + BF16, no AMX.
  CpuFeatures zen = avx512_cpu();
  zen.avx512_bf16 = true;
  CHECK(choose_kernel_path(zen).widest == KernelPath::kAvx512Bf16);
  CHECK(std::string(choose_kernel_path(zen).openblas_core) == "Cooperlake");
  CHECK(std::string(choose_kernel_path(avx512_cpu()).openblas_core) == "SkylakeX");
  CHECK(choose_kernel_path(avx512_cpu()).bf16 == KernelPath::kSse);  // no bf16 path
  CHECK(std::string(choose_kernel_path(avx2_cpu()).openblas_core) == "Haswell");
  CHECK(choose_kernel_path(avx2_cpu()).fp32 == KernelPath::kAvx2);
  // Only a CPU without AVX2+FMA gets the SSE kernel.
  CpuFeatures old = avx2_cpu();
  old.fma = false;
  CHECK(std::string(choose_kernel_path(old).openblas_core) == "Prescott");
  CHECK(std::string(choose_kernel_path(CpuFeatures{}).openblas_core) == "Prescott");

  // OS support decides: AVX-512 registers not saved by the OS (XCR0) -> AVX2; AMX without the
  // kernel's permission -> not AMX.
  CpuFeatures no_os512 = spr_cpu();
  no_os512.os_avx512 = false;
  CHECK(choose_kernel_path(no_os512).widest == KernelPath::kAvx2);
  CHECK(std::string(choose_kernel_path(no_os512).openblas_core) == "Haswell");
  CpuFeatures no_perm = spr_cpu();
  no_perm.amx_permitted = false;
  CHECK(choose_kernel_path(no_perm).widest == KernelPath::kAvx512Bf16);
  CpuFeatures half512 = avx512_cpu();  // AVX512F without BW/VL (Knights Landing) is not the path
  half512.avx512bw = half512.avx512vl = false;
  CHECK(choose_kernel_path(half512).widest == KernelPath::kAvx2);

  // A cap narrows, never widens.
  CHECK(std::string(choose_kernel_path(spr_cpu(), KernelPath::kAvx2).openblas_core) == "Haswell");
  CHECK(choose_kernel_path(spr_cpu(), KernelPath::kAvx512).bf16 == KernelPath::kSse);
  CHECK(choose_kernel_path(avx2_cpu(), KernelPath::kAmxBf16).widest == KernelPath::kAvx2);

  // Names round-trip; OpenBLAS core names map to their widths.
  for (int p = 0; p < 5; ++p) {
    KernelPath back;
    CHECK(parse_kernel_path(kernel_path_name(static_cast<KernelPath>(p)), &back));
    CHECK(static_cast<int>(back) == p);
  }
  KernelPath unused;
  CHECK(!parse_kernel_path("avx9", &unused));
  CHECK(path_of_openblas_core("Prescott") == KernelPath::kSse);
  CHECK(path_of_openblas_core("Haswell") == KernelPath::kAvx2);
  CHECK(path_of_openblas_core("Zen") == KernelPath::kAvx2);
  CHECK(path_of_openblas_core("SkylakeX") == KernelPath::kAvx512);
  CHECK(path_of_openblas_core("COOPERLAKE") == KernelPath::kAvx512);
}

void test_mfu_rules() {
  CHECK_NEAR(mfu_ratio(50e9, 200e9), 0.25, 1e-12);
  CHECK(std::isnan(mfu_ratio(300e9, 200e9)));   // a ceiling measured low: not reported, never > 100%
  CHECK(mfu_ratio(50e9, 0) == 0);               // unknown ceiling: no MFU, not infinity
  CHECK(mfu_ratio(0, 100e9) == 0);
  CpuPeak p;
  p.fp32_fma_gflops = 400;
  CHECK_NEAR(ceiling_flops(p, "fp32"), 400e9, 1);
  CHECK(ceiling_flops(p, "bf16") == 0);  // no bf16 instructions: no bf16 ceiling
  p.bf16_dot_gflops = 900;
  CHECK_NEAR(ceiling_flops(p, "bf16"), 900e9, 1);
  p.other_load = kQuietLoad;
  CHECK(p.quiet());
  p.other_load = 0.5;
  CHECK(!p.quiet());
}

void test_cache() {
  const std::string dir = flotilla_test::fresh_dir("peak-cache");
  const std::string path = dir + "/sub/cpu-peaks.json";
  CpuPeak quiet;
  quiet.cpu_model = "Test CPU 9000";
  quiet.threads = 2;
  quiet.fp32_isa = "avx512";
  quiet.fp32_fma_gflops = 480;
  quiet.bf16_isa = "avx512_bf16";
  quiet.bf16_dot_gflops = 960;
  quiet.other_load = 0.02;
  CHECK(!load_cached_peak(path, "Test CPU 9000", 2));
  CHECK(store_peak(path, quiet));  // creates the folder
  CpuPeak loaded = quiet;
  loaded.threads = 1;
  loaded.fp32_fma_gflops = 90;
  loaded.other_load = 0.6;
  CHECK(!store_peak(path, loaded));  // a loaded measurement is never kept
  const auto got = load_cached_peak(path, "Test CPU 9000", 2);
  CHECK(got && got->fp32_fma_gflops == 480 && got->bf16_dot_gflops == 960 && got->fp32_isa == "avx512");
  CHECK(!load_cached_peak(path, "Test CPU 9000", 1));  // keyed by thread count
  CHECK(!load_cached_peak(path, "Other CPU", 2));      // and by CPU model
  // A second entry keeps the first.
  CpuPeak one = quiet;
  one.threads = 1;
  one.fp32_fma_gflops = 240;
  CHECK(store_peak(path, one));
  CHECK(load_cached_peak(path, "Test CPU 9000", 2) && load_cached_peak(path, "Test CPU 9000", 1));
  // A ceiling does not fall on the same CPU: a lower trusted reading keeps the higher figures (a
  // host sharing the cores reads low), a higher one raises them; a contended one is never kept.
  CpuPeak lower = quiet;
  lower.fp32_fma_gflops = 240;
  lower.bf16_dot_gflops = 990;
  CHECK(store_peak(path, lower));
  auto merged = load_cached_peak(path, "Test CPU 9000", 2);
  CHECK(merged && merged->fp32_fma_gflops == 480 && merged->bf16_dot_gflops == 990);
  CpuPeak contended = quiet;
  contended.fp32_fma_gflops = 900;
  contended.contended = true;
  CHECK(!contended.trusted() && contended.quiet());
  CHECK(!store_peak(path, contended));
  merged = load_cached_peak(path, "Test CPU 9000", 2);
  CHECK(merged && merged->fp32_fma_gflops == 480);
  // The key names this machine's cpuid family and model: another core sold under the same brand
  // ("AMD EPYC") does not share its figures.
  CHECK(peak_cache_key("Test CPU 9000", 2).find(" | family " + std::to_string(cpu_features().family) +
                                                " model " + std::to_string(cpu_features().model) +
                                                " | 2 threads") != std::string::npos);
  // An entry edited to look loaded is not trusted; a damaged file is ignored (remeasured).
  flotilla_test::write_text(dir + "/loaded.json",
                            R"({"Test CPU 9000 | 2 threads": {"fp32_isa": "avx512", "fp32_fma_gflops": 480,)"
                            R"( "other_load": 0.7}})");
  CHECK(!load_cached_peak(dir + "/loaded.json", "Test CPU 9000", 2));
  flotilla_test::write_text(dir + "/damaged.json", "{\"Test CPU 9000 | 2 threads\": {\"fp32_");
  CHECK(!load_cached_peak(dir + "/damaged.json", "Test CPU 9000", 2));
  CHECK(store_peak(dir + "/damaged.json", quiet));  // and rewritten whole
  CHECK(load_cached_peak(dir + "/damaged.json", "Test CPU 9000", 2));

  // The location: FLOTILLA_CACHE_DIR, else XDG_CACHE_HOME/flotilla, else ~/.cache/flotilla.
  setenv("FLOTILLA_CACHE_DIR", dir.c_str(), 1);
  CHECK(peak_cache_path() == dir + "/cpu-peaks.json");
  unsetenv("FLOTILLA_CACHE_DIR");
  setenv("XDG_CACHE_HOME", "/x/cache", 1);
  CHECK(peak_cache_path() == "/x/cache/flotilla/cpu-peaks.json");
  unsetenv("XDG_CACHE_HOME");
  setenv("HOME", "/home/u", 1);
  CHECK(peak_cache_path() == "/home/u/.cache/flotilla/cpu-peaks.json");
}

}  // namespace

int main() {
  test_choice();
  test_mfu_rules();
  test_cache();
  // This machine: whatever its model number, the path is never SSE when it has AVX2+FMA.
  const CpuFeatures& here = cpu_features();
  if (here.avx2 && here.fma && here.os_avx) CHECK(choose_kernel_path(here).widest != KernelPath::kSse);
  return flotilla_test::summary("cpu_dispatch");
}
