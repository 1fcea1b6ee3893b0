// The Compare page: pick runs from the store, overlay any metric by step, tokens, wall time,
// GPU-hours or dollars (a task score "task/<task>/<score>" too, drawn with a marker per evaluation),
// and read their summaries, config differences and the cost of reaching a chosen loss or a chosen
// task score side by side.
//
// Decision: every read runs in a QtConcurrent task on its own reader connection (comparequery.h);
// results come back to the UI thread tagged with a generation number, and a result older than the
// newest request is dropped, so fast clicking never shows a stale comparison. Requests made while
// one is in flight coalesce into one follow-up.
#pragma once

#include <QString>
#include <QWidget>

#include "ui/compare/comparequery.h"
#include "ui/settings/preferences.h"

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QLineEdit;
class QSortFilterProxyModel;
class QTableView;

namespace flotilla::ui {

class CompareOverlayPlot;
class ConfigDiffModel;
class RunPickerModel;
class SummaryModel;
class TargetModel;

class ComparePage : public QWidget {
  Q_OBJECT

 public:
  // Without a database the page shows how to get one; setDatabasePath() connects it.
  explicit ComparePage(QWidget* parent = nullptr);
  explicit ComparePage(const QString& databasePath, QWidget* parent = nullptr);

  void setDatabasePath(const QString& path);
  QString databasePath() const { return m_databasePath; }

  RunPickerModel* runModel() const { return m_runs; }
  SummaryModel* summaryModel() const { return m_summary; }
  QString axisNote() const;  // "" while no run is left out of the plot
  ConfigDiffModel* configModel() const { return m_config; }
  TargetModel* targetModel() const { return m_target; }
  TargetModel* scoreTargetModel() const { return m_scoreTarget; }
  QComboBox* scoreMetricBox() const { return m_scoreMetric; }  // the task scores the runs have
  QDoubleSpinBox* targetScoreBox() const { return m_targetScore; }
  QLabel* scoreDirectionLabel() const { return m_scoreDirection; }
  CompareOverlayPlot* plot() const { return m_plot; }
  QComboBox* metricBox() const { return m_metric; }
  QComboBox* xAxisBox() const { return m_xAxis; }
  QDoubleSpinBox* targetBox() const { return m_targetLoss; }
  QCheckBox* showAllBox() const { return m_showAll; }
  QCheckBox* smoothedBox() const { return m_smoothed; }
  QLineEdit* filterEdit() const { return m_filter; }
  QComboBox* sweepBox() const { return m_sweep; }  // "Sweep…", then each sweep's name
  const CompareResult& result() const { return m_result; }
  bool busy() const { return m_listBusy || m_compareBusy; }

 public slots:
  // Re-reads the run list (and then the comparison).
  void refresh();
  void setPreferences(const flotilla::ui::Preferences& prefs);
  // Checks exactly the runs sweep `name` started (issue 37: Compare opens the group); before the
  // run list has loaded, once it has.
  void openGroup(const QString& name);

 signals:
  void runsLoaded();
  void comparisonReady();
  void queryFailed(const QString& message);

 protected:
  void showEvent(QShowEvent* event) override;

 private:
  void build();
  void requestComparison();
  void startComparison();
  void applyResult(CompareResult result);
  void fail(const QString& message);
  void applyGroup();

  QString m_databasePath;
  Preferences m_prefs;
  RunPickerModel* m_runs;
  QSortFilterProxyModel* m_proxy;
  SummaryModel* m_summary;
  ConfigDiffModel* m_config;
  TargetModel* m_target;
  TargetModel* m_scoreTarget;
  QComboBox* m_scoreMetric = nullptr;
  QDoubleSpinBox* m_targetScore = nullptr;
  QLabel* m_scoreDirection = nullptr;
  CompareOverlayPlot* m_plot = nullptr;
  QLineEdit* m_filter = nullptr;
  QComboBox* m_sweep = nullptr;
  std::vector<SweepGroup> m_sweeps;
  QString m_pendingGroup;
  QTableView* m_runView = nullptr;
  QComboBox* m_metric = nullptr;
  QComboBox* m_xAxis = nullptr;
  QCheckBox* m_logY = nullptr;
  QCheckBox* m_showAll = nullptr;
  QCheckBox* m_smoothed = nullptr;
  QDoubleSpinBox* m_targetLoss = nullptr;
  QLabel* m_status = nullptr;
  QLabel* m_axisNote = nullptr;  // why a run is missing from the Dollars axis (unpriced)
  CompareResult m_result;
  quint64 m_listGeneration = 0, m_compareGeneration = 0;
  bool m_listBusy = false, m_compareBusy = false, m_compareAgain = false;
};

}  // namespace flotilla::ui
