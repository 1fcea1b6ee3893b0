// The memory check before training (see memory_check.h).
//
// Decision: the check uses the planner's own figure (make_plan on the nominal CPU profile, whose
// memory is usable_memory()), so `plan` and `train` can never disagree about whether a run fits;
// the refusal prints the same "memory per device" section `plan` prints.
#include "engine/plan/memory_check.h"

#include <algorithm>
#include <cstdio>

#include "engine/core/error.h"
#include "engine/plan/planner.h"

namespace flotilla {

void check_run_fits_memory(const RunConfig& config, int local_ranks) {
  if (config.run.device != "cpu") return;
  DeviceProfile device = cpu_profile_nominal(config.run.threads);
  if (device.mem_bytes == 0) return;  // nothing could be read: nothing to compare with
  Plan plan = make_plan(config, device);
  // Ranks on this machine share its memory; other nodes' ranks do not count here.
  const uint64_t ranks = static_cast<uint64_t>(std::max(1, local_ranks));
  const uint64_t needed = plan.peak().total() * ranks;
  const uint64_t margin = memory_margin(needed, static_cast<int>(ranks));
  if (needed + margin <= device.mem_bytes) return;
  plan.ranks = static_cast<int>(ranks);
  plan.fits = false;
  char head[256];
  std::snprintf(head, sizeof head,
                "the run needs %.2f GiB of memory on this machine (%llu rank%s) plus a safety margin of ",
                static_cast<double>(needed) / (1ull << 30), static_cast<unsigned long long>(ranks),
                ranks == 1 ? "" : "s");
  throw Error(ExitCode::kOutOfMemory,
              std::string(head) + memory_margin_text(needed, static_cast<int>(ranks)) +
                  " for what the estimate leaves out (libraries, thread stacks, the file pages a memory "
                  "cgroup counts, allocator slack); this process can use " +
                  device.mem_note + ". Nothing was allocated.\n" + plan_memory_text(plan) +
                  "Lower train.micro_batch or the model size, set train.recompute = true, or raise the limit "
                  "(cgroup, ulimit -v). To start anyway (the kernel may kill the run): train "
                  "--ignore-memory-limit, or FLOTILLA_IGNORE_MEMORY_LIMIT=1 in the environment.");
}

}  // namespace flotilla
