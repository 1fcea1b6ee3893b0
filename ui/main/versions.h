// Versions of everything Flotilla is built from, for the About box and `flotilla --version`.
// Needs no QApplication, so the headless command line can use it.
#pragma once

#include <QString>

namespace flotilla::ui {

struct VersionInfo {
  QString flotilla;     // project version
  QString qtRuntime;    // qVersion(): the Qt libraries loaded
  QString qtBuild;      // QT_VERSION_STR: the Qt headers compiled against
  QString qcustomplot;  // QCUSTOMPLOT_VERSION_STR
  QString sqlite;       // sqlite3_libversion()
  QString libssh;       // ssh_version(0)
  QString compiler;     // compiler id and version
  QString buildType;    // CMake build type
};

VersionInfo collectVersions();

// One line per component, as printed by `flotilla --version`.
QString versionsText(const VersionInfo& versions);

}  // namespace flotilla::ui
