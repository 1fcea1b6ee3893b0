// The main window. It only composes (STYLE.md principle 3): the sidebar, one page per feature
// folder in a stack, menus, the status bar and the remembered window layout. Features own their
// behaviour; this class only wires the local-runs service to the pages and the status bar, and
// asks what to do with active runs when it is closed.
#pragma once

#include <QMainWindow>
#include <QMessageBox>
#include <QPointer>
#include <QStringList>

#include <functional>

#include "ui/main/versions.h"
#include "ui/main/workspaceinfo.h"

class QAction;
class QActionGroup;
class QLabel;
class QStackedWidget;
class QUrl;

namespace flotilla::ui {

class AboutDialog;
class AppScheduler;
class LocalRuns;
class MachineProbe;
class RunNotifier;
class Sidebar;
class StoreService;

class MainWindow : public QMainWindow {
  Q_OBJECT

 public:
  // Sidebar order; View > Ctrl+1..9 follow it.
  enum Page { Runs, Queue, Live, Compare, Chat, Nodes, Costs, Clusters, Settings, PageCount };

  explicit MainWindow(const WorkspaceInfo& workspace, QWidget* parent = nullptr);
  ~MainWindow() override;

  int currentPage() const;
  QStringList pageTitles() const;
  QWidget* page(Page page) const;
  MachineProbe* machineProbe() const { return m_probe; }
  LocalRuns* localRuns() const { return m_runs; }
  // The run store service (nullptr when the workspace has no database or it could not be opened).
  StoreService* store() const { return m_store; }
  // The queue's scheduler in this window (nullptr without a run store): serves the workspace's
  // queue unless another scheduler holds its lease (the Queue page's toggle).
  AppScheduler* scheduler() const { return m_scheduler; }
  // Runs re-attached at start (workers left running by an earlier session).
  int reattachedRuns() const { return m_reattached; }

  // What closing the window does with runs still training.
  enum class CloseChoice { StopRuns, LeaveRunning, Cancel };
  // Replaces the question box (tests answer without a modal dialog). Gets the number of active runs.
  void setCloseQuestion(std::function<CloseChoice(int activeRuns)> question) {
    m_closeQuestion = std::move(question);
  }
  // Help > Flotilla documentation (F1) opens this file (docs/README.md; "" when not found): the
  // installed share/doc/flotilla, else the source tree's docs/. Tests replace the opener.
  static QString documentationIndex();
  // How a URL is opened (default: QDesktopServices); false when nothing could open it (no desktop
  // handler): Help then shows where the documentation is in a message instead.
  void setUrlOpener(std::function<bool(const QUrl&)> open) { m_openUrl = std::move(open); }
  // The message Help → documentation showed when the URL could not be opened (nullptr: none).
  QMessageBox* documentationMessage() const { return m_docsMessage; }
  // The About box's version text (HTML), as the dialog would show it now.
  QString aboutText() const;

  // QSettings keys of the remembered layout (organisation "Flotilla", application "Flotilla").
  static constexpr const char* kGeometryKey = "mainWindow/geometry";
  static constexpr const char* kStateKey = "mainWindow/state";
  static constexpr const char* kPageKey = "mainWindow/page";

 public slots:
  void showPage(int page);
  void showAbout();

 protected:
  void closeEvent(QCloseEvent* event) override;

 private:
  void buildPages(const WorkspaceInfo& workspace);
  void buildMenus();
  void buildStatusBar(const WorkspaceInfo& workspace);
  void buildRunMenu();
  void connectRuns();
  void connectQueue();
  void showRunning(int sessionRuns);  // the status bar's count: this session's runs and the store's others
  CloseChoice askAboutActiveRuns(int activeRuns);
  void restoreLayout();
  void saveLayout() const;

  VersionInfo m_versions;
  MachineProbe* m_probe;
  LocalRuns* m_runs;
  RunNotifier* m_notifier = nullptr;
  Sidebar* m_sidebar;
  QStackedWidget* m_stack;
  QActionGroup* m_pageActions = nullptr;
  AboutDialog* m_about = nullptr;
  QLabel* m_running = nullptr;
  QLabel* m_spend = nullptr;
  StoreService* m_store = nullptr;
  AppScheduler* m_scheduler = nullptr;
  int m_reattached = 0;
  int m_othersRunning = 0;  // runs the store says are running that this session does not watch
  std::function<CloseChoice(int)> m_closeQuestion;
  std::function<bool(const QUrl&)> m_openUrl;
  QPointer<QMessageBox> m_docsMessage;
  void updateRunMenu();             // the Run menu's actions enabled as the run Live follows allows
  QList<QAction*> m_runActions;     // Checkpoint now, Stop, Kill
  bool m_closeWhenStopped = false;  // "Stop the run" was chosen: close once no run is active
};

}  // namespace flotilla::ui
