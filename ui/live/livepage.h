// The Live page: one run as it trains — its state, progress numbers, the loss plot, the
// worker's events — with Stop (graceful) and Kill.
//
// Decision: nothing here reacts to individual records. Records land in the run's SeriesStore;
// one 40 ms timer refreshes the plot (only when the store's revision moved) and the status line,
// so the page redraws at most 25 times a second however fast a worker reports, and a hidden page
// does not redraw at all.
#pragma once

#include <QPointer>
#include <QWidget>

class QLabel;
class QPlainTextEdit;
class QPushButton;
class QSlider;
class QTimer;

namespace flotilla::ui {

class LocalRun;
class LossPlot;
class SeriesStore;

class LivePage : public QWidget {
  Q_OBJECT

 public:
  static constexpr int kRefreshMs = 40;

  explicit LivePage(QWidget* parent = nullptr);

  // Follows `run` (nullptr: none). The page never owns the run.
  void setRun(LocalRun* run);
  LocalRun* run() const;
  // The followed run's series store, or nullptr.
  const SeriesStore* series() const;

  LossPlot* lossPlot() const { return m_plot; }
  QPushButton* stopButton() const { return m_stop; }
  QPushButton* killButton() const { return m_kill; }
  QSlider* smoothingSlider() const { return m_smoothing; }
  QString titleText() const;
  QString statusText() const;
  QString logText() const;

  // Refreshes now (what the timer does); returns whether the plot was redrawn.
  bool refresh();

 protected:
  void showEvent(QShowEvent* event) override;

 private:
  void appendLog(const QString& level, const QString& text);
  void updateControls();
  void updateStatus();

  QPointer<LocalRun> m_run;
  QLabel* m_title;
  QLabel* m_state;
  QLabel* m_status;
  QPushButton* m_stop;
  QPushButton* m_kill;
  LossPlot* m_plot;
  QSlider* m_smoothing;
  QLabel* m_smoothingValue;
  QPlainTextEdit* m_log;
  QTimer* m_timer;
};

}  // namespace flotilla::ui
