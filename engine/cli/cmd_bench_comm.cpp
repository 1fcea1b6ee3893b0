// flotilla-worker bench-comm: collective bandwidth in nccl-tests' terms, against a memory copy
// measured in the same run.
//
// Non-obvious decisions: "bytes" is the whole buffer as nccl-tests counts it (all_reduce and
// broadcast: the buffer; reduce_scatter: the input, all_gather: the output, each n chunks);
// algbw = bytes / time and busbw = algbw x 2(n-1)/n (all_reduce), x (n-1)/n (reduce_scatter,
// all_gather), x 1 (broadcast), so a number is comparable across world sizes and with NCCL's own
// tool. The time is the slowest rank's mean over the iterations. The baseline is a single-thread
// memcpy (cudaMemcpy device to device for NCCL) of the same sizes on rank 0 while the others wait,
// so "busbw / memcpy" says how close the transport gets to moving memory on this machine.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/backend/cuda_plugin.h"
#include "engine/cli/args.h"
#include "engine/cli/commands.h"
#include "engine/comm/process_group.h"
#include "engine/comm/rendezvous.h"
#include "engine/core/error.h"
#include "engine/plan/calibration.h"

namespace flotilla::cli {
namespace {

using comm::Millis;
using Clock = std::chrono::steady_clock;

const char* kHelp =
    "Usage: flotilla-worker bench-comm [--backend gloo|nccl|auto] [--bytes MIN..MAX | --bytes SIZE]\n"
    "                                  [--factor F] [--ops LIST] [--iters N] [--timeout S] [--json]\n\n"
    "Measures all_reduce, reduce_scatter, all_gather and broadcast (float32, sum) over message sizes\n"
    "from 1 KiB to 256 MiB (powers of --factor, default 4) among the ranks of a run, and a plain\n"
    "memory copy of the same sizes on rank 0. Run it under `flotilla-worker launch` or with RANK,\n"
    "WORLD_SIZE, MASTER_ADDR and MASTER_PORT set in every rank. Rank 0 prints the table.\n\n"
    "  bytes   the whole buffer as nccl-tests counts it (reduce_scatter: input, all_gather: output)\n"
    "  time    mean per operation over the iterations, slowest rank\n"
    "  algbw   bytes / time (GB/s = 1e9 bytes/s)\n"
    "  busbw   algbw x 2(n-1)/n for all_reduce, x (n-1)/n for reduce_scatter and all_gather, x 1 for\n"
    "          broadcast: the bandwidth each link sustained, comparable across world sizes\n"
    "Sizes take K, M, G suffixes (powers of 1024). --iters caps the iterations per size (default 20;\n"
    "large sizes use fewer, at least 3). --ops is a comma list (default: all four).\n";

std::string size_text(size_t bytes) {
  char buf[32];
  if (bytes >= (size_t{1} << 30) && bytes % (size_t{1} << 30) == 0) {
    std::snprintf(buf, sizeof(buf), "%zu GiB", bytes >> 30);
  } else if (bytes >= (size_t{1} << 20) && bytes % (size_t{1} << 20) == 0) {
    std::snprintf(buf, sizeof(buf), "%zu MiB", bytes >> 20);
  } else if (bytes >= 1024 && bytes % 1024 == 0) {
    std::snprintf(buf, sizeof(buf), "%zu KiB", bytes >> 10);
  } else {
    std::snprintf(buf, sizeof(buf), "%zu B", bytes);
  }
  return buf;
}

// nccl-tests' bus bandwidth factor.
double bus_factor(const std::string& op, int n) {
  if (op == "all_reduce") return 2.0 * (n - 1) / n;
  if (op == "reduce_scatter" || op == "all_gather") return static_cast<double>(n - 1) / n;
  return 1.0;
}

struct Row {
  std::string op;
  size_t bytes = 0;
  int iters = 0;
  double time_s = 0;
  double algbw = 0, busbw = 0;  // GB/s
};

// Device or host buffers of the backend.
class Buffers {
 public:
  Buffers(bool device, size_t a_bytes, size_t b_bytes) : device_(device) {
    if (device_) {
      cuda_ =
          &cuda_plugin::require("bench-comm --backend nccl");  // device buffers: engine/cuda/plugin_api.cpp
      a_ = cuda_->device_alloc(a_bytes);
      b_ = a_ != nullptr ? cuda_->device_alloc(b_bytes) : nullptr;
      if (b_ == nullptr) {
        if (a_ != nullptr) cuda_->device_free(a_);
        throw Error(ExitCode::kOutOfMemory, "bench-comm: cudaMalloc of " + size_text(a_bytes) + " failed");
      }
    } else {
      host_a_.assign(a_bytes / sizeof(float), 0.0f);  // zeros: repeated sums stay finite
      host_b_.assign(b_bytes / sizeof(float), 0.0f);
      a_ = host_a_.data();
      b_ = host_b_.data();
    }
  }
  ~Buffers() {
    if (device_) {
      cuda_->device_free(a_);
      cuda_->device_free(b_);
    }
  }
  float* a() { return static_cast<float*>(a_); }
  float* b() { return static_cast<float*>(b_); }
  // One copy of `bytes` from b to a, completed.
  void copy(size_t bytes) {
    if (device_) {
      cuda_->device_copy(a_, b_, bytes);
      return;
    }
    std::memcpy(a_, b_, bytes);
  }

 private:
  bool device_;
  const cuda_plugin::CudaApi* cuda_ = nullptr;
  void* a_ = nullptr;
  void* b_ = nullptr;
  std::vector<float> host_a_, host_b_;
};

// Runs `op` of `bytes` `iters` times after a warm-up; returns the slowest rank's mean seconds.
double time_op(comm::ProcessGroup& pg, Buffers& buf, const std::string& op, size_t bytes, int iters) {
  const int n = pg.size();
  const size_t count = bytes / sizeof(float);
  const size_t chunk = count / static_cast<size_t>(n);
  auto once = [&] {
    if (op == "all_reduce") {
      pg.all_reduce(buf.a(), count);
    } else if (op == "reduce_scatter") {
      pg.reduce_scatter(buf.a(), buf.b(), chunk);
    } else if (op == "all_gather") {
      pg.all_gather(buf.b(), buf.a(), chunk);
    } else {
      pg.broadcast(buf.a(), count, 0);
    }
  };
  once();
  pg.barrier();
  const auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i) once();
  const double mine = std::chrono::duration<double>(Clock::now() - t0).count() / iters;
  // Slowest rank: gather every rank's time through a sum of one-hot vectors.
  std::vector<double> all(static_cast<size_t>(n), 0.0);
  all[static_cast<size_t>(pg.rank())] = mine;
  pg.all_reduce(all.data(), all.size());
  return *std::max_element(all.begin(), all.end());
}

}  // namespace

int cmd_bench_comm(const CommandArgs& argv) {
  Args args(argv);
  if (args.flag("--help")) {
    std::fputs(kHelp, stdout);
    return 0;
  }
  const std::string backend_arg = args.value_or("--backend", "gloo");
  const std::string bytes_arg = args.value_or("--bytes", "1K..256M");
  const long long factor = args.int_or("--factor", 4);
  const std::string ops_arg = args.value_or("--ops", "all_reduce,reduce_scatter,all_gather,broadcast");
  const int max_iters = static_cast<int>(args.int_or("--iters", 20));
  const double timeout_s = args.double_or("--timeout", 300);
  const bool json = args.flag("--json");
  args.finish("bench-comm");

  size_t lo = 0, hi = 0;
  const size_t dots = bytes_arg.find("..");
  if (dots == std::string::npos) {
    lo = hi = parse_byte_size(bytes_arg, "bench-comm: --bytes");
  } else {
    lo = parse_byte_size(bytes_arg.substr(0, dots), "bench-comm: --bytes");
    hi = parse_byte_size(bytes_arg.substr(dots + 2), "bench-comm: --bytes");
  }
  if (lo > hi) throw_usage("bench-comm: --bytes " + bytes_arg + ": the first size is larger than the second");
  if (factor < 2) throw_usage("bench-comm: --factor must be at least 2");
  if (max_iters < 1) throw_usage("bench-comm: --iters must be at least 1");
  std::vector<std::string> ops;
  for (size_t pos = 0; pos <= ops_arg.size();) {
    const size_t comma = std::min(ops_arg.find(',', pos), ops_arg.size());
    const std::string op = ops_arg.substr(pos, comma - pos);
    if (op != "all_reduce" && op != "reduce_scatter" && op != "all_gather" && op != "broadcast") {
      throw_usage("bench-comm: --ops: unknown operation '" + op +
                  "' (use all_reduce, reduce_scatter, all_gather, broadcast)");
    }
    ops.push_back(op);
    pos = comma + 1;
  }
  std::vector<size_t> sizes;
  for (size_t s = lo; s <= hi; s *= static_cast<size_t>(factor)) {
    sizes.push_back(s);
    if (s > hi / static_cast<size_t>(factor)) break;
  }
  if (sizes.back() != hi) sizes.push_back(hi);

  const comm::DistEnv env = comm::dist_env_from_environment();
  if (env.world_size < 2) {
    throw_usage(
        "bench-comm measures communication between ranks: run it with several, e.g. "
        "`flotilla-worker launch --nproc-per-node 2 -- bench-comm`, or start each rank with RANK, "
        "WORLD_SIZE, "
        "MASTER_ADDR and MASTER_PORT set");
  }
  const auto timeout = Millis(static_cast<long long>(timeout_s * 1000));
  auto pg = comm::init_process_group(backend_arg, env, timeout);
  const std::string backend = pg->backend();
  const bool device = backend == "nccl";
  const int n = pg->size();
  const bool root = pg->rank() == 0;

  // a: the collective buffer (reduce_scatter input, all_gather output); b: the per-rank chunk, and the
  // memcpy source, hence as large as a.
  Buffers buf(device, hi, hi);
  // Round each size down to whole floats per rank so every op moves exactly `bytes`.
  auto usable = [n](size_t bytes) {
    const size_t unit = sizeof(float) * static_cast<size_t>(n);
    return std::max(unit, bytes / unit * unit);
  };
  auto iters_for = [max_iters](size_t bytes) {
    const size_t budget = size_t{512} << 20;  // about 512 MiB moved per (op, size)
    return static_cast<int>(
        std::clamp<size_t>(budget / std::max<size_t>(bytes, 1), 3, static_cast<size_t>(max_iters)));
  };

  std::vector<Row> rows;
  for (const auto& op : ops) {
    for (size_t s : sizes) {
      Row r;
      r.op = op;
      r.bytes = usable(std::min(s, hi));
      r.iters = iters_for(r.bytes);
      r.time_s = time_op(*pg, buf, op, r.bytes, r.iters);
      r.algbw = static_cast<double>(r.bytes) / r.time_s / 1e9;
      r.busbw = r.algbw * bus_factor(op, n);
      rows.push_back(r);
    }
  }
  // The baseline: rank 0 copies alone while the others wait.
  std::vector<Row> copies;
  for (size_t s : sizes) {
    Row r;
    r.op = "memcpy";
    r.bytes = usable(std::min(s, hi));
    r.iters = std::max(iters_for(r.bytes), 5);
    if (root) {
      buf.copy(r.bytes);
      const auto t0 = Clock::now();
      for (int i = 0; i < r.iters; ++i) buf.copy(r.bytes);
      r.time_s = std::chrono::duration<double>(Clock::now() - t0).count() / r.iters;
      r.algbw = r.busbw = static_cast<double>(r.bytes) / r.time_s / 1e9;
    }
    copies.push_back(r);
  }
  pg->barrier();
  if (!root) return 0;

  // Ratios at 64 MiB (or the size nearest to it).
  const size_t ref = usable(std::min<size_t>(size_t{64} << 20, hi));
  auto nearest = [ref](const std::vector<Row>& v, const std::string& op) -> const Row* {
    const Row* best = nullptr;
    for (const auto& r : v) {
      if (r.op != op) continue;
      if (!best || std::llabs(static_cast<long long>(r.bytes) - static_cast<long long>(ref)) <
                       std::llabs(static_cast<long long>(best->bytes) - static_cast<long long>(ref))) {
        best = &r;
      }
    }
    return best;
  };
  const Row* copy_ref = nearest(copies, "memcpy");

  // The planner's link figures (engine/plan/calibration.h): latency + bandwidth fitted to the
  // all_reduce rows, kept for this backend and world size.
  std::vector<LinkSample> samples;
  for (const auto& r : rows)
    if (r.op == "all_reduce") samples.push_back({static_cast<double>(r.bytes), r.time_s});
  const LinkFigures link = fit_link_figures(samples, n);
  const std::string link_path = link_cache_path();
  const bool link_kept = store_link_figures(link_path, backend, n, link);

  if (json) {
    nlohmann::json out;
    out["backend"] = backend;
    out["world_size"] = n;
    out["local_world_size"] = env.local_world_size;
    out["dtype"] = "float32";
    auto row_json = [](const Row& r) {
      return nlohmann::json{{"op", r.op},
                            {"bytes", r.bytes},
                            {"iters", r.iters},
                            {"time_us", r.time_s * 1e6},
                            {"algbw_gbps", r.algbw},
                            {"busbw_gbps", r.busbw}};
    };
    out["results"] = nlohmann::json::array();
    for (const auto& r : rows) out["results"].push_back(row_json(r));
    out["memcpy"] = nlohmann::json::array();
    for (const auto& r : copies)
      out["memcpy"].push_back({{"bytes", r.bytes}, {"time_us", r.time_s * 1e6}, {"gbps", r.algbw}});
    nlohmann::json ratio;
    ratio["bytes"] = copy_ref ? copy_ref->bytes : 0;
    ratio["memcpy_gbps"] = copy_ref ? copy_ref->algbw : 0;
    for (const auto& op : ops) {
      const Row* r = nearest(rows, op);
      if (r && copy_ref)
        ratio[op] = {{"busbw_gbps", r->busbw}, {"ratio_to_memcpy", r->busbw / copy_ref->algbw}};
    }
    out["at_64MiB"] = ratio;
    out["planner_link"] = {{"bytes_per_s", link.bytes_per_s},
                           {"latency_s", link.latency_s},
                           {"kept_in", link_kept ? link_path : ""}};
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }

  std::printf(
      "bench-comm: backend %s, %d ranks (%d on this host), float32 sum; time = mean per op, slowest rank\n",
      backend.c_str(), n, env.local_world_size);
  for (const auto& op : ops) {
    std::printf("\n%s  (busbw = algbw x %.3g)\n", op.c_str(), bus_factor(op, n));
    std::printf("%12s %6s %12s %12s %12s\n", "bytes", "iters", "time (us)", "algbw GB/s", "busbw GB/s");
    for (const auto& r : rows) {
      if (r.op != op) continue;
      std::printf("%12s %6d %12.1f %12.3f %12.3f\n", size_text(r.bytes).c_str(), r.iters, r.time_s * 1e6,
                  r.algbw, r.busbw);
    }
  }
  std::printf("\nmemcpy on rank 0 (%s)\n", device ? "cudaMemcpy device to device" : "one thread");
  std::printf("%12s %6s %12s %12s\n", "bytes", "iters", "time (us)", "GB/s");
  for (const auto& r : copies) {
    std::printf("%12s %6d %12.1f %12.3f\n", size_text(r.bytes).c_str(), r.iters, r.time_s * 1e6, r.algbw);
  }
  if (copy_ref) {
    std::printf("\nat %s: memcpy %.3f GB/s", size_text(copy_ref->bytes).c_str(), copy_ref->algbw);
    for (const auto& op : ops) {
      const Row* r = nearest(rows, op);
      if (r)
        std::printf("; %s busbw %.3f GB/s = %.2f x memcpy", op.c_str(), r->busbw, r->busbw / copy_ref->algbw);
    }
    std::printf("\n");
  }
  if (link_kept)
    std::printf("planner link figures: %.1f us per all_reduce + %.3f GB/s bus bandwidth, kept in %s\n",
                link.latency_s * 1e6, link.bytes_per_s / 1e9, link_path.c_str());
  return 0;
}

}  // namespace flotilla::cli
