// flotilla-worker demo (interim: replaced by the engine issue's implementation).
#include "engine/cli/commands.h"
#include "engine/core/error.h"

namespace flotilla::cli {

int cmd_demo(const CommandArgs&) { throw Error(ExitCode::kUsage, "'demo' is not in this build yet"); }

}  // namespace flotilla::cli
