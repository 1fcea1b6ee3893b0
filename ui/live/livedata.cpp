// Live dashboard data (see livedata.h).
#include "ui/live/livedata.h"

#include <QCoreApplication>

#include <algorithm>

#include <cmath>
#include <limits>

#include "db/queries.h"

namespace flotilla::ui {

namespace live_col {
QString stackSum(int level) { return QStringLiteral("slowest_stack_%1").arg(level); }
QString gpuUtil(int device) { return QStringLiteral("gpu%1_util_pct").arg(device); }
QString gpuMem(int device) { return QStringLiteral("gpu%1_mem_mib").arg(device); }
QString nodeUtil(const QString& device) { return device + QStringLiteral(" util_pct"); }
QString nodeMem(const QString& device) { return device + QStringLiteral(" mem_pct"); }
}  // namespace live_col

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kMib = 1024.0 * 1024.0;

enum Col {
  cStep,
  cTokens,
  cWall,
  cLoss,
  cLr,
  cTps,
  cMfu,
  cRss,
  cSpend,
  cSlowCompute,
  cSlowComm,
  cSlowBubble,
  cSlowData,
  cStack1,
  cStack2,
  cStack3,
  cStack4,
  cCount
};

// A rank's step split from the record's per-rank array (data, forward, backward, optimizer,
// comm, step, bubble: metrics.h).
RankTimes rankTimesOf(const std::vector<float>& f, int rank) {
  RankTimes r;
  r.rank = rank;
  const auto at = [&](size_t i) { return i < f.size() ? static_cast<double>(f[i]) : 0.0; };
  r.compute = at(1) + at(2) + at(3);
  r.comm = at(4);
  r.bubble = at(6);
  r.data = at(0);
  return r;
}

QString trText(const char* text) { return QCoreApplication::translate("flotilla::ui::LiveData", text); }
}  // namespace

LiveData::LiveData() { clear(); }

void LiveData::clear() {
  m_steps.clear();
  m_evals.clear();
  m_tasks.clear();
  m_taskSeries.clear();
  const QString names[cCount] = {live_col::kStep,        live_col::kTokens,     live_col::kWall,
                                 live_col::kLoss,        live_col::kLr,         live_col::kTokensPerSec,
                                 live_col::kMfuPct,      live_col::kRssMib,     live_col::kSpend,
                                 live_col::kSlowCompute, live_col::kSlowComm,   live_col::kSlowBubble,
                                 live_col::kSlowData,    live_col::stackSum(1), live_col::stackSum(2),
                                 live_col::stackSum(3),  live_col::stackSum(4)};
  for (int i = 0; i < cCount; ++i) m_cols[i] = m_steps.column(names[i]);
  for (const QString& n : {live_col::kStep, live_col::kTokens, live_col::kWall, live_col::kValLoss})
    m_evals.column(n);
  for (const QString& n : {live_col::kStep, live_col::kTokens, live_col::kWall}) m_tasks.column(n);
  m_window.clear();
  m_windowNext = 0;
  ++m_rankRevision;
  m_t0 = m_lastWall = m_lastTokens = 0;
  m_lastStep = m_startStep = m_plannedSteps = 0;
  m_worldSize = 1;
  m_baselineRss = 0;
  m_gpuCount = 0;
  m_gpuMemTotal = 0;
  m_checkpointInterval.clear();
  m_cost = RunCost{};
  clearNodeSamples();
}

void LiveData::clearNodeSamples() {
  m_nodeGpus.clear();
  for (const QString& n : {live_col::kStep, live_col::kTokens, live_col::kWall}) m_nodeGpus.column(n);
  m_nodeDevices.clear();
  m_nodeHasMem.clear();
  m_nodeState.clear();
  m_nodeRowTime = 0;
}

double LiveData::stepAtWall(double wall, const QString& column) const {
  const QVector<double>& xs = m_steps.values(m_cols[cWall]);
  const QVector<double>& ys = m_steps.values(column);
  const qsizetype n = std::min(xs.size(), ys.size());
  if (n == 0) return column == live_col::kStep ? double(m_startStep) : 0.0;
  // The last step row at or before `wall`; between two rows, linear; outside, the nearest row.
  const qsizetype i = std::upper_bound(xs.begin(), xs.begin() + n, wall) - xs.begin() - 1;
  if (i < 0) return ys[0];
  if (i >= n - 1) return ys[n - 1];
  const double span = xs[i + 1] - xs[i];
  return span > 0 ? ys[i] + (ys[i + 1] - ys[i]) * (wall - xs[i]) / span : ys[i];
}

void LiveData::nodeRow(double time) {
  m_nodeGpus.beginRow();
  m_nodeRowTime = time;
  for (NodeDeviceState& st : m_nodeState) {
    st.inRow = false;
    if (st.lastTime >= 0 && time - st.lastTime <= kNodeHoldSeconds) {
      m_nodeGpus.set(st.utilCol, st.lastUtil);
      m_nodeGpus.set(st.memCol, st.lastMem);
    }
  }
}

void LiveData::appendNodeSamples(const QVector<NodeGpuSample>& samples, double fallbackT0) {
  const double t0 = m_t0 > 0 ? m_t0 : fallbackT0;
  QVector<NodeGpuSample> sorted = samples;
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const NodeGpuSample& a, const NodeGpuSample& b) { return a.time < b.time; });
  for (const NodeGpuSample& s : std::as_const(sorted)) {
    if (!(s.time > 0) || s.device < 0) continue;
    const QString label = s.node + QLatin1Char('/') + QString::number(s.device);
    qsizetype d = m_nodeDevices.indexOf(label);
    if (d < 0) {
      d = m_nodeDevices.size();
      m_nodeDevices.append(label);
      m_nodeHasMem.append(false);
      NodeDeviceState st;
      st.utilCol = m_nodeGpus.column(live_col::nodeUtil(label));
      st.memCol = m_nodeGpus.column(live_col::nodeMem(label));
      m_nodeState.append(st);
    }
    NodeDeviceState& st = m_nodeState[d];
    // Into the current row when it is recent and has no reading of this device yet; a reading
    // older than a row it is already in would break the ascending x, so it is dropped.
    const bool fits = m_nodeRowTime > 0 && !st.inRow && s.time < m_nodeRowTime + kNodeMergeSeconds;
    if (!fits) {
      if (m_nodeRowTime > 0 && s.time < m_nodeRowTime) continue;
      nodeRow(s.time);
      const double wall = s.time - t0;
      m_nodeGpus.set(live_col::kWall, wall);
      m_nodeGpus.set(live_col::kStep, stepAtWall(wall, live_col::kStep));
      m_nodeGpus.set(live_col::kTokens, stepAtWall(wall, live_col::kTokens));
    }
    const double mem = std::isfinite(s.memUsed) && s.memTotal > 0 ? 100.0 * s.memUsed / s.memTotal : kNaN;
    if (std::isfinite(mem)) m_nodeHasMem[d] = true;
    m_nodeGpus.set(st.utilCol, s.utilPct);
    m_nodeGpus.set(st.memCol, mem);
    st.inRow = true;
    st.lastTime = s.time;
    st.lastUtil = s.utilPct;
    st.lastMem = mem;
  }
}

void LiveData::ingest(const flotilla::MetricsRecord& r) {
  const double time = r.time;
  switch (r.type) {
    case flotilla::MetricsRecordType::kStep: {
      if (r.rank != 0) return;  // run-level records come from rank 0
      const flotilla::StepRecord& rec = r.step();
      StepSample s;
      s.step = rec.step;
      s.time = time;
      s.tokens = static_cast<double>(rec.tokens);
      s.loss = static_cast<double>(rec.loss);
      s.lr = rec.lr;
      s.tokensPerSec = rec.tokens_per_s;
      s.mfu = rec.mfu;
      s.stepMs = rec.step_ms;
      s.total.rank = 0;
      s.total.compute = rec.forward_ms + rec.backward_ms + rec.optimizer_ms;
      s.total.comm = rec.comm_ms;
      s.total.bubble = rec.bubble_ms;
      s.total.data = rec.data_ms;
      for (size_t q = 0; q < rec.ranks.size(); ++q)
        s.ranks.append(rankTimesOf(rec.ranks[q], static_cast<int>(q)));
      s.slowestRank = r.slowest_rank;
      s.peakRssBytes = rec.peak_rss_bytes > 0 ? static_cast<double>(rec.peak_rss_bytes) : kNaN;
      for (const flotilla::GpuRecord& g : rec.gpus) {
        GpuSample out;
        out.device = g.device;
        out.utilPct = kNaN;  // the worker does not measure utilisation (metrics.h)
        out.memBytes = static_cast<double>(g.mem_bytes);
        m_gpuMemTotal = std::max(m_gpuMemTotal, static_cast<double>(g.mem_total_bytes));
        s.gpus.append(out);
      }
      appendStep(s);
      break;
    }
    case flotilla::MetricsRecordType::kEval:
      appendEval(r.eval().step, static_cast<double>(r.eval().tokens), time,
                 static_cast<double>(r.eval().val_loss));
      break;
    case flotilla::MetricsRecordType::kTask: {
      if (r.rank != 0) return;
      const flotilla::TaskRecord& t = r.task();
      appendTask(t.step, static_cast<double>(t.tokens), time, QString::fromStdString(t.task), t.scores);
      break;
    }
    case flotilla::MetricsRecordType::kRunStart: {
      const flotilla::RunStartRecord& s = r.run_start();
      if (m_t0 <= 0 && time > 0) m_t0 = time;
      m_plannedSteps = s.planned_steps;
      m_worldSize = std::max(1, s.world_size);
      m_baselineRss = static_cast<double>(s.baseline_rss_bytes);
      if (m_steps.rows() == 0) m_startStep = s.start_step;
      break;
    }
    case flotilla::MetricsRecordType::kEvent: {
      // checkpoint.every = "auto": the interval and its inputs, in the worker's words
      // (docs/scheduling.md); the latest one is shown.
      const flotilla::EventRecord& e = r.event();
      if (r.rank == 0 && e.fields_json.find("\"ckpt_interval_steps\"") != std::string::npos)
        m_checkpointInterval = QString::fromStdString(e.message);
      break;
    }
    default:
      break;
  }
}

void LiveData::setCost(const RunCost& cost) {
  // Past spend changes only when the price or the intervals do (an open interval only grows):
  // then the whole column follows the stored accruals, what every other page shows.
  const auto same = [](const RunCost& a, const RunCost& b) {
    if (a.known != b.known || a.usdPerHour != b.usdPerHour || a.accruals.size() != b.accruals.size())
      return false;
    for (size_t i = 0; i < a.accruals.size(); ++i)
      if (a.accruals[i].start != b.accruals[i].start || a.accruals[i].end != b.accruals[i].end ||
          a.accruals[i].usd_per_hour != b.accruals[i].usd_per_hour)
        return false;
    return true;
  };
  const bool changed = !same(m_cost, cost);
  m_cost = cost;
  if (!changed) return;
  const QVector<double> wall = m_steps.values(m_cols[cWall]);
  m_steps.rewrite(m_cols[cSpend], [&](qsizetype i) { return i < wall.size() ? spendAtWall(wall[i]) : kNaN; });
}

double LiveData::spendAtWall(double wall) const {
  if (!hasPrice()) return kNaN;
  if (!m_cost.accruals.empty() && m_t0 > 0)
    return flotilla::db::accrued_until(m_cost.accruals, m_t0 + wall, true);
  return m_cost.usdPerHour * wall / 3600.0;
}

void LiveData::appendStep(const StepSample& s) {
  // Wall time from the records' clock; without one, the sum of step times.
  double wall;
  if (s.time > 0) {
    if (m_t0 <= 0) m_t0 = s.time;
    wall = s.time - m_t0;
  } else {
    wall = m_lastWall + s.stepMs / 1000.0 * double(std::max<qint64>(1, s.step - m_lastStep));
  }
  double tokens = s.tokens;
  if (tokens < 0) tokens = m_lastTokens + s.tokensPerSec * std::max(0.0, wall - m_lastWall);
  m_lastWall = wall;
  m_lastTokens = tokens;
  m_lastStep = s.step;

  m_steps.beginRow();
  const int* c = m_cols;
  m_steps.set(c[cStep], double(s.step));
  m_steps.set(c[cTokens], tokens);
  m_steps.set(c[cWall], wall);
  m_steps.set(c[cLoss], s.loss);
  m_steps.set(c[cLr], s.lr);
  m_steps.set(c[cTps], s.tokensPerSec);
  m_steps.set(c[cMfu], std::isfinite(s.mfu) && s.mfu > 0 ? s.mfu * 100.0 : kNaN);
  m_steps.set(c[cRss], s.peakRssBytes / kMib);
  m_steps.set(c[cSpend], spendAtWall(wall));

  // The slowest rank's split (the run's own when single-rank) and its running sums.
  QVector<RankTimes> ranks = s.ranks;
  if (ranks.isEmpty()) ranks.append(s.total);
  const RankTimes* slow = &ranks.front();
  for (const RankTimes& r : ranks)
    if (r.rank == s.slowestRank) slow = &r;
  m_steps.set(c[cSlowCompute], slow->compute);
  m_steps.set(c[cSlowComm], slow->comm);
  m_steps.set(c[cSlowBubble], slow->bubble);
  m_steps.set(c[cSlowData], slow->data);
  m_steps.set(c[cStack1], slow->compute);
  m_steps.set(c[cStack2], slow->compute + slow->comm);
  m_steps.set(c[cStack3], slow->compute + slow->comm + slow->bubble);
  m_steps.set(c[cStack4], slow->total());

  for (const GpuSample& g : s.gpus) {
    if (g.device < 0 || g.device > 63) continue;
    m_gpuCount = std::max(m_gpuCount, g.device + 1);
    m_steps.set(live_col::gpuUtil(g.device), g.utilPct);
    m_steps.set(live_col::gpuMem(g.device), g.memBytes / kMib);
  }

  if (m_window.size() < kRankWindow) {
    m_window.append(ranks);
  } else {
    m_window[m_windowNext] = ranks;
    m_windowNext = (m_windowNext + 1) % kRankWindow;
  }
  ++m_rankRevision;
}

void LiveData::appendEval(qint64 step, double tokens, double time, double valLoss) {
  double wall = m_lastWall;
  if (time > 0 && m_t0 > 0) wall = time - m_t0;
  m_evals.beginRow();
  m_evals.set(live_col::kStep, double(step));
  m_evals.set(live_col::kTokens, tokens >= 0 ? tokens : m_lastTokens);
  m_evals.set(live_col::kWall, wall);
  m_evals.set(live_col::kValLoss, valLoss);
}

void LiveData::appendTask(qint64 step, double tokens, double time, const QString& task,
                          const std::vector<std::pair<std::string, double>>& scores) {
  double wall = m_lastWall;
  if (time > 0 && m_t0 > 0) wall = time - m_t0;
  const QVector<double>& steps = m_tasks.values(live_col::kStep);
  if (steps.isEmpty() || steps.last() != double(step)) {
    m_tasks.beginRow();
    m_tasks.set(live_col::kStep, double(step));
    m_tasks.set(live_col::kTokens, tokens >= 0 ? tokens : m_lastTokens);
    m_tasks.set(live_col::kWall, wall);
  }
  std::vector<std::string> names;
  for (const auto& [score, value] : scores) {
    names.push_back(score);
    m_tasks.set(QStringLiteral("task/%1/%2").arg(task, QString::fromStdString(score)), value);
  }
  const std::string headline = flotilla::db::task_headline(names);
  if (headline.empty()) return;
  const QString column = QStringLiteral("task/%1/%2").arg(task, QString::fromStdString(headline));
  if (!m_taskSeries.contains(column)) m_taskSeries.append(column);
}

QVector<RankTimes> LiveData::rankWindow() const {
  QVector<RankTimes> sums;
  QVector<int> counts;
  for (const QVector<RankTimes>& record : m_window) {
    for (const RankTimes& r : record) {
      qsizetype i = 0;
      while (i < sums.size() && sums[i].rank != r.rank) ++i;
      if (i == sums.size()) {
        RankTimes zero;
        zero.rank = r.rank;
        sums.append(zero);
        counts.append(0);
      }
      sums[i].compute += r.compute;
      sums[i].comm += r.comm;
      sums[i].bubble += r.bubble;
      sums[i].data += r.data;
      ++counts[i];
    }
  }
  for (qsizetype i = 0; i < sums.size(); ++i) {
    const double n = counts[i];
    sums[i].compute /= n;
    sums[i].comm /= n;
    sums[i].bubble /= n;
    sums[i].data /= n;
  }
  std::sort(sums.begin(), sums.end(), [](const RankTimes& a, const RankTimes& b) { return a.rank < b.rank; });
  return sums;
}

int LiveData::slowestRank() const {
  const QVector<RankTimes> ranks = rankWindow();
  int slowest = -1;
  double worst = -1;
  for (const RankTimes& r : ranks) {
    if (r.total() > worst) {
      worst = r.total();
      slowest = r.rank;
    }
  }
  return slowest;
}

QString LiveData::rateText() const {
  if (!m_cost.known) return trText("the run's price is read from the run store");
  if (hasPrice()) {
    QString text =
        trText("rate $%1/h, stored with the run when it started").arg(m_cost.usdPerHour, 0, 'f', 2);
    if (!m_cost.source.isEmpty()) text += trText(" (%1)").arg(m_cost.source);
    return text;
  }
  return trText(
      "this run is unpriced (no price on the wizard's Budget page, and none for its machine or nodes on "
      "the Costs page): it costs nothing here");
}

double LiveData::spentUsd() const {
  if (!hasPrice()) return 0.0;
  if (m_cost.spentKnown) return m_cost.spentUsd;
  return spendAtWall(m_lastWall);
}

double LiveData::projectedUsd() const {
  const double end = projectedEnd(XAxisKind::WallTime);
  if (!hasPrice() || !std::isfinite(end)) return kNaN;
  return spentUsd() + m_cost.usdPerHour * std::max(0.0, end - m_lastWall) / 3600.0;
}

double LiveData::projectedEnd(XAxisKind kind) const {
  const qint64 done = m_lastStep - m_startStep;
  if (m_plannedSteps <= 0 || done <= 0 || m_lastStep <= 0) return kNaN;
  const double fraction = double(m_plannedSteps - m_startStep) / double(done);
  switch (kind) {
    case XAxisKind::Step:
      return double(m_plannedSteps);
    case XAxisKind::Tokens:
      return m_lastTokens * double(m_plannedSteps) / double(m_lastStep);
    case XAxisKind::WallTime:
      return m_lastWall * fraction;
  }
  return kNaN;
}

}  // namespace flotilla::ui
