// flotilla-worker probe [--json] [--connect HOST:PORT,...]: describe this machine and, when asked,
// how fast it reaches other hosts (timed TCP connects; the latency matrix of remote/latency.h).
#include <cstdio>
#include <string>

#if defined(FLOTILLA_HAVE_GLOO)
#include <gloo/config.h>
#endif

#include "engine/cli/args.h"
#include "engine/cli/commands.h"
#include "engine/core/error.h"
#include "engine/core/probe.h"

namespace flotilla::cli {

int cmd_probe(const CommandArgs& argv) {
  Args args(argv);
  if (args.flag("--help")) {
    std::printf(
        "Usage: flotilla-worker probe [--json] [--no-peak] [--connect HOST:PORT[,HOST:PORT...]]\n"
        "                             [--connect-count N]\n\n"
        "Reports OS, CPU model, cores, SIMD features, memory, GPUs (through the CUDA runtime when\n"
        "built with CUDA and a driver is present) and the versions of CUDA, cuBLAS, NCCL, Gloo and\n"
        "the BLAS in use, the kernel path the CPU's features select, and (unless --no-peak) the\n"
        "physical ceilings on all cores: register-only fp32 FMA, bf16 dot product where present, and\n"
        "the sgemm (about 1 s; skipped with --connect). A quiet measurement is kept as this\n"
        "machine's peak for `train` (docs/worker.md). --json prints the document described by\n"
        "docs/probe-schema.json.\n\n"
        "--connect times N (--connect-count, default 5, at most 100) TCP connects to each target\n"
        "(2 s timeout each, closed at once) and reports the min and median in ms, or why none\n"
        "completed: refused, timed out, unresolvable, unreachable. A target is a host name, a dotted\n"
        "IPv4 address or a bracketed IPv6 address, then ':' and a port 1-65535. The option may repeat.\n");
    return 0;
  }
  const bool json = args.flag("--json");
  const bool peak = !args.flag("--no-peak");
  std::vector<ConnectTarget> targets;
  for (const auto& list : args.values("--connect"))
    for (auto& t : parse_connect_targets(list, "--connect")) targets.push_back(std::move(t));
  if (static_cast<int>(targets.size()) > kMaxConnectTargets)
    throw_usage("--connect lists more than " + std::to_string(kMaxConnectTargets) + " targets in all");
  const auto count_text = args.value("--connect-count");
  const long long count = count_text ? parse_int(*count_text, "--connect-count") : 5;
  if (count < 1 || count > kMaxConnectCount)
    throw_usage("--connect-count " + std::to_string(count) + " is outside 1-" +
                std::to_string(kMaxConnectCount));
  if (count_text && targets.empty()) throw_usage("--connect-count needs --connect HOST:PORT");
  args.finish("probe");
  // A latency probe (--connect) skips the ceilings: their busy cores would skew the connect times
  // of other probes running on the same machine.
  ProbeResult p = probe_machine(peak && targets.empty());
#if defined(FLOTILLA_HAVE_GLOO)
  // The Gloo this worker is linked with (its CPU collectives; issue 19: it was always "not available").
  p.gloo = std::to_string(GLOO_VERSION_MAJOR) + "." + std::to_string(GLOO_VERSION_MINOR) + "." +
           std::to_string(GLOO_VERSION_PATCH);
#endif
  for (const auto& t : targets) p.connect.push_back(probe_connect(t, static_cast<int>(count)));
  const std::string out = json ? probe_to_json(p) + "\n" : probe_to_text(p);
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

}  // namespace flotilla::cli
