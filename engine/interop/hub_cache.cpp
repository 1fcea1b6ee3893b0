// The cache listing (engine/interop/hub.h). Being written (issue 40, helper "cache").
#include "engine/core/error.h"
#include "engine/interop/hub.h"

namespace flotilla::interop::hub {

std::vector<CachedModel> list_cached_models(const std::string& hub_dir) {
  throw Error(ExitCode::kInternal, "listing the Hugging Face cache " + hub_dir + " is not built yet");
}

}  // namespace flotilla::interop::hub
