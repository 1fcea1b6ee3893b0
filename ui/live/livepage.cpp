// Live page (see livepage.h).
#include "ui/live/livepage.h"

#include <QFontDatabase>
#include <QHBoxLayout>
#include <QLabel>
#include <QLocale>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSlider>
#include <QSplitter>
#include <QTimer>
#include <QVBoxLayout>

#include <cmath>

#include "ui/common/pageheader.h"
#include "ui/plot/lossplot.h"
#include "ui/runs/localrun.h"
#include "ui/runs/localrunsmodel.h"

namespace flotilla::ui {
namespace {
constexpr double kDefaultSmoothing = 0.6;
}

LivePage::LivePage(QWidget* parent)
    : QWidget(parent),
      m_title(new QLabel(this)),
      m_state(new QLabel(this)),
      m_status(new QLabel(this)),
      m_stop(new QPushButton(tr("Stop"), this)),
      m_kill(new QPushButton(tr("Kill"), this)),
      m_plot(new LossPlot(this)),
      m_smoothing(new QSlider(Qt::Horizontal, this)),
      m_smoothingValue(new QLabel(this)),
      m_log(new QPlainTextEdit(this)),
      m_timer(new QTimer(this)) {
  auto* header = new PageHeader(
      tr("Live"),
      tr("Watch a run as it trains: training and validation loss, tokens per second, model FLOPs "
         "utilisation, step time, GPU use and memory, and what it has cost so far. Start the demo or pick "
         "a run on the Runs page."),
      this);

  m_title->setObjectName(QStringLiteral("liveRunTitle"));
  QFont titleFont = m_title->font();
  titleFont.setPointSizeF(titleFont.pointSizeF() * 1.15);
  titleFont.setWeight(QFont::DemiBold);
  m_title->setFont(titleFont);
  m_title->setTextInteractionFlags(Qt::TextSelectableByMouse);
  m_state->setObjectName(QStringLiteral("liveRunState"));
  m_state->setForegroundRole(QPalette::PlaceholderText);
  m_status->setObjectName(QStringLiteral("liveStatus"));
  m_status->setTextInteractionFlags(Qt::TextSelectableByMouse);

  m_stop->setObjectName(QStringLiteral("stopButton"));
  m_stop->setToolTip(
      tr("Graceful stop (SIGTERM): the worker saves a checkpoint at its next step and exits; "
         "the run can be resumed from it"));
  m_kill->setObjectName(QStringLiteral("killButton"));
  m_kill->setToolTip(tr("End the worker at once (SIGKILL): progress since the last checkpoint is lost"));

  auto* titleRow = new QHBoxLayout;
  titleRow->addWidget(m_title);
  titleRow->addSpacing(12);
  titleRow->addWidget(m_state);
  titleRow->addStretch(1);
  titleRow->addWidget(m_stop);
  titleRow->addWidget(m_kill);

  m_plot->setMinimumHeight(140);
  m_plot->setSmoothing(kDefaultSmoothing);

  m_smoothing->setObjectName(QStringLiteral("smoothingSlider"));
  m_smoothing->setRange(0, 99);
  m_smoothing->setValue(static_cast<int>(std::lround(kDefaultSmoothing * 100)));
  m_smoothing->setMaximumWidth(220);
  m_smoothing->setToolTip(
      tr("Exponential moving average of the training loss (TensorBoard's debiased "
         "formula, computed on the raw values)"));
  auto* smoothingLabel = new QLabel(tr("Smoothing"), this);
  auto* smoothingRow = new QHBoxLayout;
  smoothingRow->addWidget(smoothingLabel);
  smoothingRow->addWidget(m_smoothing);
  smoothingRow->addWidget(m_smoothingValue);
  smoothingRow->addStretch(1);

  m_log->setObjectName(QStringLiteral("liveLog"));
  m_log->setReadOnly(true);
  m_log->setMaximumBlockCount(5000);
  m_log->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
  m_log->setWordWrapMode(QTextOption::WrapAtWordBoundaryOrAnywhere);
  m_log->setMinimumHeight(56);
  m_log->setPlaceholderText(tr("The worker's events and checkpoints appear here."));

  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(28, 24, 28, 24);
  layout->setSpacing(12);
  layout->addWidget(header);
  layout->addSpacing(4);
  layout->addLayout(titleRow);
  layout->addWidget(m_status);
  // Plot (with its smoothing control) over the log, the split adjustable by the user.
  auto* plotArea = new QWidget(this);
  auto* plotLayout = new QVBoxLayout(plotArea);
  plotLayout->setContentsMargins(0, 0, 0, 0);
  plotLayout->addWidget(m_plot, 1);
  plotLayout->addLayout(smoothingRow);
  auto* split = new QSplitter(Qt::Vertical, this);
  split->setObjectName(QStringLiteral("liveSplit"));
  split->setChildrenCollapsible(false);
  split->addWidget(plotArea);
  split->addWidget(m_log);
  split->setStretchFactor(0, 1);
  split->setStretchFactor(1, 0);
  split->setSizes({520, 150});
  layout->addWidget(split, 1);

  connect(m_stop, &QPushButton::clicked, this, [this] {
    if (m_run) m_run->stop();
  });
  connect(m_kill, &QPushButton::clicked, this, [this] {
    if (m_run) m_run->kill();
  });
  connect(m_smoothing, &QSlider::valueChanged, this, [this](int value) {
    m_plot->setSmoothing(value / 100.0);
    m_smoothingValue->setText(QString::number(value / 100.0, 'f', 2));
    refresh();
  });
  m_smoothingValue->setText(QString::number(kDefaultSmoothing, 'f', 2));
  m_timer->setInterval(kRefreshMs);
  connect(m_timer, &QTimer::timeout, this, &LivePage::refresh);
  setRun(nullptr);
}

void LivePage::setRun(LocalRun* run) {
  if (m_run) m_run->disconnect(this);
  m_run = run;
  m_log->clear();
  if (!run) {
    m_plot->setSource(nullptr, {}, {});
    m_plot->setPlannedSteps(0);
    m_plot->setMessage(tr("No run selected"));
    m_timer->stop();
  } else {
    m_plot->setSource(&run->series(), QLatin1String(kSeriesLoss), QLatin1String(kSeriesValLoss));
    m_plot->setMessage(tr("Waiting for the first step…"));
    for (const LocalRun::LogLine& line : run->log()) appendLog(line.level, line.text);
    connect(run, &LocalRun::logAppended, this, &LivePage::appendLog);
    connect(run, &LocalRun::stateChanged, this, [this] {
      updateControls();
      refresh();
    });
    connect(run, &QObject::destroyed, this, [this] { setRun(nullptr); });
  }
  updateControls();
  refresh();
}

LocalRun* LivePage::run() const { return m_run; }
const SeriesStore* LivePage::series() const { return m_run ? &m_run->series() : nullptr; }

void LivePage::updateControls() {
  const bool active = m_run && m_run->isActive();
  m_stop->setEnabled(m_run && m_run->state() == LocalRun::State::Running);
  m_kill->setEnabled(active);
  m_title->setText(m_run ? m_run->name() : tr("No run yet"));
  m_state->setText(m_run ? m_run->stateText() : QString());
  if (active && !m_timer->isActive()) m_timer->start();
  if (!active) m_timer->stop();
  if (m_run && !active && m_run->lastStep() == 0)
    m_plot->setMessage(m_run->state() == LocalRun::State::Failed ? tr("The run failed before its first step")
                                                                 : tr("No steps recorded"));
}

void LivePage::updateStatus() {
  QString text;
  if (!m_run) {
    text = tr("Start the demo on the Runs page to watch it train here.");
  } else {
    const QLocale locale;
    QStringList parts;
    parts << (m_run->plannedSteps() > 0 ? tr("Step %1 / %2").arg(m_run->lastStep()).arg(m_run->plannedSteps())
                                        : tr("Step %1").arg(m_run->lastStep()));
    if (!std::isnan(m_run->lastLoss())) parts << tr("loss %1").arg(m_run->lastLoss(), 0, 'f', 4);
    if (!std::isnan(m_run->lastValLoss())) parts << tr("val. loss %1").arg(m_run->lastValLoss(), 0, 'f', 4);
    parts << tr("%1 tokens/s")
                 .arg(m_run->tokensPerSec() > 0 ? locale.toString(m_run->tokensPerSec(), 'f', 0)
                                                : QStringLiteral("–"));
    parts << (m_run->mfu() > 0 ? tr("MFU %1%").arg(100.0 * m_run->mfu(), 0, 'f', 1) : tr("MFU n/a"));
    parts << tr("%1 elapsed").arg(formatDuration(m_run->elapsedMs()));
    text = parts.join(QStringLiteral("  ·  "));
  }
  if (text != m_status->text()) m_status->setText(text);
  const QString state = m_run ? m_run->stateText() : QString();
  if (state != m_state->text()) m_state->setText(state);
}

bool LivePage::refresh() {
  updateStatus();
  if (!isVisible()) return false;
  if (m_run) m_plot->setPlannedSteps(double(m_run->plannedSteps()));
  return m_plot->refresh();
}

void LivePage::showEvent(QShowEvent* event) {
  QWidget::showEvent(event);
  refresh();
}

void LivePage::appendLog(const QString& level, const QString& text) {
  const QString prefix = level == QLatin1String("info") ? QString() : level.toUpper() + QStringLiteral(": ");
  m_log->appendPlainText(prefix + text);
}

QString LivePage::titleText() const { return m_title->text(); }
QString LivePage::statusText() const { return m_status->text(); }
QString LivePage::logText() const { return m_log->toPlainText(); }

}  // namespace flotilla::ui
