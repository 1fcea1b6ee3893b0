// flotilla: the desktop app, plus a headless command line.
//
// Decision: argv is parsed before any QApplication exists, and this file includes no Qt: the
// window is app_window.h's run_window() (window_main.cpp, or no_window.cpp in a headless build). `--version`,
// `--help` and the subcommands run with plain stdout and need no display (they work over SSH, in CI and with
// QT_QPA_PLATFORM unset); only the window path creates a QApplication. Single-dash options are
// Qt's own (-platform, -style, ...) and are handed to QApplication untouched. The run-store
// commands (run, runs, compare, costs, pricing) live in app/cli/, one file per group.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "app/app_window.h"
#include "app/cli/cli.h"
#include "db/database.h"
#include "db/errors.h"
#include "db/workspace.h"
#include "engine/core/error.h"

namespace {

// Exit codes of `flotilla` (listed by --help).
constexpr int kExitOk = 0;
constexpr int kExitUsage = 2;
constexpr int kExitWorkspace = 6;  // same number as flotilla-worker's I/O error

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Invocation {
  bool help = false;
  bool version = false;
  std::string workspace;                 // --workspace DIR ("" = the default)
  std::string db;                        // --db PATH ("" = the workspace database)
  std::string command;                   // subcommand name ("" = open the window)
  std::vector<std::string> commandArgs;  // arguments after the subcommand that are not ours
  std::vector<char*> qtArgs;             // argv[0] + Qt's own single-dash options
  bool platformGiven = false;            // -platform NAME among the Qt options
};

struct Command {
  const char* name;
  const char* summary;  // one line for --help
  int (*run)(const Invocation& inv);
};

int cmdInfo(const Invocation& inv);

// Runs a run-store command (app/cli/) and maps its failures to exit codes.
int runStoreCommand(const Invocation& inv, int (*command)(const flotilla::cli::Context&)) {
  flotilla::cli::Context ctx;
  ctx.workspace = inv.workspace;
  ctx.db_path = inv.db;
  ctx.args = inv.commandArgs;
  ctx.command = inv.command;
  try {
    return command(ctx);
  } catch (const flotilla::cli::UsageError& e) {
    std::fprintf(stderr, "flotilla: %s (see flotilla %s --help)\n", e.what(), inv.command.c_str());
    return flotilla::cli::kExitUsage;
  } catch (const flotilla::db::DbError& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "flotilla: %s\n", e.what());
    switch (e.kind()) {
      case flotilla::db::DbErrorKind::kNotFound:
        return flotilla::cli::kExitNotFound;
      case flotilla::db::DbErrorKind::kInvalid:
      case flotilla::db::DbErrorKind::kConstraint:
        return flotilla::cli::kExitRefused;
      default:
        return flotilla::cli::kExitStore;
    }
  } catch (const flotilla::Error& e) {
    std::fprintf(stderr, "flotilla: %s\n", e.what());
    return static_cast<int>(e.code());
  }
}

int cmdRun(const Invocation& inv) { return runStoreCommand(inv, flotilla::cli::cmd_run); }
int cmdRuns(const Invocation& inv) { return runStoreCommand(inv, flotilla::cli::cmd_runs); }
int cmdCompare(const Invocation& inv) { return runStoreCommand(inv, flotilla::cli::cmd_compare); }
int cmdCosts(const Invocation& inv) { return runStoreCommand(inv, flotilla::cli::cmd_costs); }
int cmdPricing(const Invocation& inv) { return runStoreCommand(inv, flotilla::cli::cmd_pricing); }
int cmdNodes(const Invocation& inv) { return runStoreCommand(inv, flotilla::cli::cmd_nodes); }
int cmdPlan(const Invocation& inv) { return runStoreCommand(inv, flotilla::cli::cmd_plan); }
int cmdClusters(const Invocation& inv) { return runStoreCommand(inv, flotilla::cli::cmd_clusters); }
int cmdQueue(const Invocation& inv) { return runStoreCommand(inv, flotilla::cli::cmd_queue); }
int cmdSweep(const Invocation& inv) { return runStoreCommand(inv, flotilla::cli::cmd_sweep); }
int cmdModels(const Invocation& inv) { return runStoreCommand(inv, flotilla::cli::cmd_models); }

// The subcommand table, in --help order.
const std::vector<Command>& commands() {
  static const std::vector<Command> table = {
      {"info", "print versions and open (or create) the workspace database, without a window", cmdInfo},
      {"run",
       "CONFIG.toml [--name N] [--set K=V]... [--budget USD] [--nodes A,B | --cluster C]: train here, on SSH\n"
       "                    nodes or a Slurm cluster, storing metrics",
       cmdRun},
      {"runs",
       "list [--json] | show RUN [--json] | export RUN [--csv|--jsonl] [--metric NAME] |\n"
       "                    resume RUN [--layout dp=N,...] [--nodes A,B | --cluster C | --local] | attach RUN |\n"
       "                    fork RUN [--step N] | checkpoint RUN | checkpoints RUN | fetch RUN | sample RUN |\n"
       "                    export-model RUN --out PATH | delete RUN",
       cmdRuns},
      {"compare", "RUN RUN... [--csv|--json]: summaries side by side and config differences", cmdCompare},
      {"plan", "CONFIG.toml [--set K=V]... [--json]: memory and step time, calibrated by this machine's runs",
       cmdPlan},
      {"costs", "[--json]: accrued cost and device-hours by run, node and day", cmdCosts},
      {"pricing", "list [--json] | set PROVIDER ITEM [--on-demand USD] [--spot USD] | node NAME ...",
       cmdPricing},
      {"nodes",
       "add NAME --host H ... | edit | list [--json] | probe NAME | trust NAME --fingerprint FP | remove "
       "NAME",
       cmdNodes},
      {"clusters",
       "add NAME --login HOST ... | list [--json] | probe NAME | trust NAME --fingerprint FP | price NAME "
       "PARTITION ... | remove NAME: Slurm clusters",
       cmdClusters},
      {"queue",
       "[list [--all] [--json]] | add CONFIG.toml [--on PLACE]... [--priority N] [--after RUN] [--deadline T]\n"
       "                    [--max-usd X] | show ID | cancel|pause|resume ID | move ID --top|... | serve [--until-empty]",
       cmdQueue},
      {"sweep",
       "CONFIG.toml --set K=V1,V2... [--random N] [--halving auto|T1,T2] | list | show NAME |\n"
       "                    compare NAME: one queued run per point, successive halving",
       cmdSweep},
      {"models",
       "list [--json] [--search TEXT] | show NAME [--json] | pull NAME [--files training|config|adapter|tokenizer]:\n"
       "                    models by name in the Hugging Face cache",
       cmdModels},
  };
  return table;
}

// Qt options that take a value (QGuiApplication/QApplication documentation).
bool qtOptionTakesValue(const char* arg) {
  static const char* const kWithValue[] = {
      "-platform",     "-platformpluginpath", "-platformtheme", "-plugin",     "-qwindowgeometry",
      "-qwindowtitle", "-qwindowicon",        "-style",         "-stylesheet", "-session",
      "-display",      "-geometry",           "-title"};
  for (const char* option : kWithValue)
    if (std::strcmp(arg, option) == 0) return true;
  return false;
}

Invocation parse(int argc, char** argv) {
  Invocation inv;
  inv.qtArgs.push_back(argv[0]);
  bool rest = false;  // after a command's "--": every argument is the command's, as written
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (rest) {
      inv.commandArgs.push_back(arg);
    } else if (arg == "--" && !inv.command.empty()) {
      inv.commandArgs.push_back(arg);
      rest = true;
    } else if ((arg == "--help" || arg == "-h") && inv.command.empty()) {
      inv.help = true;
    } else if (arg == "-h") {
      inv.commandArgs.push_back("--help");  // the command's own help
    } else if (arg == "--version") {
      inv.version = true;
    } else if (arg == "--workspace" || arg.rfind("--workspace=", 0) == 0) {
      if (arg == "--workspace") {
        if (i + 1 >= argc || flotilla::cli::looks_like_option(argv[i + 1]))
          throw UsageError("--workspace needs a folder: --workspace DIR");
        inv.workspace = argv[++i];
      } else {
        inv.workspace = arg.substr(std::strlen("--workspace="));
      }
      if (inv.workspace.empty()) throw UsageError("--workspace needs a folder: --workspace DIR");
    } else if (arg == "--db" || arg.rfind("--db=", 0) == 0) {
      if (arg == "--db") {
        if (i + 1 >= argc || flotilla::cli::looks_like_option(argv[i + 1]))
          throw UsageError("--db needs a file: --db PATH");
        inv.db = argv[++i];
      } else {
        inv.db = arg.substr(std::strlen("--db="));
      }
      if (inv.db.empty()) throw UsageError("--db needs a file: --db PATH");
    } else if (arg.rfind("--", 0) == 0) {
      if (!inv.command.empty()) {
        inv.commandArgs.push_back(arg);
      } else {
        throw UsageError("unknown option '" + arg + "'");
      }
    } else if (arg.size() > 1 && arg[0] == '-' && !inv.command.empty()) {
      // After a command, every argument is the command's: an option-like value ("--name -rf")
      // reaches its reader whole, never Qt.
      inv.commandArgs.push_back(arg);
    } else if (arg.size() > 1 && arg[0] == '-') {
      inv.qtArgs.push_back(argv[i]);
      if (arg == "-platform") inv.platformGiven = true;
      if (qtOptionTakesValue(argv[i]) && i + 1 < argc) inv.qtArgs.push_back(argv[++i]);
    } else if (inv.command.empty()) {
      inv.command = arg;
    } else {
      inv.commandArgs.push_back(arg);
    }
  }
  inv.qtArgs.push_back(nullptr);  // argv[argc] is NULL by convention
  return inv;
}

void printHelp() {
  std::printf(
      "Usage: flotilla [--workspace DIR] [--db PATH] [COMMAND [ARGS...]]\n"
      "\n"
      "Flotilla is a desktop control center for training large language models on this machine's\n"
      "GPUs or on SSH nodes. With no command it opens the main window.\n"
      "\n"
      "Options:\n"
      "  --workspace DIR   use DIR as the workspace (default: %s;\n"
      "                    the run database is DIR/%s, created with mode 0600)\n"
      "  --db PATH         use the run database PATH instead of the workspace's (commands only)\n"
      "  --version         print the versions of Flotilla and its libraries, then exit\n"
      "  -h, --help        print this help, then exit\n"
      "  -platform NAME, -style NAME, ...  Qt options, passed to Qt\n"
      "\n"
      "Commands (no window needed):\n",
      flotilla::db::default_workspace_dir().c_str(), flotilla::db::kDatabaseFileName);
  for (const Command& c : commands()) std::printf("  %-17s %s\n", c.name, c.summary);
  std::printf(
      "\n"
      "Each command has --help; docs/cli.md describes them. The training engine's own command line\n"
      "is flotilla-worker (flotilla-worker --help).\n"
      "\n"
      "Exit status: 0 ok, 1 no display to open the window on, 2 usage error, 3 the run config is\n"
      "invalid, 4 no such run, node or price, 6 the workspace or run database cannot be opened or\n"
      "written (it is never overwritten; the message says why), 9 the store refused the request.\n"
      "run and runs resume exit with the worker's status (flotilla-worker --help lists it).\n");
}

std::string workspaceDir(const Invocation& inv) {
  if (inv.workspace.empty()) return flotilla::db::default_workspace_dir();
  std::string dir = std::filesystem::absolute(inv.workspace).lexically_normal().string();
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir;
}

// Opens the workspace the way the window does: create the folder, then open/create and migrate.
flotilla::db::Database openWorkspace(const std::string& dir) {
  flotilla::db::ensure_workspace_dir(dir);
  return flotilla::db::Database(flotilla::db::workspace_database_path(dir));
}

int cmdInfo(const Invocation& inv) {
  if (!inv.commandArgs.empty()) throw UsageError("info takes no arguments, got '" + inv.commandArgs[0] + "'");
  std::fputs(flotilla::app::versions_text().c_str(), stdout);
  const std::string dir = workspaceDir(inv);
  std::printf("workspace   %s\n", dir.c_str());
  try {
    const flotilla::db::Database db = openWorkspace(dir);
    std::printf("database    %s (schema version %d, %s)\n", db.path().c_str(), db.schema_version(),
                db.created() ? "created now" : "existing");
  } catch (const flotilla::db::DbError& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "flotilla: %s\n", e.what());
    return kExitWorkspace;
  }
  return kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  Invocation inv;
  try {
    inv = parse(argc, argv);
    if (inv.help) {
      printHelp();
      return kExitOk;
    }
    if (inv.version) {
      std::fputs(flotilla::app::versions_text().c_str(), stdout);
      return kExitOk;
    }
    if (!inv.command.empty()) {
      for (const Command& c : commands())
        if (inv.command == c.name) return c.run(inv);
      throw UsageError("unknown command '" + inv.command + "'");
    }
  } catch (const UsageError& e) {
    std::fprintf(stderr, "flotilla: %s (see flotilla --help)\n", e.what());
    return kExitUsage;
  }
  flotilla::app::WindowRequest window;
  window.workspace = inv.workspace;
  window.qt_args = inv.qtArgs;
  window.platform_given = inv.platformGiven;
  window.workspace_dir = [](const std::string& w) {
    Invocation i;
    i.workspace = w;
    return workspaceDir(i);
  };
  return flotilla::app::run_window(window);
}
