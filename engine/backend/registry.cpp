// Backend registry. Non-obvious decision: this is the only file that includes a concrete backend
// header (engine/cpu/cpu_backend.h, engine/cuda/cuda_backend.h), so adding a device means adding
// one branch here and nothing in the model, the trainer or the commands. "cuda" is listed
// whenever the build has it, but created only where a device answers (a clear error otherwise).
#include "engine/backend/registry.h"

#include <memory>

#include "engine/core/error.h"
#include "engine/cpu/cpu_backend.h"
#if defined(FLOTILLA_HAVE_CUDA)
#include "engine/cuda/cuda_backend.h"
#endif

namespace flotilla {

std::vector<std::string> backend_names() {
#if defined(FLOTILLA_HAVE_CUDA)
  return {"cpu", "cuda"};
#else
  return {"cpu"};
#endif
}

Backend& get_backend(const std::string& name) {
  if (name == "cpu") {
    static cpu::CpuBackend backend;
    return backend;
  }
#if defined(FLOTILLA_HAVE_CUDA)
  if (name == "cuda") {
    std::string reason;
    if (!cuda::device_available(&reason)) throw_config("run.device = cuda but no CUDA device: " + reason);
    static cuda::CudaBackend backend;
    return backend;
  }
#endif
  std::string known;
  for (const auto& n : backend_names()) known += (known.empty() ? "" : ", ") + n;
  throw_config("device '" + name + "' is not available in this build (backends: " + known +
               "); set run.device to one of them");
}

}  // namespace flotilla
