// Compare page (see comparepage.h).
#include "ui/compare/comparepage.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QScrollArea>
#include <QSortFilterProxyModel>
#include <QSplitter>
#include <QTabWidget>
#include <QTableView>
#include <QVBoxLayout>

#include <variant>

#include "ui/common/pageheader.h"
#include "ui/compare/asyncquery.h"
#include "ui/compare/comparemodels.h"
#include "ui/compare/runpickermodel.h"
#include "ui/plot/compareplot.h"

namespace flotilla::ui {
namespace {

QTableView* newTable(QAbstractItemModel* model, const QString& name) {
  auto* view = new QTableView;
  view->setObjectName(name);
  view->setModel(model);
  view->setAlternatingRowColors(true);
  view->setSelectionBehavior(QAbstractItemView::SelectRows);
  view->verticalHeader()->hide();
  // Columns keep their contents' width and the table scrolls sideways: a stretched last column was
  // squeezed to "$" when the others filled the width (Cost/M tok, a third run's config values).
  view->horizontalHeader()->setStretchLastSection(false);
  view->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  view->setHorizontalScrollBarPolicy(Qt::ScrollBarAsNeeded);
  view->setWordWrap(false);
  return view;
}

QString axisLabel(db::XAxis x, const Preferences& prefs) {
  switch (x) {
    case db::XAxis::kStep:
      return QObject::tr("step");
    case db::XAxis::kTokens:
      return QObject::tr("tokens");
    case db::XAxis::kWallTime:
      return QObject::tr("training time (%1)").arg(prefs.timeUnitLabel());
    case db::XAxis::kGpuHours:
      return QObject::tr("device-hours");
    case db::XAxis::kDollars:
      return QObject::tr("spend (%1)").arg(prefs.currency);
  }
  return {};
}

}  // namespace

ComparePage::ComparePage(QWidget* parent) : ComparePage(QString(), parent) {}

ComparePage::ComparePage(const QString& databasePath, QWidget* parent)
    : QWidget(parent),
      m_databasePath(databasePath),
      m_prefs(Preferences::load()),
      m_runs(new RunPickerModel(this)),
      m_proxy(new QSortFilterProxyModel(this)),
      m_summary(new SummaryModel(this)),
      m_config(new ConfigDiffModel(this)),
      m_target(new TargetModel(this)),
      m_scoreTarget(new TargetModel(this, TargetModel::Of::Score)) {
  m_summary->setPreferences(m_prefs);
  m_target->setPreferences(m_prefs);
  m_scoreTarget->setPreferences(m_prefs);
  build();
}

void ComparePage::build() {
  auto* header = new PageHeader(
      tr("Compare"),
      tr("Put experiments side by side: any metric overlaid by step, tokens, training time, device-hours "
         "or dollars (task scores too), with their losses, speed, cost per million tokens, differing config "
         "keys and the cost of reaching a chosen loss or task score."),
      this);

  // Left: the runs to pick from.
  m_filter = new QLineEdit;
  m_filter->setObjectName(QStringLiteral("compareFilter"));
  m_filter->setPlaceholderText(tr("Filter runs by name"));
  m_filter->setClearButtonEnabled(true);
  m_proxy->setSourceModel(m_runs);
  m_proxy->setFilterKeyColumn(RunPickerModel::Name);
  m_proxy->setFilterCaseSensitivity(Qt::CaseInsensitive);
  connect(m_filter, &QLineEdit::textChanged, m_proxy, &QSortFilterProxyModel::setFilterFixedString);
  m_runView = newTable(m_proxy, QStringLiteral("compareRuns"));
  m_runView->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  auto* refreshButton = new QPushButton(tr("Refresh"));
  connect(refreshButton, &QPushButton::clicked, this, &ComparePage::refresh);
  auto* left = new QWidget;
  left->setMinimumWidth(300);  // name, status, steps and loss (the table scrolls for more)
  auto* leftLayout = new QVBoxLayout(left);
  leftLayout->setContentsMargins(0, 0, 0, 0);
  auto* filterRow = new QHBoxLayout;
  filterRow->addWidget(m_filter, 1);
  filterRow->addWidget(refreshButton);
  leftLayout->addLayout(filterRow);
  // A sweep's runs, checked at once (issue 37).
  m_sweep = new QComboBox;
  m_sweep->setObjectName(QStringLiteral("compareSweep"));
  m_sweep->setToolTip(tr("Check every run a sweep started (flotilla sweep)"));
  m_sweep->addItem(tr("Sweep…"));
  m_sweep->setEnabled(false);
  connect(m_sweep, &QComboBox::activated, this, [this](int index) {
    if (index > 0) openGroup(m_sweep->itemText(index));
  });
  leftLayout->addWidget(m_sweep);
  leftLayout->addWidget(m_runView, 1);

  // Right, top: the plot and its controls.
  m_metric = new QComboBox;
  m_metric->setObjectName(QStringLiteral("compareMetric"));
  m_metric->setMinimumContentsLength(12);
  m_metric->setSizeAdjustPolicy(QComboBox::AdjustToContents);  // "task/arc-mini/acc_norm" whole
  m_metric->addItem(QStringLiteral("loss"));
  m_xAxis = new QComboBox;
  m_xAxis->setObjectName(QStringLiteral("compareXAxis"));
  m_xAxis->addItem(tr("Step"), static_cast<int>(db::XAxis::kStep));
  m_xAxis->addItem(tr("Tokens"), static_cast<int>(db::XAxis::kTokens));
  m_xAxis->addItem(tr("Training time"), static_cast<int>(db::XAxis::kWallTime));
  m_xAxis->addItem(tr("Device-hours (GPU-h, CPU-h)"), static_cast<int>(db::XAxis::kGpuHours));
  m_xAxis->addItem(tr("Dollars"), static_cast<int>(db::XAxis::kDollars));
  m_logY = new QCheckBox(tr("Log scale"));
  m_plot = new CompareOverlayPlot;
  auto* controls = new QHBoxLayout;
  controls->addWidget(new QLabel(tr("Metric")));
  controls->addWidget(m_metric);
  controls->addSpacing(12);
  controls->addWidget(new QLabel(tr("X axis")));
  controls->addWidget(m_xAxis);
  controls->addSpacing(12);
  controls->addWidget(m_logY);
  controls->addStretch(1);
  auto* plotBox = new QWidget;
  auto* plotLayout = new QVBoxLayout(plotBox);
  plotLayout->setContentsMargins(0, 0, 0, 0);
  plotLayout->addLayout(controls);
  m_axisNote = new QLabel;
  m_axisNote->setObjectName(QStringLiteral("compareAxisNote"));
  m_axisNote->setWordWrap(true);
  m_axisNote->hide();
  plotLayout->addWidget(m_axisNote);
  plotLayout->addWidget(m_plot, 1);

  // Right, bottom: tables.
  auto* tabs = new QTabWidget;
  tabs->setObjectName(QStringLiteral("compareTabs"));
  tabs->addTab(newTable(m_summary, QStringLiteral("compareSummary")), tr("Summary"));
  m_showAll = new QCheckBox(tr("Show all keys"));
  auto* configPane = new QWidget;
  auto* configLayout = new QVBoxLayout(configPane);
  configLayout->setContentsMargins(0, 6, 0, 0);
  configLayout->addWidget(m_showAll);
  configLayout->addWidget(newTable(m_config, QStringLiteral("compareConfig")), 1);
  tabs->addTab(configPane, tr("Config differences"));
  m_targetLoss = new QDoubleSpinBox;
  m_targetLoss->setObjectName(QStringLiteral("compareTargetLoss"));
  m_targetLoss->setRange(0, 100);
  m_targetLoss->setDecimals(3);
  m_targetLoss->setSingleStep(0.05);
  m_targetLoss->setValue(3.0);
  m_smoothed = new QCheckBox(tr("Smoothed loss (EMA 0.6)"));
  m_smoothed->setChecked(true);
  auto* targetPane = new QWidget;
  auto* targetLayout = new QVBoxLayout(targetPane);
  targetLayout->setContentsMargins(0, 6, 0, 0);
  auto* targetRow = new QHBoxLayout;
  targetRow->addWidget(new QLabel(tr("Target loss")));
  targetRow->addWidget(m_targetLoss);
  targetRow->addSpacing(12);
  targetRow->addWidget(m_smoothed);
  targetRow->addStretch(1);
  targetLayout->addLayout(targetRow);
  targetLayout->addWidget(newTable(m_target, QStringLiteral("compareTarget")), 1);
  tabs->addTab(targetPane, tr("Cost to reach a loss"));
  // Beside it, the cost to reach a task score (evaluations during training or "Evaluate…").
  m_scoreMetric = new QComboBox;
  m_scoreMetric->setObjectName(QStringLiteral("compareScoreMetric"));
  m_scoreMetric->setMinimumContentsLength(16);
  m_scoreMetric->setPlaceholderText(tr("no task score yet"));
  m_scoreMetric->setToolTip(
      tr("Task scores come from evaluations during training (eval.tasks) or from "
         "the run menu's Evaluate…"));
  m_targetScore = new QDoubleSpinBox;
  m_targetScore->setObjectName(QStringLiteral("compareTargetScore"));
  m_targetScore->setRange(-1e6, 1e6);
  m_targetScore->setDecimals(4);
  m_targetScore->setSingleStep(0.01);
  m_targetScore->setValue(0.4);
  m_scoreDirection = new QLabel;
  m_scoreDirection->setObjectName(QStringLiteral("compareScoreDirection"));
  m_scoreDirection->setForegroundRole(QPalette::PlaceholderText);
  auto* scorePane = new QWidget;
  auto* scoreLayout = new QVBoxLayout(scorePane);
  scoreLayout->setContentsMargins(0, 6, 0, 0);
  auto* scoreRow = new QHBoxLayout;
  scoreRow->addWidget(new QLabel(tr("Task score")));
  scoreRow->addWidget(m_scoreMetric);
  scoreRow->addSpacing(12);
  scoreRow->addWidget(new QLabel(tr("Target")));
  scoreRow->addWidget(m_targetScore);
  scoreRow->addSpacing(12);
  scoreRow->addWidget(m_scoreDirection);
  scoreRow->addStretch(1);
  scoreLayout->addLayout(scoreRow);
  scoreLayout->addWidget(newTable(m_scoreTarget, QStringLiteral("compareScoreTarget")), 1);
  tabs->addTab(scorePane, tr("Cost to reach a score"));

  auto* right = new QSplitter(Qt::Vertical);
  right->addWidget(plotBox);
  right->addWidget(tabs);
  right->setStretchFactor(0, 3);
  right->setStretchFactor(1, 2);
  auto* split = new QSplitter(Qt::Horizontal);
  split->addWidget(left);
  split->addWidget(right);
  split->setStretchFactor(0, 1);
  split->setStretchFactor(1, 3);
  split->setSizes({340, 860});
  split->setMinimumSize(720, 480);  // fits a 1024x640 window beside the sidebar (test_small_window)

  // Small windows scroll the page rather than squeezing its tables (the window keeps no minimum).
  auto* scroll = new QScrollArea;
  scroll->setWidget(split);
  scroll->setWidgetResizable(true);
  scroll->setFrameShape(QFrame::NoFrame);
  m_status = new QLabel;
  m_status->setObjectName(QStringLiteral("compareStatus"));
  m_status->setForegroundRole(QPalette::PlaceholderText);

  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(28, 24, 28, 16);
  layout->setSpacing(12);
  layout->addWidget(header);
  layout->addWidget(scroll, 1);
  layout->addWidget(m_status);

  connect(m_runs, &RunPickerModel::checkedChanged, this, &ComparePage::requestComparison);
  connect(m_metric, &QComboBox::currentIndexChanged, this, &ComparePage::requestComparison);
  connect(m_xAxis, &QComboBox::currentIndexChanged, this, &ComparePage::requestComparison);
  connect(m_targetLoss, &QDoubleSpinBox::valueChanged, this, &ComparePage::requestComparison);
  connect(m_smoothed, &QCheckBox::toggled, this, &ComparePage::requestComparison);
  connect(m_scoreMetric, &QComboBox::currentIndexChanged, this, &ComparePage::requestComparison);
  connect(m_targetScore, &QDoubleSpinBox::valueChanged, this, &ComparePage::requestComparison);
  connect(m_logY, &QCheckBox::toggled, m_plot, &CompareOverlayPlot::setLogY);
  connect(m_showAll, &QCheckBox::toggled, m_config, &ConfigDiffModel::setShowAll);
  m_plot->setCurves(
      {}, tr("step"), QStringLiteral("loss"),
      m_databasePath.isEmpty() ? tr("No workspace database") : tr("Tick runs on the left to compare them"));
}

void ComparePage::setDatabasePath(const QString& path) {
  m_databasePath = path;
  refresh();
}

void ComparePage::setPreferences(const Preferences& prefs) {
  m_prefs = prefs;
  m_summary->setPreferences(prefs);
  m_target->setPreferences(prefs);
  m_scoreTarget->setPreferences(prefs);
  requestComparison();
}

void ComparePage::showEvent(QShowEvent* event) {
  QWidget::showEvent(event);
  refresh();
}

void ComparePage::refresh() {
  if (m_databasePath.isEmpty()) return;
  const quint64 generation = ++m_listGeneration;
  m_listBusy = true;
  RunListRequest request{m_databasePath, {}};
  using Lists = std::pair<std::vector<db::RunListItem>, std::vector<SweepGroup>>;
  runAsync<Lists>(
      this, [request] { return Lists(loadRunList(request), loadSweepGroups(request.databasePath)); },
      [this, generation](Outcome<Lists> r) {
        if (generation != m_listGeneration) return;
        m_listBusy = false;
        if (auto* error = std::get_if<QString>(&r)) return fail(*error);
        m_runs->setRuns(std::move(std::get<0>(r).first));
        m_sweeps = std::move(std::get<0>(r).second);
        {
          const QSignalBlocker block(m_sweep);
          const QString current = m_sweep->currentText();
          while (m_sweep->count() > 1) m_sweep->removeItem(1);
          for (const auto& g : m_sweeps) m_sweep->addItem(QString::fromStdString(g.name));
          m_sweep->setEnabled(!m_sweeps.empty());
          const int at = m_sweep->findText(current);
          m_sweep->setCurrentIndex(at > 0 ? at : 0);
        }
        m_status->setText(tr("%n run(s) in the workspace", nullptr, m_runs->rowCount()));
        applyGroup();
        emit runsLoaded();
        requestComparison();
      });
}

void ComparePage::openGroup(const QString& name) {
  m_pendingGroup = name;
  if (m_listBusy) return;  // applied when the list arrives
  applyGroup();
  if (!m_pendingGroup.isEmpty()) refresh();  // a sweep newer than the list: read it again
}

void ComparePage::applyGroup() {
  if (m_pendingGroup.isEmpty()) return;
  for (const auto& g : m_sweeps) {
    if (QString::fromStdString(g.name) != m_pendingGroup) continue;
    const QSignalBlocker block(m_sweep);
    m_sweep->setCurrentIndex(m_sweep->findText(m_pendingGroup));
    m_pendingGroup.clear();
    m_runs->setCheckedIds(g.runIds);
    m_status->setText(tr("Sweep %1: %2 of its %3 point(s) have started")
                          .arg(QString::fromStdString(g.name))
                          .arg(g.runIds.size())
                          .arg(g.points));
    return;
  }
}

void ComparePage::requestComparison() {
  if (m_databasePath.isEmpty()) return;
  if (m_compareBusy) {
    m_compareAgain = true;  // one follow-up with the newest settings
    return;
  }
  startComparison();
}

void ComparePage::startComparison() {
  CompareRequest request;
  request.databasePath = m_databasePath;
  request.runIds = m_runs->checkedIds();
  request.metric = m_metric->currentText().toStdString();
  request.x = static_cast<db::XAxis>(m_xAxis->currentData().toInt());
  request.targetLoss = m_targetLoss->value();
  request.smoothing = m_smoothed->isChecked() ? 0.6 : 0.0;
  request.scoreMetric = m_scoreMetric->currentText().toStdString();
  request.targetScore = m_targetScore->value();
  const quint64 generation = ++m_compareGeneration;
  m_compareBusy = true;
  m_compareAgain = false;
  runAsync<CompareResult>(
      this, [request] { return loadComparison(request); },
      [this, generation](Outcome<CompareResult> r) {
        m_compareBusy = false;
        if (generation == m_compareGeneration) {
          if (auto* error = std::get_if<QString>(&r))
            fail(*error);
          else
            applyResult(std::move(std::get<0>(r)));
        }
        if (m_compareAgain) startComparison();
      });
}

void ComparePage::applyResult(CompareResult result) {
  m_result = std::move(result);
  // Metric names: keep the current choice, offer what the runs have.
  const QString current = m_metric->currentText();
  QStringList names;
  for (const auto& n : m_result.metricNames) names << QString::fromStdString(n);
  if (!names.contains(current)) names.prepend(current);
  QStringList shown;
  for (int i = 0; i < m_metric->count(); ++i) shown << m_metric->itemText(i);
  if (shown != names) {
    const QSignalBlocker block(m_metric);
    m_metric->clear();
    m_metric->addItems(names);
    m_metric->setCurrentText(current);
  }

  {  // The task scores a target can be set on; the one measured is current.
    QStringList scores;
    for (const auto& n : m_result.scoreMetrics) scores << QString::fromStdString(n);
    QStringList listed;
    for (int i = 0; i < m_scoreMetric->count(); ++i) listed << m_scoreMetric->itemText(i);
    const QSignalBlocker block(m_scoreMetric);
    if (listed != scores) {
      m_scoreMetric->clear();
      m_scoreMetric->addItems(scores);
    }
    m_scoreMetric->setCurrentIndex(m_scoreMetric->findText(QString::fromStdString(m_result.scoreMetric)));
    m_scoreDirection->setText(m_result.scoreMetric.empty() ? tr("No run has a task score yet")
                              : m_result.scoreHigherIsBetter
                                  ? tr("reached at the first evaluation at or above the target")
                                  : tr("reached at the first evaluation at or below the target"));
  }
  const bool taskScore = current.startsWith(QLatin1String("task/"));

  const auto x = static_cast<db::XAxis>(m_xAxis->currentData().toInt());
  const double xScale =
      x == db::XAxis::kWallTime && m_prefs.time == Preferences::TimeUnit::Hours ? 1.0 / 3600 : 1.0;
  QVector<CompareOverlayPlot::Curve> curves;
  // An unpriced run has no dollars to draw: on the Dollars axis it is left out, and the note says so.
  QStringList unpriced;
  for (size_t i = 0; i < m_result.summaries.size(); ++i)
    if (!m_result.summaries[i].cost_usd) unpriced << QString::fromStdString(m_result.summaries[i].name);
  const bool dollars = x == db::XAxis::kDollars;
  m_axisNote->setVisible(dollars && !unpriced.isEmpty());
  m_axisNote->setText(
      unpriced.size() == 1
          ? tr("%1 is not drawn: it is unpriced, so it has no dollars to plot. Give a run a price on the "
               "wizard's Budget page, or price its machine or node in Settings or Nodes.")
                .arg(unpriced.front())
          : tr("%1 are not drawn: they are unpriced, so they have no dollars to plot. Give a run a price on "
               "the wizard's Budget page, or price its machine or node in Settings or Nodes.")
                .arg(unpriced.join(QStringLiteral(", "))));
  for (const auto& s : m_result.series) {
    if (dollars && unpriced.contains(QString::fromStdString(s.run_name))) continue;
    CompareOverlayPlot::Curve c;
    c.name = QString::fromStdString(s.run_name);
    c.markers = taskScore;  // a few evaluations: each one a dot on its line
    for (const auto& p : s.points) {
      c.x << p.x * xScale;
      c.last << p.last;
      c.min << p.min;
      c.max << p.max;
    }
    curves << c;
  }
  m_plot->setCurves(curves, axisLabel(x, m_prefs), current, tr("Tick runs on the left to compare them"));
  // The score target as a line when the plotted metric is the score measured.
  m_plot->setTarget(!curves.isEmpty() && current.toStdString() == m_result.scoreMetric
                        ? std::optional<double>(m_targetScore->value())
                        : std::nullopt);
  m_summary->setResult(m_result);
  m_config->setResult(m_result);
  m_target->setResult(m_result);
  m_scoreTarget->setResult(m_result);
  m_status->setText(tr("%n run(s) compared", nullptr, static_cast<int>(m_result.runs.size())) +
                    QStringLiteral(" · ") +
                    tr("%n config key(s) differ", nullptr, static_cast<int>(m_result.differences.size())));
  emit comparisonReady();
}

QString ComparePage::axisNote() const { return m_axisNote->isVisibleTo(this) ? m_axisNote->text() : QString(); }

void ComparePage::fail(const QString& message) {
  m_status->setText(tr("Could not read the workspace: %1").arg(message));
  emit queryFailed(message);
}

}  // namespace flotilla::ui
