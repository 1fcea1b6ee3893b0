// What the Live dashboard knows about one run, built from metrics-protocol records
// (docs/metrics-protocol.md): a ColumnTable of step rows and one of eval rows, the per-rank
// step-time window, memory, GPU samples and the run's price and budget.
//
// Decision: one row per step record with every x kind in it (step, tokens, wall_s), so a plot
// switches its x axis by reading another column. Derived numbers are computed once, at ingest:
// compute = forward + backward + optimizer, the slowest rank's stacked sums for the area plot,
// spend = the run's $/h x wall time. The price comes from the run config's [budget] section in
// run_start (usd_per_hour; price_source named); a run without one says so instead of drawing
// a made-up $0 curve. Wall time is `time` minus the first record's `time`; records without a
// wall clock (time 0, as in test streams) fall back to the sum of step_ms. Not a QObject:
// the page owns one and replays a run's file into a fresh one without touching the widgets.
#pragma once

#include <QJsonObject>
#include <QString>
#include <QVector>

#include "ui/plot/columntable.h"
#include "ui/plot/plotpanel.h"
#include "ui/plot/rankbarsplot.h"

namespace flotilla::ui {

// Column names of LiveData::steps() (evals() has step, tokens, wall_s, val_loss).
namespace live_col {
inline const QString kStep = QStringLiteral("step");
inline const QString kTokens = QStringLiteral("tokens");
inline const QString kWall = QStringLiteral("wall_s");
inline const QString kLoss = QStringLiteral("loss");
inline const QString kValLoss = QStringLiteral("val_loss");
inline const QString kLr = QStringLiteral("lr");
inline const QString kTokensPerSec = QStringLiteral("tokens_per_s");
inline const QString kMfuPct = QStringLiteral("mfu_pct");
inline const QString kRssMib = QStringLiteral("rss_mib");
inline const QString kSpend = QStringLiteral("spend_usd");
// The slowest rank's breakdown (ms) and its running sums for the stacked area.
inline const QString kSlowCompute = QStringLiteral("slowest_compute_ms");
inline const QString kSlowComm = QStringLiteral("slowest_comm_ms");
inline const QString kSlowBubble = QStringLiteral("slowest_bubble_ms");
inline const QString kSlowData = QStringLiteral("slowest_data_ms");
QString stackSum(int level);  // "slowest_stack_1" .. "slowest_stack_4"
QString gpuUtil(int device);  // "gpu0_util_pct"
QString gpuMem(int device);   // "gpu0_mem_mib"
}  // namespace live_col

class LiveData {
 public:
  static constexpr int kRankWindow = 20;

  struct GpuSample {
    int device = 0;
    double utilPct = 0;
    double memBytes = 0;
  };
  struct StepSample {
    qint64 step = 0;
    double time = 0;  // Unix seconds, 0 when unknown
    double tokens = -1;  // < 0: unknown
    double loss = 0, lr = 0, tokensPerSec = 0, mfu = 0, stepMs = 0;
    RankTimes total;          // the run's own time_ms split (rank 0 / single rank)
    QVector<RankTimes> ranks;  // multi-rank runs
    int slowestRank = -1;
    double peakRssBytes = 0;
    QVector<GpuSample> gpus;
  };

  LiveData();

  // Any protocol record; unknown types and fields are ignored.
  void ingest(const QJsonObject& record);
  void appendStep(const StepSample& sample);
  void appendEval(qint64 step, double tokens, double time, double valLoss);
  void clear();

  const ColumnTable& steps() const { return m_steps; }
  const ColumnTable& evals() const { return m_evals; }
  // Reserves room for `rows` steps (the 1M-point tests and benchmark).
  void reserve(qsizetype rows) { m_steps.reserve(rows); }

  // Means over the latest kRankWindow step records, one entry per rank.
  QVector<RankTimes> rankWindow() const;
  int rankWindowSize() const { return static_cast<int>(m_window.size()); }
  // The rank with the longest mean step time in the window (-1 when empty).
  int slowestRank() const;
  quint64 rankRevision() const { return m_rankRevision; }

  qint64 plannedSteps() const { return m_plannedSteps; }
  int worldSize() const { return m_worldSize; }
  double baselineRssMib() const { return m_baselineRss / (1024.0 * 1024.0); }
  int gpuCount() const { return m_gpuCount; }
  double gpuMemTotalMib() const { return m_gpuMemTotal / (1024.0 * 1024.0); }

  // Price and budget from the run config's [budget] section.
  double usdPerHour() const { return m_usdPerHour; }
  double maxUsd() const { return m_maxUsd; }
  QString priceSource() const { return m_priceSource; }
  bool hasPrice() const { return m_usdPerHour > 0; }
  // Where the rate comes from, in words for the UI.
  QString rateText() const;
  double spentUsd() const;
  // The projected spend at the planned last step (NaN when the price or the plan is unknown),
  // and the x where the run is projected to end for each axis kind.
  double projectedUsd() const;
  double projectedEnd(XAxisKind kind) const;

 private:
  ColumnTable m_steps, m_evals;
  int m_cols[32] = {};
  QVector<QVector<RankTimes>> m_window;  // ring of the latest step records' ranks
  qsizetype m_windowNext = 0;
  quint64 m_rankRevision = 0;
  double m_t0 = 0;
  double m_lastWall = 0;
  double m_lastTokens = 0;
  qint64 m_lastStep = 0;
  qint64 m_startStep = 0;
  qint64 m_plannedSteps = 0;
  int m_worldSize = 1;
  double m_baselineRss = 0;
  int m_gpuCount = 0;
  double m_gpuMemTotal = 0;
  double m_usdPerHour = 0;
  double m_maxUsd = 0;
  QString m_priceSource;
};

}  // namespace flotilla::ui
