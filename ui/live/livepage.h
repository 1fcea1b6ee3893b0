// The Live page: one run as it trains — its state and progress numbers, the dashboard of
// plots (livedashboard.h), the worker's events — with Stop (graceful, with a checkpoint),
// Checkpoint now and Kill (after a confirmation).
//
// Decision: nothing here redraws in reaction to a record. Records go into the dashboard's
// LiveData; one 40 ms timer refreshes the dirty plots (within a time budget) and the status
// line, so the page redraws at most 25 times a second however fast a worker reports, and a
// hidden page does not redraw at all; the timer runs for an ended run too until what arrived is
// drawn, and a display toggle (log y, x axis) redraws at once. Every run's records are the
// store's (ServiceRun reads them back as they are committed, runs/store_feed.h), whoever started
// the run; following a run that already has records replays the ones its handle has delivered
// (never the worker's file; on a worker thread when it is long); records that arrive meanwhile are
// held and applied after the replay, so none is lost or doubled. The spend is the store's: the
// run's stored price and accruals, read with the node readings. A run this window only follows in
// the store (ServiceRun::isFollowed) is stopped, checkpointed or killed through the runs service
// (its abilities say which), and its end is recorded by whoever watches it.
//
// A run picker lists this session's runs (LocalRuns: local ones, runs on SSH nodes, those
// re-attached at start). A re-attached run is offered, not imposed: the page follows it only
// when it follows no active run, and never switches the window to itself. GPU readings of the
// followed run's nodes come from the store (nodesamples.h), polled every kSamplesMs while the
// run is active and the page visible, and drawn by the same 40 ms refresh.
#pragma once

#include <QPointer>
#include <QVector>

#include <QWidget>
#include "engine/train/metrics_reader.h"

class QComboBox;
class QLabel;
class QMessageBox;
class QPlainTextEdit;

namespace flotilla::ui {
class LogFind;
}
class QPushButton;
class QSlider;
class QTimer;

namespace flotilla::ui {

class CommPanel;
class LiveDashboard;
class ServiceRun;
class LocalRuns;
class NodeSamplesPoller;
struct NodeSampleBatch;
class RunHandle;
class LossPlot;
class SeriesStore;

class LivePage : public QWidget {
  Q_OBJECT

 public:
  static constexpr int kRefreshMs = 40;
  // Histories up to this many records are replayed on the UI thread (a few ms), longer ones on a
  // thread.
  static constexpr qint64 kSyncReplayRecords = 10000;
  static constexpr int kSamplesMs = 2000;

  explicit LivePage(QWidget* parent = nullptr);

  // Follows `run` (nullptr: none). The page never owns the run.
  void setRun(RunHandle* run);
  // The session's runs: listed in the run picker as they are added; re-attached ones are offered
  // (offerRun); the store's database (if any) is where node GPU readings are read.
  void setRuns(LocalRuns* runs);
  // Lists `run` in the picker and follows it when the page follows no active run.
  void offerRun(RunHandle* run);
  // The run store to read node GPU readings from ("" = none).
  void setDatabasePath(const QString& path);
  QComboBox* runPicker() const { return m_picker; }
  NodeSamplesPoller* nodeSamples() const { return m_samples; }
  // The followed run as the session's ServiceRun (nullptr for another RunHandle); followed(): any.
  ServiceRun* run() const;
  RunHandle* followed() const;
  // The followed run's series store, or nullptr.
  const SeriesStore* series() const;

  LiveDashboard* dashboard() const { return m_dashboard; }
  // Communication of a multi-rank run (shown once it has comm records).
  CommPanel* commPanel() const { return m_comm; }
  LossPlot* lossPlot() const;
  QPushButton* stopButton() const { return m_stop; }
  QPushButton* checkpointButton() const { return m_checkpoint; }
  QPushButton* killButton() const { return m_kill; }
  QSlider* smoothingSlider() const;
  // The open Kill confirmation, or nullptr.
  QMessageBox* killConfirmation() const;
  QString titleText() const;
  QString statusText() const;
  // "Failed: <why>" at the top of the page while the followed run is failed ("" otherwise).
  QString failureText() const;
  QString logText() const;
  LogFind* logFind() const;  // the log's find row
  // The followed run's text samples, one "step N: text" paragraph each.
  QString samplesText() const;
  bool replaying() const { return m_replaying; }

  // Refreshes now (what the timer does); returns whether any plot was redrawn.
  bool refresh();

 protected:
  void showEvent(QShowEvent* event) override;

 private:
  void appendLog(const QString& level, const QString& text);
  void appendSample(qint64 step, const QString& text);
  void setStateText(const QString& text);
  void addPickerEntry(RunHandle* run);
  static QString pickerLabel(const RunHandle* run);  // "name", or "name (nodes a, b)" for a run elsewhere
  void syncPicker();
  void pollSamples();
  // Points the poller at the followed run (restart: read its readings again from the start).
  void followSamples(bool restart);
  void onSamples(const NodeSampleBatch& batch);
  void onRecord(const flotilla::MetricsRecord& record);
  void replayHistory();
  void confirmKill();
  void updateControls();
  void updateStatus();

  QPointer<RunHandle> m_run;
  QLabel* m_title;
  QLabel* m_state;
  QLabel* m_status;
  QLabel* m_failure;
  QPushButton* m_stop;
  QPushButton* m_checkpoint;
  QPushButton* m_kill;
  LiveDashboard* m_dashboard;
  CommPanel* m_comm;
  QPlainTextEdit* m_log;
  LogFind* m_logFind = nullptr;
  QPlainTextEdit* m_samplesView;
  QTimer* m_timer;
  QComboBox* m_picker;
  QVector<QPointer<RunHandle>> m_entries;  // the picker's runs, in its order
  NodeSamplesPoller* m_samples;
  QTimer* m_samplesTimer;
  QPointer<QMessageBox> m_confirm;
  bool m_replaying = false;
  bool m_resampleQueued = false;            // node readings to be placed again after late history
  quint64 m_followId = 0;                   // which setRun() a finished replay belongs to
  QVector<flotilla::MetricsRecord> m_held;  // records that arrived during a replay
};

}  // namespace flotilla::ui
