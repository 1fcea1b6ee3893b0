// flotilla-worker sample (interim: replaced by the engine issue's implementation).
#include "engine/cli/commands.h"
#include "engine/core/error.h"

namespace flotilla::cli {

int cmd_sample(const CommandArgs&) { throw Error(ExitCode::kUsage, "'sample' is not in this build yet"); }

}  // namespace flotilla::cli
