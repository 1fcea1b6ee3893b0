// flotilla-worker: the engine's command line (DESIGN.md §4). All logic lives in engine/cli.
#include "engine/cli/commands.h"

int main(int argc, char** argv) { return flotilla::cli::worker_main(argc, argv); }
