// What the Live dashboard knows about one run, built from metrics-protocol records
// (docs/metrics-protocol.md): a ColumnTable of step rows and one of eval rows, the per-rank
// step-time window, memory, GPU samples and the run's price and budget.
//
// Decision: one row per step record with every x kind in it (step, tokens, wall_s), so a plot
// switches its x axis by reading another column. Derived numbers are computed once, at ingest:
// compute = forward + backward + optimizer, the slowest rank's stacked sums for the area plot,
// spend = the store's accruals at each record's time. The price and the spend are the run
// store's (the price resolved and stored when the run started, its accruals: setCost), never
// the config's, so the Live page shows the figure every other page shows; a run without a price
// says so instead of drawing a made-up $0 curve. Wall time is `time` minus the first record's `time`; records
// without a wall clock (time 0, as in test streams) fall back to the sum of step_ms. GPU readings of the
// run's nodes (the store's system samples, sampled on their own clock every few seconds) go into
// a table of their own, placed by time: their step and tokens are interpolated from the step
// rows, so they share every x axis with the records. Not a QObject: the page owns one and
// replays a run's file into a fresh one without touching the widgets.
#pragma once

#include <QString>
#include <QVector>

#include <vector>

#include "db/costs.h"
#include "engine/train/metrics_reader.h"

#include "ui/plot/columntable.h"
#include "ui/plot/plotpanel.h"
#include "ui/plot/rankbarsplot.h"

namespace flotilla::ui {

// Column names of LiveData::steps() (evals() has step, tokens, wall_s, val_loss; tasks() has step,
// tokens, wall_s and one column per task score, named by its metric "task/<task>/<score>").
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
// Columns of LiveData::nodeGpus() (besides step, tokens, wall_s) for device label "node-a/0".
QString nodeUtil(const QString& device);  // "node-a/0 util_pct"
QString nodeMem(const QString& device);   // "node-a/0 mem_pct"
}  // namespace live_col

// One reading of one GPU of a run's node from the store's system_samples (nodesamples.h).
// What the run store says a run costs: its stored price, its cap and its accruals so far.
struct RunCost {
  bool known = false;     // read from the store (false: not yet)
  double usdPerHour = 0;  // the run's stored price (0: unpriced)
  QString source;         // where the price came from
  double maxUsd = 0;      // the run's cap (0: none)
  std::vector<flotilla::db::Accrual> accruals;
  bool spentKnown = false;
  double spentUsd = 0;  // accrued up to the moment it was read
};

struct NodeGpuSample {
  QString node;
  int device = 0;
  double time = 0;      // Unix seconds
  double utilPct = 0;   // NaN when not reported
  double memUsed = 0;   // bytes, NaN when not reported
  double memTotal = 0;  // bytes, NaN or 0 when not reported
};

class LiveData {
 public:
  static constexpr int kRankWindow = 20;
  // Node readings this close in time share a row; a device missing from a row keeps its last
  // reading when that is at most kNodeHoldSeconds old (nodes are sampled one after another, so
  // their clocks never line up exactly), else it is a gap.
  static constexpr double kNodeMergeSeconds = 2.0;
  static constexpr double kNodeHoldSeconds = 15.0;

  struct GpuSample {
    int device = 0;
    double utilPct = 0;
    double memBytes = 0;
  };
  struct StepSample {
    qint64 step = 0;
    double time = 0;     // Unix seconds, 0 when unknown
    double tokens = -1;  // < 0: unknown
    double loss = 0, lr = 0, tokensPerSec = 0, mfu = 0, stepMs = 0;
    RankTimes total;           // the run's own time_ms split (rank 0 / single rank)
    QVector<RankTimes> ranks;  // multi-rank runs
    int slowestRank = -1;
    double peakRssBytes = 0;
    QVector<GpuSample> gpus;
  };

  LiveData();

  // Any protocol record (rank 0's run-level ones; others are ignored).
  void ingest(const flotilla::MetricsRecord& record);
  // The run's price, cap and accruals as the store has them (the spend column follows them).
  void setCost(const RunCost& cost);
  const RunCost& cost() const { return m_cost; }
  void appendStep(const StepSample& sample);
  void appendEval(qint64 step, double tokens, double time, double valLoss);
  // An evaluation task's scores at a step (a `task` record): the tasks evaluated at one step share
  // a row of tasks(); the task's headline score (db::task_headline) becomes a series of its own.
  void appendTask(qint64 step, double tokens, double time, const QString& task,
                  const std::vector<std::pair<std::string, double>>& scores);
  // Readings of the run's nodes' GPUs (oldest first per node), placed on the same wall clock as
  // the step records (time - timeOrigin(), or - `fallbackT0` while no record had a time) and at
  // the step and tokens interpolated from the step rows at that time.
  void appendNodeSamples(const QVector<NodeGpuSample>& samples, double fallbackT0);
  // Drops the node readings only (a replay replaced the steps they were placed against).
  void clearNodeSamples();
  void clear();

  const ColumnTable& steps() const { return m_steps; }
  const ColumnTable& evals() const { return m_evals; }
  const ColumnTable& tasks() const { return m_tasks; }
  // The headline score columns of tasks() in order of first appearance ("task/arc-mini/acc_norm").
  const QStringList& taskSeries() const { return m_taskSeries; }
  // Node GPU readings: one row per sampling instant (readings within kNodeMergeSeconds of the
  // row's first one share it), columns step, tokens, wall_s and two per device (nodeDevices()).
  const ColumnTable& nodeGpus() const { return m_nodeGpus; }
  // Device labels "node/gpu" in order of first appearance, and whether each reports memory.
  const QStringList& nodeDevices() const { return m_nodeDevices; }
  bool nodeDeviceHasMemory(int index) const { return m_nodeHasMem.value(index); }
  // The Unix time wall_s counts from (the first record's time; 0 while unknown).
  double timeOrigin() const { return m_t0; }
  // Reserves room for `rows` steps (the 1M-point tests and benchmark).
  void reserve(qsizetype rows) { m_steps.reserve(rows); }

  // Means over the latest kRankWindow step records, one entry per rank.
  QVector<RankTimes> rankWindow() const;
  int rankWindowSize() const { return static_cast<int>(m_window.size()); }
  // The rank with the longest mean step time in the window (-1 when empty).
  int slowestRank() const;
  quint64 rankRevision() const { return m_rankRevision; }

  // checkpoint.every = "auto": the latest "checkpoint interval: every N steps (...)" ("" none).
  const QString& checkpointInterval() const { return m_checkpointInterval; }
  qint64 plannedSteps() const { return m_plannedSteps; }
  int worldSize() const { return m_worldSize; }
  double baselineRssMib() const { return m_baselineRss / (1024.0 * 1024.0); }
  int gpuCount() const { return m_gpuCount; }
  double gpuMemTotalMib() const { return m_gpuMemTotal / (1024.0 * 1024.0); }

  // Price and budget as the store has them (setCost).
  double usdPerHour() const { return m_cost.usdPerHour; }
  double maxUsd() const { return m_cost.maxUsd; }
  QString priceSource() const { return m_cost.source; }
  bool hasPrice() const { return m_cost.usdPerHour > 0; }
  // Where the rate comes from, in words for the UI.
  QString rateText() const;
  double spentUsd() const;
  // The projected spend at the planned last step (NaN when the price or the plan is unknown),
  // and the x where the run is projected to end for each axis kind.
  double projectedUsd() const;
  double projectedEnd(XAxisKind kind) const;

 private:
  struct NodeDeviceState {
    int utilCol = -1, memCol = -1;
    double lastTime = -1, lastUtil = 0, lastMem = 0;
    bool inRow = false;  // has its own reading in the current (last) row
  };
  void nodeRow(double time);
  double stepAtWall(double wall, const QString& column) const;
  double spendAtWall(double wall) const;

  ColumnTable m_steps, m_evals, m_tasks, m_nodeGpus;
  QStringList m_taskSeries;
  QStringList m_nodeDevices;
  QVector<bool> m_nodeHasMem;
  QVector<NodeDeviceState> m_nodeState;
  double m_nodeRowTime = 0;  // Unix time of the current node row (0: none yet)
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
  RunCost m_cost;
  QString m_checkpointInterval;
};

}  // namespace flotilla::ui
