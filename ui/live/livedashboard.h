// The Live dashboard's plots for one run: loss (with the smoothing slider), evaluation task scores
// (eval.tasks: each task's headline score, shown once the first task record arrives), learning rate,
// tokens/s and MFU, step time per rank and the slowest rank's breakdown over time, memory, GPU
// utilisation, and spend against the budget with the projected total; an x-axis switch (step,
// tokens, wall time), linear/log y, and export of any plot (context menu or the Export button).
//
// Decision: data and drawing are decoupled by dirty state, and drawing has a time budget.
// ingest() only appends to LiveData (no widget work). refresh(), called by the page's single
// 40 ms timer, redraws the plots whose data or settings moved, round-robin, and stops once it
// has spent its budget; the rest stay dirty for the next tick. So replots are bounded by the
// timer (≤ 25/s per plot) and one tick never blocks the event loop for nine 1M-point plots at
// once, only for about one budget.
//
// The GPU plot has two sources. Worker records that carry a `gpus` field give one point per
// step (local GPU runs). Readings of the run's nodes from the store (LiveData::nodeGpus(), fed by
// the page) give one line per node and GPU ("node-a/0"), plus its memory in per cent of the
// device's total while there are at most kMaxMemoryLines devices; once the first node reading
// arrives, the plot is rebuilt over that table and the records' GPU lines stay in the memory plot.
#pragma once

#include <QList>
#include <QWidget>

#include "ui/live/livedata.h"

class QCheckBox;
class QComboBox;
class QGridLayout;
class QLabel;
class QSlider;
class QToolButton;

namespace flotilla::ui {

class ChartPlot;
class LossPlot;
class PlotPanel;
class RankBarsPlot;

class LiveDashboard : public QWidget {
  Q_OBJECT

 public:
  static constexpr int kRefreshBudgetMs = 20;
  static constexpr int kMaxMemoryLines = 4;

  explicit LiveDashboard(QWidget* parent = nullptr);
  ~LiveDashboard() override;

  void ingest(const flotilla::MetricsRecord& record);
  // Direct access (replay, tests, the benchmark); call dataChanged() after changing it.
  LiveData& data() { return m_data; }
  const LiveData& data() const { return m_data; }
  void dataChanged();
  void reset();
  // Shown in every plot while there is no data ("No run selected").
  void setEmptyMessage(const QString& message);
  // The followed run's nodes (named in the GPU plot's empty state; empty: not known).
  void setRunNodes(const QStringList& nodes);
  // Whether the GPU plot draws the nodes' readings (else the records' `gpus` field).
  bool gpuFromNodes() const { return m_gpuFromNodes; }

  void setXAxisKind(XAxisKind kind);
  XAxisKind xAxisKind() const { return m_xKind; }
  void setLogY(bool log);

  // Redraws dirty plots within kRefreshBudgetMs (at least one); returns how many redrew.
  int refresh(int budgetMs = kRefreshBudgetMs);
  // Redraws every dirty plot (tests, screenshots, export).
  void refreshAll();
  int replotCount() const;  // over all plots

  const QList<PlotPanel*>& plots() const { return m_plots; }
  PlotPanel* plot(const QString& objectName) const;
  LossPlot* lossPlot() const { return m_loss; }
  RankBarsPlot* rankBars() const { return m_ranks; }
  ChartPlot* spendPlot() const { return m_spend; }
  // Task scores: in plots() (and shown) from the run's first task record on.
  ChartPlot* taskPlot() const { return m_task; }
  ChartPlot* gpuPlot() const { return m_gpu; }
  QSlider* smoothingSlider() const { return m_smoothing; }
  QComboBox* xAxisBox() const { return m_xBox; }
  QCheckBox* logBox() const { return m_logBox; }
  QCheckBox* wholeRunBox() const { return m_wholeRun; }
  QToolButton* exportButton() const { return m_export; }
  QString spendText() const;
  QLabel* intervalLabel() const { return m_intervalLabel; }
  // Dollars with the digits a small amount needs ("$0.0201", "$1.74").
  static QString money(double usd);

 private:
  void updateDerived();
  void addGpuSeries();
  void addTaskSeries();
  void setupTaskPlot(ChartPlot* plot);
  void addNodeSeries();
  // Replaces the GPU plot by a fresh one over the node readings (`nodes`) or the step records.
  void rebuildGpuPlot(bool nodes);

  LiveData m_data;
  XAxisKind m_xKind = XAxisKind::Step;
  LossPlot* m_loss;
  ChartPlot* m_lr;
  ChartPlot* m_throughput;
  RankBarsPlot* m_ranks;
  ChartPlot* m_stepArea;
  ChartPlot* m_memory;
  ChartPlot* m_gpu;
  ChartPlot* m_spend;
  ChartPlot* m_task;
  int m_taskSeries = 0;
  QLabel* m_spendLabel;
  QLabel* m_intervalLabel;  // checkpoint.every = "auto": the chosen interval and its inputs
  QSlider* m_smoothing;
  QLabel* m_smoothingValue;
  QComboBox* m_xBox;
  QCheckBox* m_logBox;
  QCheckBox* m_wholeRun;  // x axes span the planned steps (off: they follow the data)
  QToolButton* m_export;
  QList<PlotPanel*> m_plots;
  qsizetype m_next = 0;  // round-robin start of the next refresh
  quint64 m_drawnRanks = 0;
  int m_gpuSeries = 0;
  int m_nodeSeries = 0;
  bool m_gpuFromNodes = false;
  bool m_nodeMemory = false;
  QStringList m_runNodes;
  QGridLayout* m_grid = nullptr;
  QString m_emptyMessage;
};

}  // namespace flotilla::ui
