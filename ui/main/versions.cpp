// Version collection (see versions.h). Each library is asked through its own layer's function,
// so this file includes no SQLite or libssh header.
#include "ui/main/versions.h"

#include <QtGlobal>

#include "db/workspace.h"
#include "flotilla/build_info.h"
#include "runs/node_admin.h"
#include "ui/plot/plotsupport.h"

namespace flotilla::ui {

VersionInfo collectVersions() {
  VersionInfo v;
  v.flotilla = QStringLiteral(FLOTILLA_VERSION_STRING);
  v.qtRuntime = QString::fromLatin1(qVersion());
  v.qtBuild = QStringLiteral(QT_VERSION_STR);
  v.qcustomplot = qcustomplotVersion();
  v.sqlite = QString::fromStdString(db::sqlite_version());
  v.libssh = QString::fromStdString(runs::ssh_library_version());
  v.compiler = QStringLiteral(FLOTILLA_CXX_COMPILER);
  v.buildType = QStringLiteral(FLOTILLA_BUILD_TYPE);
  return v;
}

QString versionsText(const VersionInfo& v) {
  QString qt = v.qtRuntime;
  if (v.qtBuild != v.qtRuntime) qt += QStringLiteral(" (built with %1)").arg(v.qtBuild);
  return QStringLiteral(
             "flotilla %1\n"
             "Qt          %2\n"
             "QCustomPlot %3\n"
             "SQLite      %4\n"
             "libssh      %5\n"
             "compiler    %6 (%7 build)\n")
      .arg(v.flotilla, qt, v.qcustomplot, v.sqlite, v.libssh, v.compiler, v.buildType);
}

}  // namespace flotilla::ui
