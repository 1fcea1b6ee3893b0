// flotilla-worker probe [--json]: describe this machine.
#include <cstdio>

#include "engine/cli/args.h"
#include "engine/cli/commands.h"
#include "engine/core/probe.h"

namespace flotilla::cli {

int cmd_probe(const CommandArgs& argv) {
  Args args(argv);
  if (args.flag("--help")) {
    std::printf(
        "Usage: flotilla-worker probe [--json]\n\n"
        "Reports OS, CPU model, cores, SIMD features, memory, GPUs (through the CUDA runtime when\n"
        "built with CUDA and a driver is present) and the versions of CUDA, cuBLAS, NCCL, Gloo and\n"
        "the BLAS in use. --json prints the document described by docs/probe-schema.json.\n");
    return 0;
  }
  const bool json = args.flag("--json");
  args.finish("probe");
  const ProbeResult p = probe_machine();
  const std::string out = json ? probe_to_json(p) + "\n" : probe_to_text(p);
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

}  // namespace flotilla::cli
