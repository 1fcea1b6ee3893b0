// flotilla-worker tokenizer (interim: replaced by the engine issue's implementation).
#include "engine/cli/commands.h"
#include "engine/core/error.h"

namespace flotilla::cli {

int cmd_tokenizer(const CommandArgs&) { throw Error(ExitCode::kUsage, "'tokenizer' is not in this build yet"); }

}  // namespace flotilla::cli
