// flotilla-worker bench-attention: the CPU attention kernels (engine/cpu/attention.h), the
// flash-style ones against the ones before them (cpu::reference), in the same run on the same
// threads and inputs.
//
// Non-obvious decisions: GFLOP/s count the causal FLOPs only (forward 4 HD per visible (query, key)
// pair: S = Q K^T and O = P V; backward 10 HD: S and dP again, dQ, dK, dV), the work a kernel must
// do whatever it wastes on masked entries, so old and new are compared on the same figure. Old and
// new alternate, best of --reps each, so another process's load favours neither. Scratch is the
// largest per-thread request each kernel made (attention_scratch_high_water_bytes), measured.
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "engine/cli/ab_timing.h"
#include "engine/cli/args.h"
#include "engine/cli/commands.h"
#include "engine/core/cpu_load.h"
#include "engine/core/error.h"
#include "engine/cpu/attention.h"
#include "engine/cpu/blas.h"
#include "engine/cpu/cpu_features.h"
#include "engine/cpu/matmul.h"

namespace flotilla::cli {
namespace {

const char* kHelp =
    "Usage: flotilla-worker bench-attention [--seq T,...] [--heads NH/NKV] [--head-dim HD] [--batch B]\n"
    "                                       [--threads N] [--reps R]\n\n"
    "Causal attention on the CPU, forward and backward: the flash-style kernels (key tiles, online\n"
    "softmax, O(tile) scratch) against the kernels before them (a 64-query block against all its keys,\n"
    "2 x 64 x T floats of scratch per thread), in the same run: ms, GFLOP/s of the causal FLOPs, the\n"
    "ratio old / new (by wall time, and by process CPU time: steadier on a shared machine), and the scratch "
    "per thread each used; the CPU model and the sgemm.\n"
    "Defaults: --seq 256,1024,4096,8192 --heads 9/3 (SmolLM2-135M) --head-dim 64 --batch 1 --threads 0\n"
    "(all cores) --reps 3 (best of, old and new alternating).\n";

std::vector<int> parse_list(const std::string& s) {
  std::vector<int> out;
  for (size_t at = 0; at <= s.size();) {
    const size_t comma = std::min(s.find(',', at), s.size());
    try {
      out.push_back(std::stoi(s.substr(at, comma - at)));
    } catch (...) {
      throw_usage("bench-attention: --seq: '" + s.substr(at, comma - at) + "' is not a number");
    }
    if (out.back() < 1) throw_usage("bench-attention: --seq values must be >= 1");
    at = comma + 1;
  }
  return out;
}

std::string kib(size_t bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f KiB", static_cast<double>(bytes) / 1024.0);
  return b;
}

}  // namespace

int cmd_bench_attention(const CommandArgs& argv) {
  Args args(argv);
  if (args.flag("--help")) {
    std::fputs(kHelp, stdout);
    return 0;
  }
  const std::vector<int> seqs = parse_list(args.value_or("--seq", "256,1024,4096,8192"));
  const std::string heads = args.value_or("--heads", "9/3");
  const int HD = static_cast<int>(args.int_or("--head-dim", 64));
  const int B = static_cast<int>(args.int_or("--batch", 1));
  const int threads = static_cast<int>(args.int_or("--threads", 0));
  const int reps = static_cast<int>(args.int_or("--reps", 3));
  args.finish("bench-attention");
  int NH = 0, NKV = 0;
  const size_t slash = heads.find('/');
  try {
    NH = std::stoi(heads.substr(0, slash));
    NKV = slash == std::string::npos ? NH : std::stoi(heads.substr(slash + 1));
  } catch (...) {
    throw_usage("bench-attention: --heads " + heads + " is not NH/NKV (e.g. 9/3)");
  }
  if (NH < 1 || NKV < 1 || NH % NKV != 0)
    throw_usage("bench-attention: --heads " + heads + ": NKV must divide NH, both >= 1");
  if (HD < 1 || B < 1 || reps < 1 || threads < 0)
    throw_usage("bench-attention: --head-dim, --batch and --reps must be >= 1, --threads >= 0");

  omp_set_num_threads(threads > 0 ? threads : omp_get_num_procs());
  const int nt = omp_get_max_threads();
  cpu::blas_single_thread();
  const cpu::CpuFeatures& f = cpu::cpu_features();
  std::printf("cpu: %s (%s), %d %s\nkernels: sgemm %s; query block %d (%d from T = %d), key tile %d\n",
              f.brand.c_str(), cpu::describe_features(f).c_str(), nt, nt == 1 ? "thread" : "threads",
              cpu::blas_info().sgemm_library.c_str(), cpu::kAttentionQueryBlock,
              2 * cpu::kAttentionQueryBlock, cpu::kAttentionLongT, cpu::kAttentionKeyTile);
  std::fflush(stdout);
  const LoadWindow load;
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (const int T : seqs) {
    const size_t ld = static_cast<size_t>(NH + 2 * NKV) * HD, ldo = static_cast<size_t>(NH) * HD;
    std::vector<float> qkv(static_cast<size_t>(B) * T * ld), dout(static_cast<size_t>(B) * T * ldo);
    for (auto& x : qkv) x = u(rng);
    for (auto& x : dout) x = u(rng);
    std::vector<float> out(dout.size()), lse(static_cast<size_t>(B) * NH * T), dqkv(qkv.size());
    std::vector<float> out_old(out.size()), lse_old(lse.size());
    auto fwd_new = [&] {
      cpu::attention_forward(out.data(), lse.data(), qkv.data(), nullptr, B, T, NH, NKV, HD);
    };
    auto fwd_old = [&] {
      cpu::reference::attention_forward(out_old.data(), lse_old.data(), qkv.data(), nullptr, B, T, NH, NKV,
                                        HD);
    };
    auto bwd_new = [&] {
      cpu::attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), nullptr, B, T, NH,
                              NKV, HD);
    };
    auto bwd_old = [&] {
      cpu::reference::attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(),
                                         nullptr, B, T, NH, NKV, HD);
    };
    cpu::reset_attention_scratch_high_water();
    fwd_old();
    bwd_old();
    const size_t scratch_old = cpu::attention_scratch_high_water_bytes();
    cpu::reset_attention_scratch_high_water();
    fwd_new();
    bwd_new();
    const size_t scratch_new = cpu::attention_scratch_high_water_bytes();
    const Best fw = best_seconds(reps, fwd_old, fwd_new);
    const Best bw = best_seconds(reps, bwd_old, bwd_new);
    const double pairs = static_cast<double>(B) * NH * (static_cast<double>(T) * (T + 1) / 2.0);
    const double ff = 4.0 * HD * pairs, bf = 10.0 * HD * pairs;
    std::printf(
        "T=%5d B=%d heads %d/%d HD=%d: forward old %8.2f ms (CPU %8.2f) %6.1f GFLOP/s, new %8.2f ms (CPU "
        "%8.2f) "
        "%6.1f GFLOP/s, x%.2f (CPU time x%.2f) | backward old %8.2f ms (CPU %8.2f) %6.1f GFLOP/s, new %8.2f "
        "ms "
        "(CPU %8.2f) %6.1f GFLOP/s, x%.2f (CPU time x%.2f) | scratch/thread old %s, new %s\n",
        T, B, NH, NKV, HD, fw.a * 1e3, fw.cpu_a * 1e3, ff / fw.a / 1e9, fw.b * 1e3, fw.cpu_b * 1e3,
        ff / fw.b / 1e9, fw.a / fw.b, fw.cpu_a / fw.cpu_b, bw.a * 1e3, bw.cpu_a * 1e3, bf / bw.a / 1e9,
        bw.b * 1e3, bw.cpu_b * 1e3, bf / bw.b / 1e9, bw.a / bw.b, bw.cpu_a / bw.cpu_b,
        kib(scratch_old).c_str(), kib(scratch_new).c_str());
    std::fflush(stdout);
  }
  const double other = load.other_load();
  std::printf("other processes used %.0f%% of the CPUs meanwhile%s\n", other * 100,
              other > 0.10
                  ? ": the figures (each the best of --reps) are noisy; rerun when the machine is idle"
                  : "");
  return 0;
}

}  // namespace flotilla::cli
