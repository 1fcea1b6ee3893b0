// The Runs page: the runs started in this session, with status and progress, and the way to
// start one: the built-in demo (the tiny GPT on a synthetic corpus, on this machine's CPU) in one
// click, or "New run…" (Ctrl+N), the run wizard, whose config is launched on Finish.
#pragma once

#include <QPointer>
#include <QWidget>

#include "engine/config/run_config.h"
#include "runs/placement.h"
#include "ui/wizard/runwizard.h"

class QLabel;
class QPushButton;
class QStackedWidget;
class QTableView;

namespace flotilla::ui {

class ServiceRun;
class RunHandle;
class LocalRuns;
class LocalRunsModel;
class MachineProbe;
class StoreRunsView;

class RunsPage : public QWidget {
  Q_OBJECT

 public:
  explicit RunsPage(LocalRuns* runs, QWidget* parent = nullptr);

  // The "Run the demo" button on screen now (the empty state's, or the toolbar's once runs exist).
  QPushButton* runDemoButton() const;
  QPushButton* newRunButton() const;
  // The table on screen: the stored runs when the app has a run store, else this session's.
  QTableView* table() const;
  // The stored runs view (nullptr without a run store).
  StoreRunsView* storeView() const { return m_storeView; }
  LocalRunsModel* model() const { return m_model; }
  QString errorText() const;
  // The machine probe the wizard uses for its targets (the app's shared one); without it the
  // wizard probes by itself.
  void setMachineProbe(MachineProbe* probe) { m_probe = probe; }
  // Opens the New Run wizard (window-modal); on Finish its config is launched. Returns it.
  RunWizard* openNewRunWizard();
  // The wizard open now, if any.
  RunWizard* wizard() const { return m_wizard; }
  // Launches a config as the wizard's Finish does; the run opens on the Live page.
  flotilla::ui::ServiceRun* launchConfig(const flotilla::RunConfig& config, int ranks);
  // Launches a config where `where` says (the wizard's target); the run opens on the Live page.
  flotilla::ui::ServiceRun* launch(const flotilla::RunConfig& config, const flotilla::runs::Placement& where);

 signals:
  // A run was started (wherever the wizard placed it), resumed, forked, attached or double-clicked
  // in the table: show it live.
  void runOpened(flotilla::ui::ServiceRun* run);
  // The wizard's "Add to queue" added entry `id` (the window shows it on the Queue page).
  void entryQueued(qint64 id);

 private:
  void startDemo();
  // The wizard's config added to the queue for its target's place, with its limits.
  void queueFromWizard(RunWizard* wizard);
  void showError(const QString& text);
  // The line under the header: red for errors, plain for information (empty text hides it).
  void showMessage(const QString& text, bool error);
  void updateBody();
  void selectRun(const ServiceRun* run);

  LocalRuns* m_runs;
  LocalRunsModel* m_model;
  QStackedWidget* m_body;
  QTableView* m_table;
  QLabel* m_error;
  QPushButton* m_emptyDemo;
  QPushButton* m_emptyNewRun;
  QPushButton* m_toolbarDemo;
  QPushButton* m_toolbarNewRun;
  MachineProbe* m_probe = nullptr;
  QPointer<RunWizard> m_wizard;
  StoreRunsView* m_storeView = nullptr;
};

}  // namespace flotilla::ui
