// `flotilla` built without the window (FLOTILLA_WINDOW=OFF): the headless commands only.
#include <cstdio>
#include <string>

#include "app/app_window.h"
#include "db/workspace.h"
#include "flotilla/build_info.h"
#include "runs/node_admin.h"

namespace flotilla::app {

int run_window(WindowRequest&) {
  std::fprintf(stderr,
               "flotilla: this flotilla was built without the desktop window (FLOTILLA_WINDOW=OFF); the "
               "commands listed by flotilla --help work, the window does not\n");
  return 1;
}

std::string versions_text() {
  return std::string("flotilla ") + FLOTILLA_VERSION_STRING + " (no window)\n" + "SQLite      " +
         db::sqlite_version() + "\n" + "libssh      " + runs::ssh_library_version() + "\n" + "compiler    " +
         FLOTILLA_CXX_COMPILER + " (" + FLOTILLA_BUILD_TYPE + " build)\n";
}

}  // namespace flotilla::app
