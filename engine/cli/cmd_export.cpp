// flotilla-worker export (interim: replaced by the engine issue's implementation).
#include "engine/cli/commands.h"
#include "engine/core/error.h"

namespace flotilla::cli {

int cmd_export(const CommandArgs&) { throw Error(ExitCode::kUsage, "'export' is not in this build yet"); }

}  // namespace flotilla::cli
