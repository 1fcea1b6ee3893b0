// Backend registry. Non-obvious decision: this is the only file that includes a concrete backend
// header (engine/cpu/cpu_backend.h today, engine/cuda/... later), so adding a device means adding
// one branch here and nothing in the model, the trainer or the commands.
#include "engine/backend/registry.h"

#include <memory>

#include "engine/core/error.h"
#include "engine/cpu/cpu_backend.h"

namespace flotilla {

std::vector<std::string> backend_names() { return {"cpu"}; }

Backend& get_backend(const std::string& name) {
  if (name == "cpu") {
    static cpu::CpuBackend backend;
    return backend;
  }
  std::string known;
  for (const auto& n : backend_names()) known += (known.empty() ? "" : ", ") + n;
  throw_config("device '" + name + "' is not available in this build (backends: " + known +
               "); set run.device to one of them");
}

}  // namespace flotilla
