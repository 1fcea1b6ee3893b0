// The desktop window of `flotilla` (see app_window.h): QApplication, the one-window-per-workspace
// lock, the damaged-database question and the main window. Only this file (and the ui/ library it
// links) needs Qt Widgets; a headless build (FLOTILLA_WINDOW=OFF) uses no_window.cpp instead.
#include <QApplication>
#include <QEvent>
#include <QMessageBox>
#include <QTimer>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>

#include "app/app_window.h"
#include "db/database.h"
#include "db/errors.h"
#include "db/workspace.h"
#include "ui/common/icons.h"
#include "ui/main/instancelock.h"
#include "ui/main/mainwindow.h"
#include "ui/main/refusedworkspace.h"
#include "ui/main/versions.h"
#include "ui/settings/preferences.h"

namespace flotilla::app {
namespace {

constexpr int kExitNoDisplay = 1;
constexpr int kExitWorkspace = 6;

bool haveDisplay(const WindowRequest& inv) {
  const auto set = [](const char* name) {
    const char* v = std::getenv(name);
    return v && *v;
  };
  return inv.platform_given || set("QT_QPA_PLATFORM") || set("DISPLAY") || set("WAYLAND_DISPLAY");
}

// FLOTILLA_REPORT_FIRST_PAINT=1 prints the time from process start to the main window's first
// paint on stderr (=exit also quits then): scripts/bench-startup measures issue 6's 1.5 s target.
const auto kProcessStart = std::chrono::steady_clock::now();

class FirstPaintReporter : public QObject {
 public:
  explicit FirstPaintReporter(QWidget* window) : m_window(window) {
    const char* mode = std::getenv("FLOTILLA_REPORT_FIRST_PAINT");
    if (mode == nullptr || *mode == '\0') return;
    m_quit = std::strcmp(mode, "exit") == 0;
    window->installEventFilter(this);
  }

 protected:
  bool eventFilter(QObject* watched, QEvent* event) override {
    if (watched == m_window && event->type() == QEvent::Paint && !m_reported) {
      m_reported = true;
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - kProcessStart).count();
      std::fprintf(stderr, "flotilla: first paint after %.0f ms\n", ms);
      if (m_quit) QTimer::singleShot(0, qApp, &QCoreApplication::quit);
    }
    return QObject::eventFilter(watched, event);
  }

 private:
  QWidget* m_window;
  bool m_quit = false;
  bool m_reported = false;
};

}  // namespace

int run_window(WindowRequest& inv) {
  if (!haveDisplay(inv)) {
    std::fprintf(stderr,
                 "flotilla: no display to open the window on (DISPLAY and WAYLAND_DISPLAY are unset).\n"
                 "Start it from a desktop session, or under a virtual display: xvfb-run -a flotilla.\n"
                 "Commands that need no window are listed by flotilla --help.\n");
    return kExitNoDisplay;
  }
  int qtArgc = static_cast<int>(inv.qt_args.size()) - 1;
  QApplication app(qtArgc, inv.qt_args.data());
  QApplication::setOrganizationName(QStringLiteral("Flotilla"));
  QApplication::setApplicationName(QStringLiteral("Flotilla"));
  QApplication::setApplicationVersion(flotilla::ui::collectVersions().flotilla);
  QApplication::setDesktopFileName(QStringLiteral("flotilla"));
  QApplication::setWindowIcon(flotilla::ui::appIcon());

  // Without --workspace the window opens the folder chosen in Settings (effective at this start).
  if (inv.workspace.empty()) inv.workspace = flotilla::ui::Preferences::load().workspaceDir.toStdString();
  const std::string dir = inv.workspace_dir(inv.workspace);
  // One window per workspace (docs/reliability.md D2), decided before the database is touched.
  try {
    flotilla::db::ensure_workspace_dir(dir);
  } catch (const flotilla::db::DbError& e) {
    std::fprintf(stderr, "flotilla: %s\n", e.what());
    QMessageBox::critical(nullptr, QStringLiteral("Flotilla"), QString::fromUtf8(e.what()));
    return kExitWorkspace;
  }
  flotilla::ui::InstanceLock lock(QString::fromStdString(dir));
  if (QString why; !lock.tryLock(&why)) {
    std::fprintf(stderr, "flotilla: %s\n", qPrintable(why));
    QMessageBox::warning(nullptr, QStringLiteral("Flotilla"), why);
    return kExitWorkspace;
  }
  std::optional<flotilla::db::Database> db;
  while (!db) {
    try {
      flotilla::db::ensure_workspace_dir(dir);
      db.emplace(flotilla::db::workspace_database_path(dir));
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
  db.reset();  // the window opens its own writer and reader connections
  // The window re-attaches to runs an earlier session left running (LocalRuns::reattachRunning).
  flotilla::ui::MainWindow window(info);
  FirstPaintReporter firstPaint(&window);
  window.show();
  return app.exec();
}

std::string versions_text() {
  return flotilla::ui::versionsText(flotilla::ui::collectVersions()).toStdString();
}

}  // namespace flotilla::app
