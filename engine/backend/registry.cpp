// Backend registry. Non-obvious decision: this is the only file that knows the concrete backends
// (engine/cpu/cpu_backend.h; the CUDA backend comes from the CUDA plugin, engine/backend/cuda_plugin.h),
// so adding a device means adding one branch here and nothing in the model, the trainer or the
// commands. "cuda" is listed whenever the build has the plugin, but created only where the plugin
// loads and a device answers (a clear error naming what is missing otherwise).
#include "engine/backend/registry.h"

#include <memory>

#include "engine/backend/cuda_plugin.h"
#include "engine/core/error.h"
#include "engine/cpu/cpu_backend.h"

namespace flotilla {

std::vector<std::string> backend_names() {
  if (cuda_plugin::built()) return {"cpu", "cuda"};
  return {"cpu"};
}

Backend& get_backend(const std::string& name) {
  if (name == "cpu") {
    static cpu::CpuBackend backend;
    return backend;
  }
  if (name == "cuda" && cuda_plugin::built()) {
    const cuda_plugin::CudaApi& cuda = cuda_plugin::require("run.device = cuda");
    std::string reason;
    if (!cuda.device_available(&reason)) throw_config("run.device = cuda but no CUDA device: " + reason);
    return cuda.backend();
  }
  std::string known;
  for (const auto& n : backend_names()) known += (known.empty() ? "" : ", ") + n;
  throw_config("device '" + name + "' is not available in this build (backends: " + known +
               "); set run.device to one of them");
}

}  // namespace flotilla
