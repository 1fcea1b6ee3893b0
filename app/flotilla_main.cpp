// flotilla: the desktop app, plus a headless command line.
//
// Decision: argv is parsed before any QApplication exists. `--version`, `--help` and the
// subcommands run with plain stdout and need no display (they work over SSH, in CI and with
// QT_QPA_PLATFORM unset); only the window path creates a QApplication. Single-dash options are
// Qt's own (-platform, -style, ...) and are handed to QApplication untouched. Later issues add
// subcommands (`flotilla run ...`, `flotilla runs list`) by adding rows to commands().
#include <QApplication>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "db/database.h"
#include "db/errors.h"
#include "db/workspace.h"
#include "ui/common/icons.h"
#include "ui/main/mainwindow.h"
#include "ui/main/refusedworkspace.h"
#include "ui/main/versions.h"

namespace {

// Exit codes of `flotilla` (listed by --help).
constexpr int kExitOk = 0;
constexpr int kExitNoDisplay = 1;
constexpr int kExitUsage = 2;
constexpr int kExitWorkspace = 6;  // same number as flotilla-worker's I/O error

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Invocation {
  bool help = false;
  bool version = false;
  std::string workspace;                 // --workspace DIR ("" = the default)
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

// The subcommand table, in --help order.
const std::vector<Command>& commands() {
  static const std::vector<Command> table = {
      {"info", "print versions and open (or create) the workspace database, without a window", cmdInfo},
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
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      inv.help = true;
    } else if (arg == "--version") {
      inv.version = true;
    } else if (arg == "--workspace" || arg.rfind("--workspace=", 0) == 0) {
      if (arg == "--workspace") {
        if (i + 1 >= argc) throw UsageError("--workspace needs a folder: --workspace DIR");
        inv.workspace = argv[++i];
      } else {
        inv.workspace = arg.substr(std::strlen("--workspace="));
      }
      if (inv.workspace.empty()) throw UsageError("--workspace needs a folder: --workspace DIR");
    } else if (arg.rfind("--", 0) == 0) {
      if (!inv.command.empty()) {
        inv.commandArgs.push_back(arg);
      } else {
        throw UsageError("unknown option '" + arg + "'");
      }
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
      "Usage: flotilla [--workspace DIR] [COMMAND [ARGS...]]\n"
      "\n"
      "Flotilla is a desktop control center for training large language models on this machine's\n"
      "GPUs or on SSH nodes. With no command it opens the main window.\n"
      "\n"
      "Options:\n"
      "  --workspace DIR   use DIR as the workspace (default: %s;\n"
      "                    the run database is DIR/%s, created with mode 0600)\n"
      "  --version         print the versions of Flotilla and its libraries, then exit\n"
      "  -h, --help        print this help, then exit\n"
      "  -platform NAME, -style NAME, ...  Qt options, passed to Qt\n"
      "\n"
      "Commands (no window needed):\n",
      flotilla::db::default_workspace_dir().c_str(), flotilla::db::kDatabaseFileName);
  for (const Command& c : commands()) std::printf("  %-17s %s\n", c.name, c.summary);
  std::printf(
      "\n"
      "The training engine's own command line is flotilla-worker (flotilla-worker --help).\n"
      "\n"
      "Exit status: 0 ok, 1 no display to open the window on, 2 usage error,\n"
      "6 the workspace cannot be opened (it is never overwritten; the message says why).\n");
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
  std::fputs(flotilla::ui::versionsText(flotilla::ui::collectVersions()).toUtf8().constData(), stdout);
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

bool haveDisplay(const Invocation& inv) {
  const auto set = [](const char* name) {
    const char* v = std::getenv(name);
    return v && *v;
  };
  return inv.platformGiven || set("QT_QPA_PLATFORM") || set("DISPLAY") || set("WAYLAND_DISPLAY");
}

int runWindow(Invocation& inv) {
  if (!haveDisplay(inv)) {
    std::fprintf(stderr,
                 "flotilla: no display to open the window on (DISPLAY and WAYLAND_DISPLAY are unset).\n"
                 "Start it from a desktop session, or under a virtual display: xvfb-run -a flotilla.\n"
                 "Commands that need no window are listed by flotilla --help.\n");
    return kExitNoDisplay;
  }
  int qtArgc = static_cast<int>(inv.qtArgs.size()) - 1;
  QApplication app(qtArgc, inv.qtArgs.data());
  QApplication::setOrganizationName(QStringLiteral("Flotilla"));
  QApplication::setApplicationName(QStringLiteral("Flotilla"));
  QApplication::setApplicationVersion(flotilla::ui::collectVersions().flotilla);
  QApplication::setDesktopFileName(QStringLiteral("flotilla"));
  QApplication::setWindowIcon(flotilla::ui::appIcon());

  const std::string dir = workspaceDir(inv);
  std::optional<flotilla::db::Database> db;
  while (!db) {
    try {
      db.emplace(openWorkspace(dir));
    } catch (const flotilla::db::DbError& e) {
      std::fprintf(stderr, "flotilla: %s\n", e.what());  // for logs and terminals, before the modal box
      QString movedTo, moveError;
      const QString path = QString::fromStdString(flotilla::db::workspace_database_path(dir));
      if (!flotilla::ui::offerToMoveAside(e, path, &movedTo, &moveError)) {
        if (!moveError.isEmpty()) std::fprintf(stderr, "flotilla: %s\n", qPrintable(moveError));
        return kExitWorkspace;
      }
      std::fprintf(stderr, "flotilla: moved the damaged database to %s\n", qPrintable(movedTo));
    }
  }

  flotilla::ui::WorkspaceInfo info;
  info.directory = QString::fromStdString(dir);
  info.databasePath = QString::fromStdString(db->path());
  info.schemaVersion = db->schema_version();
  info.created = db->created();
  flotilla::ui::MainWindow window(info);
  window.show();
  return app.exec();
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
      std::fputs(flotilla::ui::versionsText(flotilla::ui::collectVersions()).toUtf8().constData(), stdout);
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
  return runWindow(inv);
}
