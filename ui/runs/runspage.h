// The Runs page: the runs started in this session, with status and progress, and the way to
// start one. Until the run wizard lands the one launchable run is the built-in demo (the tiny GPT
// on a synthetic corpus, on this machine's CPU); "New run…" stays visible but disabled.
#pragma once

#include <QWidget>

class QLabel;
class QPushButton;
class QStackedWidget;
class QTableView;

namespace flotilla::ui {

class LocalRun;
class LocalRuns;
class LocalRunsModel;

class RunsPage : public QWidget {
  Q_OBJECT

 public:
  explicit RunsPage(LocalRuns* runs, QWidget* parent = nullptr);

  // The "Run the demo" button on screen now (the empty state's, or the toolbar's once runs exist).
  QPushButton* runDemoButton() const;
  QPushButton* newRunButton() const;
  QTableView* table() const { return m_table; }
  LocalRunsModel* model() const { return m_model; }
  QString errorText() const;

 signals:
  // A run was started here or double-clicked in the table: show it live.
  void runOpened(flotilla::ui::LocalRun* run);

 private:
  void startDemo();
  void showError(const QString& text);
  void updateBody();

  LocalRuns* m_runs;
  LocalRunsModel* m_model;
  QStackedWidget* m_body;
  QTableView* m_table;
  QLabel* m_error;
  QPushButton* m_emptyDemo;
  QPushButton* m_emptyNewRun;
  QPushButton* m_toolbarDemo;
  QPushButton* m_toolbarNewRun;
};

}  // namespace flotilla::ui
