// The backend registry: the one place that maps a device name to a concrete Backend.
#pragma once

#include <string>
#include <vector>

#include "engine/backend/backend.h"

namespace flotilla {

// Names of the backends compiled into this build, e.g. {"cpu"} or {"cpu", "cuda"}.
std::vector<std::string> backend_names();

// The process-wide backend for `name` ("cpu", "cuda"), created on first use. Throws
// Error(kConfig) naming the device and the backends this build has when it is unknown.
Backend& get_backend(const std::string& name);

}  // namespace flotilla
