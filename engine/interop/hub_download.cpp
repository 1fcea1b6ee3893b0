// Downloads from the Hub (engine/interop/hub.h). Being written (issue 40, helper "dl").
#include "engine/core/error.h"
#include "engine/interop/hub.h"

namespace flotilla::interop::hub {

Snapshot download(const ModelRef& ref, const DownloadOptions&) {
  throw Error(ExitCode::kInternal, "downloading " + ref.text() + " is not built yet");
}

}  // namespace flotilla::interop::hub
