// The main window. It only composes (STYLE.md principle 3): the sidebar, one page per feature
// folder in a stack, menus, the status bar and the remembered window layout. Features own their
// behaviour; nothing here knows what a run or a node is.
#pragma once

#include <QMainWindow>
#include <QStringList>

#include "ui/main/versions.h"
#include "ui/main/workspaceinfo.h"

class QActionGroup;
class QLabel;
class QStackedWidget;

namespace flotilla::ui {

class AboutDialog;
class MachineProbe;
class Sidebar;

class MainWindow : public QMainWindow {
  Q_OBJECT

 public:
  // Sidebar order; View > Ctrl+1..6 follow it.
  enum Page { Runs, Live, Compare, Nodes, Costs, Settings, PageCount };

  explicit MainWindow(const WorkspaceInfo& workspace, QWidget* parent = nullptr);
  ~MainWindow() override;

  int currentPage() const;
  QStringList pageTitles() const;
  QWidget* page(Page page) const;
  MachineProbe* machineProbe() const { return m_probe; }
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
  void restoreLayout();
  void saveLayout() const;

  VersionInfo m_versions;
  MachineProbe* m_probe;
  Sidebar* m_sidebar;
  QStackedWidget* m_stack;
  QActionGroup* m_pageActions = nullptr;
  AboutDialog* m_about = nullptr;
};

}  // namespace flotilla::ui
