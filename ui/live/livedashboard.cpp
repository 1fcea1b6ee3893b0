// Live dashboard (see livedashboard.h).
#include "ui/live/livedashboard.h"

#include <QCheckBox>
#include <QComboBox>
#include <QElapsedTimer>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QMenu>
#include <QScrollArea>
#include <QSlider>
#include <QToolButton>
#include <QVBoxLayout>

#include <cmath>

#include "db/queries.h"
#include "ui/plot/chartplot.h"
#include "ui/plot/lossplot.h"
#include "ui/plot/rankbarsplot.h"

namespace flotilla::ui {
namespace {
constexpr double kDefaultSmoothing = 0.6;
// The bars' hues (rankbarsplot.cpp), so the area over steps reads as the same breakdown.
const QColor kCompute(0x3b, 0x7d, 0xd8), kComm(0xe0, 0x4f, 0x2a), kBubble(0x93, 0x6c, 0xc8),
    kData(0x3a, 0xa6, 0x5c);
const QColor kGpuColors[] = {QColor(0x3b, 0x7d, 0xd8), QColor(0xe8, 0x71, 0x0a), QColor(0x3a, 0xa6, 0x5c),
                             QColor(0x93, 0x6c, 0xc8), QColor(0xc2, 0x3b, 0x6e), QColor(0x2a, 0x9d, 0xa8),
                             QColor(0x8a, 0x6d, 0x3b), QColor(0x55, 0x55, 0x55)};
}  // namespace

LiveDashboard::LiveDashboard(QWidget* parent)
    : QWidget(parent),
      m_loss(new LossPlot(this)),
      m_lr(new ChartPlot(QStringLiteral("lrPlot"), tr("Learning rate"), tr("lr"), this)),
      m_throughput(new ChartPlot(QStringLiteral("throughputPlot"), tr("Throughput"), tr("tokens/s"), this)),
      m_ranks(new RankBarsPlot(this)),
      m_stepArea(
          new ChartPlot(QStringLiteral("stepAreaPlot"), tr("Slowest rank: step time"), tr("ms"), this)),
      m_memory(new ChartPlot(QStringLiteral("memoryPlot"), tr("Memory"), tr("MiB"), this)),
      m_gpu(new ChartPlot(QStringLiteral("gpuPlot"), tr("GPU utilisation"), tr("%"), this)),
      m_spend(new ChartPlot(QStringLiteral("spendPlot"), tr("Spend"), tr("US$"), this)),
      m_task(new ChartPlot(QStringLiteral("taskPlot"), tr("Task scores"), tr("score"), this)),
      m_spendLabel(new QLabel(this)),
      m_intervalLabel(new QLabel(this)),
      m_smoothing(new QSlider(Qt::Horizontal, this)),
      m_smoothingValue(new QLabel(this)),
      m_xBox(new QComboBox(this)),
      m_logBox(new QCheckBox(tr("Log y"), this)),
      m_wholeRun(new QCheckBox(tr("Whole run"), this)),
      m_export(new QToolButton(this)) {
  using S = ChartPlot::Series;
  m_lr->addSeries(S{live_col::kLr, tr("learning rate"), {}, ChartPlot::Style::Line, false, {}});
  m_lr->setShowLegend(false);
  m_throughput->addSeries(S{live_col::kTokensPerSec, tr("tokens/s"), {}, ChartPlot::Style::Line, false, {}});
  m_throughput->addSeries(
      S{live_col::kMfuPct, tr("MFU (%, right)"), QColor(0xe8, 0x71, 0x0a), ChartPlot::Style::Line, true, {}});
  m_throughput->setRightAxisLabel(tr("MFU %"));
  // MFU moves with tokens/s: on an axis twice as tall it runs at half the height, both visible.
  m_throughput->setRightAxisTop(2.0);
  m_stepArea->addSeries(S{live_col::stackSum(1), tr("compute"), kCompute, ChartPlot::Style::Area, false,
                          live_col::kSlowCompute});
  m_stepArea->addSeries(
      S{live_col::stackSum(2), tr("comm. wait"), kComm, ChartPlot::Style::Area, false, live_col::kSlowComm});
  m_stepArea->addSeries(
      S{live_col::stackSum(3), tr("bubble"), kBubble, ChartPlot::Style::Area, false, live_col::kSlowBubble});
  m_stepArea->addSeries(
      S{live_col::stackSum(4), tr("data"), kData, ChartPlot::Style::Area, false, live_col::kSlowData});
  m_memory->addSeries(S{live_col::kRssMib, tr("RSS (peak)"), {}, ChartPlot::Style::Line, false, {}});
  m_spend->addSeries(S{live_col::kSpend, tr("spent"), {}, ChartPlot::Style::Line, false, {}});
  for (ChartPlot* p : {m_lr, m_throughput, m_stepArea, m_memory, m_gpu, m_spend})
    p->setTable(&m_data.steps());
  for (ChartPlot* p : {m_throughput, m_stepArea, m_memory, m_spend}) p->setYFromZero(true);
  m_gpu->setFixedYRange(0, 105);
  m_loss->setTables(&m_data.steps(), live_col::kLoss, &m_data.evals(), live_col::kValLoss);
  m_loss->setSmoothing(kDefaultSmoothing);
  setupTaskPlot(m_task);
  m_plots = {m_loss,     m_lr,     m_throughput, m_ranks,
             m_stepArea, m_memory, m_gpu,        m_spend};  // + m_task once shown

  // Controls: x axis, log y, smoothing, export.
  m_xBox->setObjectName(QStringLiteral("xAxisBox"));
  m_xBox->addItem(tr("Step"), int(XAxisKind::Step));
  m_xBox->addItem(tr("Tokens"), int(XAxisKind::Tokens));
  m_xBox->addItem(tr("Wall time"), int(XAxisKind::WallTime));
  m_xBox->setToolTip(tr("What the x axis of the plots over time counts"));
  m_wholeRun->setObjectName(QStringLiteral("wholeRunBox"));
  m_wholeRun->setToolTip(
      tr("The x axis spans the run's planned steps (off: it follows the data). Wheel or drag on a plot to "
         "zoom and pan, double-click to go back"));
  m_logBox->setObjectName(QStringLiteral("logYBox"));
  m_logBox->setToolTip(tr("Logarithmic y axis for the loss, learning rate, throughput, memory and spend"));
  m_smoothing->setObjectName(QStringLiteral("smoothingSlider"));
  m_smoothing->setRange(0, 99);
  m_smoothing->setValue(static_cast<int>(std::lround(kDefaultSmoothing * 100)));
  m_smoothing->setMaximumWidth(180);
  m_smoothing->setToolTip(
      tr("Exponential moving average of the training loss (TensorBoard's debiased "
         "formula, computed on the raw values)"));
  m_smoothingValue->setText(QString::number(kDefaultSmoothing, 'f', 2));
  m_export->setObjectName(QStringLiteral("exportButton"));
  m_export->setText(tr("Export"));
  m_export->setToolTip(
      tr("Save any plot as PNG, SVG or PDF, or its data as CSV (also on each plot's context menu)"));
  m_export->setPopupMode(QToolButton::InstantPopup);
  auto* exportMenu = new QMenu(m_export);
  connect(exportMenu, &QMenu::aboutToShow, this, [this, exportMenu] {
    exportMenu->clear();
    for (PlotPanel* p : m_plots) p->addExportActions(exportMenu->addMenu(p->title()));
  });
  m_export->setMenu(exportMenu);

  auto* controls = new QHBoxLayout;
  controls->setContentsMargins(0, 0, 0, 0);
  controls->addWidget(new QLabel(tr("X axis"), this));
  controls->addWidget(m_xBox);
  controls->addSpacing(12);
  controls->addWidget(m_logBox);
  controls->addSpacing(12);
  controls->addWidget(m_wholeRun);
  controls->addSpacing(12);
  controls->addWidget(new QLabel(tr("Smoothing"), this));
  controls->addWidget(m_smoothing);
  controls->addWidget(m_smoothingValue);
  controls->addStretch(1);
  controls->addWidget(m_export);

  m_spendLabel->setObjectName(QStringLiteral("spendLabel"));
  m_spendLabel->setWordWrap(true);
  m_spendLabel->setForegroundRole(QPalette::PlaceholderText);
  auto* spendCell = new QWidget(this);
  auto* spendLayout = new QVBoxLayout(spendCell);
  spendLayout->setContentsMargins(0, 0, 0, 0);
  spendLayout->setSpacing(2);
  spendLayout->addWidget(m_spend, 1);
  spendLayout->addWidget(m_spendLabel);
  m_intervalLabel->setObjectName(QStringLiteral("checkpointIntervalLabel"));
  m_intervalLabel->setWordWrap(true);
  m_intervalLabel->setForegroundRole(QPalette::PlaceholderText);
  m_intervalLabel->setVisible(false);
  spendLayout->addWidget(m_intervalLabel);

  auto* grid = new QGridLayout;
  m_grid = grid;
  grid->setContentsMargins(0, 0, 0, 0);
  grid->setSpacing(8);
  grid->addWidget(m_loss, 0, 0, 1, 2);
  grid->addWidget(m_lr, 0, 2);
  grid->addWidget(m_throughput, 1, 0);
  grid->addWidget(m_ranks, 1, 1);
  grid->addWidget(m_stepArea, 1, 2);
  grid->addWidget(m_memory, 2, 0);
  grid->addWidget(m_gpu, 2, 1);
  grid->addWidget(spendCell, 2, 2);
  grid->addWidget(m_task, 3, 0, 1, 3);  // its row takes room once it shows (addTaskSeries)
  for (int r = 0; r < 3; ++r) grid->setRowStretch(r, 1);
  for (int c = 0; c < 3; ++c) grid->setColumnStretch(c, 1);

  // The grid scrolls only when the window is smaller than the plots' minimum (a small laptop
  // window); the page itself never forces the main window's minimum size up.
  auto* gridHost = new QWidget(this);
  gridHost->setLayout(grid);
  auto* scroll = new QScrollArea(this);
  scroll->setObjectName(QStringLiteral("dashboardScroll"));
  scroll->setWidgetResizable(true);
  scroll->setFrameShape(QFrame::NoFrame);
  scroll->setWidget(gridHost);
  scroll->setMinimumSize(200, 120);

  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->setSpacing(6);
  layout->addLayout(controls);
  layout->addWidget(scroll, 1);

  connect(m_xBox, &QComboBox::currentIndexChanged, this,
          [this](int) { setXAxisKind(static_cast<XAxisKind>(m_xBox->currentData().toInt())); });
  connect(m_logBox, &QCheckBox::toggled, this, &LiveDashboard::setLogY);
  connect(m_wholeRun, &QCheckBox::toggled, this, [this](bool whole) {
    for (PlotPanel* p : m_plots) p->setFollowData(!whole);
    refreshAll();
  });
  connect(m_smoothing, &QSlider::valueChanged, this, [this](int value) {
    m_loss->setSmoothing(value / 100.0);
    m_smoothingValue->setText(QString::number(value / 100.0, 'f', 2));
    m_loss->refresh();
  });
  reset();
}

LiveDashboard::~LiveDashboard() = default;

void LiveDashboard::ingest(const flotilla::MetricsRecord& record) { m_data.ingest(record); }

void LiveDashboard::dataChanged() {
  for (PlotPanel* p : m_plots) p->markDirty();
}

void LiveDashboard::setupTaskPlot(ChartPlot* plot) {
  plot->setTable(&m_data.tasks());
  plot->setRightAxisLabel(tr("bits/byte"));
  plot->setVisible(false);  // until a run's first task record (eval.tasks)
}

void LiveDashboard::reset() {
  m_data.clear();
  if (m_taskSeries > 0) {  // another run's tasks: a fresh plot without their series
    auto* fresh = new ChartPlot(QStringLiteral("taskPlot"), tr("Task scores"), tr("score"), this);
    setupTaskPlot(fresh);
    fresh->setXAxisKind(m_xKind);
    fresh->setFollowData(!m_wholeRun->isChecked());
    ChartPlot* old = m_task;
    m_grid->replaceWidget(old, fresh);
    m_plots.removeOne(old);
    m_task = fresh;
    old->hide();
    old->plotWidget()->setObjectName(QString());
    old->deleteLater();
    m_taskSeries = 0;
    m_grid->setRowStretch(3, 0);
  }
  // A new run gets its own axes: no zoom or pan of the previous run's plots is kept.
  for (PlotPanel* p : m_plots) p->resetZoom();
  m_runNodes.clear();
  if (m_gpuFromNodes) rebuildGpuPlot(false);
  m_drawnRanks = 0;
  m_ranks->setRanks({}, -1, 0);
  updateDerived();
  dataChanged();
}

void LiveDashboard::setEmptyMessage(const QString& message) {
  m_emptyMessage = message;
  for (PlotPanel* p : m_plots)
    if (p != m_gpu && p != m_spend) p->setMessage(message);
  updateDerived();
}

void LiveDashboard::setRunNodes(const QStringList& nodes) {
  if (nodes == m_runNodes) return;
  m_runNodes = nodes;
  updateDerived();
}

void LiveDashboard::setXAxisKind(XAxisKind kind) {
  m_xKind = kind;
  for (PlotPanel* p : m_plots) p->setXAxisKind(kind);
  const int index = m_xBox->findData(int(kind));
  if (index != m_xBox->currentIndex()) m_xBox->setCurrentIndex(index);
  updateDerived();
  refreshAll();  // at once, on any run: an ended one has no refresh timer to wait for
}

void LiveDashboard::setLogY(bool log) {
  for (PlotPanel* p :
       {static_cast<PlotPanel*>(m_loss), static_cast<PlotPanel*>(m_lr), static_cast<PlotPanel*>(m_throughput),
        static_cast<PlotPanel*>(m_memory), static_cast<PlotPanel*>(m_spend)})
    p->setLogY(log);
  if (m_logBox->isChecked() != log) m_logBox->setChecked(log);
  refreshAll();  // at once, on any run: an ended one has no refresh timer to wait for
}

void LiveDashboard::addGpuSeries() {
  using S = ChartPlot::Series;
  while (m_gpuSeries < m_data.gpuCount()) {
    const int i = m_gpuSeries++;
    const QColor c = kGpuColors[i % 8];
    if (!m_gpuFromNodes)
      m_gpu->addSeries(S{live_col::gpuUtil(i), tr("GPU %1").arg(i), c, ChartPlot::Style::Line, false, {}});
    m_memory->addSeries(S{live_col::gpuMem(i), tr("GPU %1").arg(i), c, ChartPlot::Style::Line, false, {}});
  }
}

// One line per task: its headline score; scores that are better lower (bits per byte) on the right
// axis, so accuracies in [0, 1] keep their own scale.
void LiveDashboard::addTaskSeries() {
  using S = ChartPlot::Series;
  const QStringList& series = m_data.taskSeries();
  while (m_taskSeries < series.size()) {
    const int i = m_taskSeries++;
    const QString& column = series[i];  // task/<task>/<score>
    const QString score = column.section(QLatin1Char('/'), -1);
    const bool right = !flotilla::db::task_score_higher_is_better(score.toStdString());
    m_task->addSeries(S{column,
                        column.mid(5).replace(QLatin1Char('/'), QLatin1Char(' ')),
                        kGpuColors[i % 8],
                        ChartPlot::Style::Line,
                        right,
                        {}});
  }
  if (!series.isEmpty() && !m_plots.contains(m_task)) {
    m_plots.append(m_task);  // from now on redrawn, exported, zoomed and switched like the others
    m_task->setXAxisKind(m_xKind);
    m_task->setVisible(true);
    m_grid->setRowStretch(3, 1);
  }
}

void LiveDashboard::addNodeSeries() {
  if (!m_gpuFromNodes) {
    if (m_data.nodeDevices().isEmpty()) return;
    rebuildGpuPlot(true);
  }
  using S = ChartPlot::Series;
  const QStringList& devices = m_data.nodeDevices();
  // Memory lines double the legend: only while it stays short (decided on the first readings).
  if (m_nodeSeries == 0) m_nodeMemory = devices.size() <= kMaxMemoryLines;
  while (m_nodeSeries < devices.size()) {
    const int i = m_nodeSeries++;
    const QString& label = devices[i];
    const QColor c = kGpuColors[i % 8];
    m_gpu->addSeries(S{live_col::nodeUtil(label), label, c, ChartPlot::Style::Line, false, {}});
    if (m_nodeMemory && m_data.nodeDeviceHasMemory(i)) {
      QColor light = c;
      light.setAlphaF(0.45);
      m_gpu->addSeries(
          S{live_col::nodeMem(label), tr("%1 memory").arg(label), light, ChartPlot::Style::Line, false, {}});
    }
  }
}

void LiveDashboard::rebuildGpuPlot(bool nodes) {
  auto* fresh = new ChartPlot(
      QStringLiteral("gpuPlot"), nodes ? tr("GPU utilisation by node") : tr("GPU utilisation"),
      nodes && m_data.nodeDevices().size() <= kMaxMemoryLines ? tr("% (memory: % of total)") : tr("%"), this);
  fresh->setFixedYRange(0, 105);
  fresh->setTable(nodes ? &m_data.nodeGpus() : &m_data.steps());
  fresh->setXAxisKind(m_xKind);
  ChartPlot* old = m_gpu;
  m_grid->replaceWidget(old, fresh);
  m_plots[m_plots.indexOf(old)] = fresh;
  fresh->setFollowData(!m_wholeRun->isChecked());
  m_gpu = fresh;
  // Not deleted here: a menu of the old plot (export) may be open in a nested event loop.
  old->hide();
  old->plotWidget()->setObjectName(QString());
  old->deleteLater();
  m_gpuFromNodes = nodes;
  m_nodeSeries = 0;
  if (!nodes) {
    using S = ChartPlot::Series;
    for (int i = 0; i < m_gpuSeries; ++i)
      m_gpu->addSeries(
          S{live_col::gpuUtil(i), tr("GPU %1").arg(i), kGpuColors[i % 8], ChartPlot::Style::Line, false, {}});
  }
  if (isVisible()) fresh->show();
}

void LiveDashboard::updateDerived() {
  if (m_data.rankRevision() != m_drawnRanks) {
    m_drawnRanks = m_data.rankRevision();
    m_ranks->setRanks(m_data.rankWindow(), m_data.slowestRank(), m_data.rankWindowSize());
  }
  addGpuSeries();
  addNodeSeries();
  addTaskSeries();
  const QString nodes = m_runNodes.isEmpty() ? tr("the run's nodes") : m_runNodes.join(QStringLiteral(", "));
  if (m_gpuFromNodes)
    m_gpu->setMessage(tr("No GPU readings from %1 yet").arg(nodes));
  else if (m_data.gpuCount() == 0 && !m_runNodes.isEmpty())
    m_gpu->setMessage(m_data.steps().rows() > 0
                          ? tr("No GPU readings from %1: no GPU there, or none sampled yet").arg(nodes)
                          : (m_emptyMessage.isEmpty() ? tr("Waiting for data…") : m_emptyMessage));
  else if (m_data.gpuCount() == 0)
    m_gpu->setMessage(m_data.steps().rows() > 0
                          ? tr("No GPU in this run: its records carry no GPU fields (a CPU run)")
                          : (m_emptyMessage.isEmpty() ? tr("Waiting for data…") : m_emptyMessage));
  else
    // The worker reports its GPUs' memory, not their utilisation (engine/train/metrics.h): the
    // memory is on the Memory plot; utilisation comes from the machine's sampled readings.
    m_gpu->setMessage(
        tr("Utilisation is not in the worker's records: its %n GPU(s)' memory is on the Memory plot", nullptr,
           m_data.gpuCount()));
  const double planned = m_data.plannedSteps() > 0 ? double(m_data.plannedSteps()) : 0.0;
  m_loss->setPlannedSteps(planned);
  const double end = m_xKind == XAxisKind::WallTime ? NAN : m_data.projectedEnd(m_xKind);
  for (ChartPlot* p : {m_lr, m_throughput, m_stepArea, m_memory, m_gpu, m_spend, m_task}) p->setXEnd(end);
  const double baseline = m_data.baselineRssMib();
  m_memory->setReferenceLine(baseline > 0 ? baseline : NAN, tr("baseline"), QColor(0x80, 0x80, 0x80));

  // Spend: the budget line and the projection from now to the planned end.
  if (m_data.hasPrice()) {
    m_spend->setReferenceLine(m_data.maxUsd() > 0 ? m_data.maxUsd() : NAN,
                              tr("budget %1").arg(money(m_data.maxUsd())));
    const QString xCol = m_xKind == XAxisKind::Step     ? live_col::kStep
                         : m_xKind == XAxisKind::Tokens ? live_col::kTokens
                                                        : live_col::kWall;
    const double x0 = m_data.steps().last(xCol);
    const double projected = m_data.projectedUsd();
    m_spend->setProjection(x0, m_data.spentUsd(), m_data.projectedEnd(m_xKind), projected,
                           tr("projected %1").arg(money(projected)));
  } else {
    m_spend->setReferenceLine(NAN, {});
    m_spend->setProjection(NAN, NAN, NAN, NAN, {});
    m_spend->setMessage(m_data.steps().rows() > 0 || m_data.plannedSteps() > 0
                            ? tr("No price for this run")
                            : (m_emptyMessage.isEmpty() ? tr("Waiting for data…") : m_emptyMessage));
  }
  const QString text = spendText();
  if (text != m_spendLabel->text()) m_spendLabel->setText(text);
  QString interval = m_data.checkpointInterval();  // "checkpoint interval: every 120 steps (...)"
  if (!interval.isEmpty()) interval[0] = interval[0].toUpper();
  if (interval != m_intervalLabel->text()) {
    m_intervalLabel->setText(interval);
    m_intervalLabel->setToolTip(
        tr("checkpoint.every = \"auto\": Daly's interval from the measured save time and "
           "the place's mean time between interruptions (docs/scheduling.md)"));
  }
  m_intervalLabel->setVisible(!interval.isEmpty());
}

QString LiveDashboard::spendText() const {
  if (!m_data.hasPrice()) return m_data.rateText();
  QString text = tr("%1 spent").arg(money(m_data.spentUsd()));
  const double projected = m_data.projectedUsd();
  if (std::isfinite(projected)) text += tr(", projected %1").arg(money(projected));
  if (m_data.maxUsd() > 0) text += tr(" of a %1 budget").arg(money(m_data.maxUsd()));
  return text + QStringLiteral(" · ") + m_data.rateText();
}

QString LiveDashboard::money(double usd) {
  // Small budgets need the digits: a cent-a-second run is at $0.0201, not $0.02.
  return QStringLiteral("$%1").arg(usd, 0, 'f', std::fabs(usd) < 0.1 && usd != 0 ? 4 : 2);
}

int LiveDashboard::refresh(int budgetMs) {
  if (!isVisible()) return 0;
  updateDerived();
  QElapsedTimer clock;
  clock.start();
  int drawn = 0;
  const qsizetype n = m_plots.size();
  for (qsizetype k = 0; k < n; ++k) {
    const qsizetype i = (m_next + k) % n;
    if (m_plots[i]->refresh()) ++drawn;
    if (drawn > 0 && clock.elapsed() >= budgetMs) {
      m_next = (i + 1) % n;  // the others stay dirty and go first next tick
      return drawn;
    }
  }
  return drawn;
}

void LiveDashboard::refreshAll() {
  updateDerived();
  for (PlotPanel* p : m_plots) p->refresh();
}

int LiveDashboard::replotCount() const {
  int sum = 0;
  for (PlotPanel* p : m_plots) sum += p->replotCount();
  return sum;
}

PlotPanel* LiveDashboard::plot(const QString& objectName) const {
  for (PlotPanel* p : m_plots)
    if (p->plotWidget()->objectName() == objectName) return p;
  return nullptr;
}

}  // namespace flotilla::ui
