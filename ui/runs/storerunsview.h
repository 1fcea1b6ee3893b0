// The stored runs as the Runs page shows them: a filter bar (status, text, tag), the table over
// StoreRunsModel, and the per-run actions (open live, resume, fork from a checkpoint, duplicate
// config, export CSV, delete).
//
// Decision: each action is a public method taking the run id, and the context menu only calls
// them, so tests drive exactly what a click does without menus or modal dialogs. The questions
// the actions ask (which checkpoint, where to save, are you sure) go through replaceable hooks.
// A run on SSH nodes opens as the session's RemoteRun that watches it (its folder is not on this
// machine); one nobody here watches is offered for attaching, never shown as an empty folder.
#pragma once

#include <QWidget>

#include <functional>

#include "engine/config/run_config.h"

class QComboBox;
class QLineEdit;
class QTableView;

namespace flotilla::ui {

class LocalRun;
class LocalRuns;
class RunHandle;
class RunsFilterModel;
class StoreRunsModel;
class StoreService;

// Writes every metric of a stored run as CSV (step, then one column per metric name, sorted) from
// a read connection of its own. False with *error on failure. Safe to call off the UI thread.
bool exportRunCsv(const QString& databasePath, qint64 runId, const QString& path, QString* error);

class StoreRunsView : public QWidget {
  Q_OBJECT

 public:
  StoreRunsView(StoreService* store, LocalRuns* runs, QWidget* parent = nullptr);

  QTableView* table() const { return m_table; }
  StoreRunsModel* model() const { return m_model; }
  RunsFilterModel* filter() const { return m_filter; }
  qint64 selectedId() const;
  void selectId(qint64 id);

  // The actions (the context menu calls these). Each reports problems through errorRaised.
  void openLive(qint64 id);
  LocalRun* resume(qint64 id);
  LocalRun* fork(qint64 id, const QString& checkpointDir);  // empty dir: ask which checkpoint
  void duplicate(qint64 id);
  bool exportCsv(qint64 id, const QString& path);  // empty path: ask where
  bool remove(qint64 id);                           // asks for confirmation

  // Hooks for the questions (tests answer them without dialogs).
  std::function<QString(const QStringList& checkpoints)> chooseCheckpoint;
  std::function<QString(const QString& suggested)> chooseCsvPath;
  std::function<bool(const QString& runName)> confirmDelete;
  // Whether to watch a run on SSH nodes that this session does not watch (default: a question box).
  std::function<bool(const QString& runName, const QString& nodes)> confirmAttach;

 signals:
  void runOpened(flotilla::ui::LocalRun* run);
  // A run on SSH nodes was opened: the RemoteRun that watches it (show it live).
  void remoteRunOpened(flotilla::ui::RunHandle* run);
  void duplicateRequested(const flotilla::RunConfig& config);
  void errorRaised(const QString& text);
  void message(const QString& text);

 private:
  void showMenu(const QPoint& pos);

  StoreService* m_store;
  LocalRuns* m_runs;
  StoreRunsModel* m_model;
  RunsFilterModel* m_filter;
  QTableView* m_table;
  QComboBox* m_status;
  QLineEdit* m_text;
  QLineEdit* m_tag;
};

}  // namespace flotilla::ui
