// flotilla-worker data (interim: replaced by the engine issue's implementation).
#include "engine/cli/commands.h"
#include "engine/core/error.h"

namespace flotilla::cli {

int cmd_data(const CommandArgs&) { throw Error(ExitCode::kUsage, "'data' is not in this build yet"); }

}  // namespace flotilla::cli
