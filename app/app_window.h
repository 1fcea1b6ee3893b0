// The desktop window half of `flotilla`, seen from its Qt-free command-line half.
//
// Decision: flotilla_main.cpp (argv, the headless commands) includes no Qt; the window lives
// behind these two functions, in window_main.cpp (linking the ui/ library and Qt Widgets) or, in a
// build without the window (FLOTILLA_WINDOW=OFF: servers, CI), in no_window.cpp. So the headless
// commands link no widget code, and a headless flotilla builds without Qt Widgets at all.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace flotilla::app {

struct WindowRequest {
  std::string workspace;        // --workspace ("" = Settings' choice, else the default)
  std::vector<char*> qt_args;   // argv[0] + Qt's own options, NULL-terminated
  bool platform_given = false;  // -platform NAME was given
  std::function<std::string(const std::string&)> workspace_dir;  // --workspace -> absolute folder
};

// Opens the main window and runs the event loop; returns the exit code (1: no display, 6: the
// workspace cannot be opened).
int run_window(WindowRequest& request);

// `flotilla --version`: one line per component.
std::string versions_text();

}  // namespace flotilla::app
