// libFuzzer target (docs/reliability.md F3, RELIABILITY A8): a Hugging Face config.json (model.init_from
// brings one from anywhere), parsed, mapped to the [model] keys, validated and planned as `plan` and
// the memory preflight of `train` do. Invariants: a refusal is Error(kData) naming the file or
// Error(kConfig); what is accepted plans without throwing; and the sizes it gives are never what
// memory is sized by: the process's peak RSS stays under 1 GiB whatever the layer count or width
// (a million layers took 3 GB before the planner counted parameters in closed form).
#include <sys/resource.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "engine/config/config_validate.h"
#include "engine/core/error.h"
#include "engine/interop/hf_config.h"
#include "engine/interop/hf_model.h"
#include "engine/plan/planner.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::string name = "fuzz/config.json";
  flotilla::RunConfig cfg;
  try {
    const flotilla::interop::HfConfig c = flotilla::interop::parse_hf_config(text, name);
    cfg.model = flotilla::interop::hf_model_section(c);
    cfg.train.micro_batch = 1;
    cfg.train.seq_len = 16;
    cfg.data.synthetic_tokens = 4096;
    flotilla::validate_or_throw(cfg, 1);
  } catch (const flotilla::Error& e) {
    const bool named = std::string(e.what()).find(name) != std::string::npos;
    if (e.code() == flotilla::ExitCode::kData && !named) std::abort();
    if (e.code() != flotilla::ExitCode::kData && e.code() != flotilla::ExitCode::kConfig) std::abort();
    return 0;
  }
  flotilla::DeviceProfile device;
  device.name = "fuzz";
  device.flops_per_s = 1e12;
  device.mem_bytes = uint64_t{16} << 30;
  device.mem_shared_by_ranks = true;
  const flotilla::Plan plan = flotilla::make_plan(cfg, device);
  if (plan.fits && plan.needed_bytes() + plan.margin_bytes() > device.mem_bytes) std::abort();
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  if (usage.ru_maxrss > (1L << 20)) std::abort();  // KiB: 1 GiB
  return 0;
}
