// Live page (see livepage.h).
#include "ui/live/livepage.h"

#include <QComboBox>
#include <QFontDatabase>
#include <QFutureWatcher>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QLocale>
#include <QMessageBox>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QShortcut>
#include <QSplitter>
#include <QTimer>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>

#include <algorithm>
#include <cmath>

#include "runs/run_speed.h"
#include "ui/common/numberformat.h"
#include "ui/common/pageheader.h"
#include "ui/live/commpanel.h"
#include "ui/live/livedashboard.h"
#include "ui/live/logfind.h"
#include "ui/live/nodesamples.h"
#include "ui/runs/localruns.h"
#include "ui/runs/localrunsmodel.h"
#include "ui/runs/servicerun.h"
#include "ui/runs/storeservice.h"

namespace flotilla::ui {
namespace {

// The first `upTo` records of `feed`, folded into a fresh LiveData.
LiveData replayFeed(std::shared_ptr<const runs::RecordFeed> feed, qint64 upTo) {
  LiveData data;
  if (!feed) return data;
  for (const MetricsRecord& r : feed->copy(0, static_cast<size_t>(upTo))) data.ingest(r);
  return data;
}

// Wall-clock seconds per step over the last `window` steps the page holds, stopping at a pause
// (runs::measured_seconds_per_step's rule, on the records' clock); 0 with fewer than two steps.
double recentSecondsPerStep(const ColumnTable& steps, int window = 50) {
  const int wall = steps.find(live_col::kWall), step = steps.find(live_col::kStep);
  if (wall < 0 || step < 0 || steps.rows() < 2) return 0;
  const QVector<double>& t = steps.values(wall);
  const QVector<double>& s = steps.values(step);
  const qsizetype newest = steps.rows() - 1;
  qsizetype oldest = newest;
  for (qsizetype i = newest - 1; i >= 0 && newest - i < window; --i) {
    const double pace = oldest < newest ? (t[newest] - t[oldest]) / (s[newest] - s[oldest]) : 0;
    const double gap = t[oldest] - t[i];
    if (!std::isfinite(t[i]) || (gap > 30.0 && (pace <= 0 || gap > 10 * pace * (s[oldest] - s[i])))) break;
    oldest = i;
  }
  if (oldest == newest || !(s[newest] > s[oldest]) || !(t[newest] > t[oldest])) return 0;
  return (t[newest] - t[oldest]) / (s[newest] - s[oldest]);
}

// The run store's id of `run` (0: not stored, or not known yet).
qint64 storeIdOf(const RunHandle* run) { return run ? run->storeId() : 0; }

}  // namespace

LivePage::LivePage(QWidget* parent)
    : QWidget(parent),
      m_title(new QLabel(this)),
      m_state(new QLabel(this)),
      m_status(new QLabel(this)),
      m_failure(new QLabel(this)),
      m_stop(new QPushButton(tr("Stop"), this)),
      m_checkpoint(new QPushButton(tr("Checkpoint now"), this)),
      m_kill(new QPushButton(tr("Kill…"), this)),
      m_dashboard(new LiveDashboard(this)),
      m_comm(new CommPanel(this)),
      m_log(new QPlainTextEdit(this)),
      m_samplesView(new QPlainTextEdit(this)),
      m_timer(new QTimer(this)),
      m_picker(new QComboBox(this)),
      m_samples(new NodeSamplesPoller(this)),
      m_samplesTimer(new QTimer(this)) {
  auto* header = new PageHeader(
      tr("Live"),
      tr("A run as it trains: loss, throughput, where each rank's time goes, memory, GPUs, spend. "
         "Right-click a plot to export it."),
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

  // Why a failed run failed, first thing under its name, in the worker's words.
  m_failure->setObjectName(QStringLiteral("liveFailure"));
  m_failure->setWordWrap(true);
  m_failure->setTextInteractionFlags(Qt::TextSelectableByMouse);
  m_failure->setStyleSheet(
      QStringLiteral("QLabel { background: #fdecea; color: #8a1c1c; border: 1px solid #e0a0a0; "
                     "border-radius: 4px; padding: 6px 8px; }"));
  m_failure->hide();

  m_stop->setObjectName(QStringLiteral("stopButton"));
  m_stop->setToolTip(
      tr("Graceful stop (SIGTERM): the worker saves a checkpoint at its next step and exits; "
         "the run can be resumed from it"));
  m_checkpoint->setObjectName(QStringLiteral("checkpointButton"));
  m_checkpoint->setToolTip(tr("Save a checkpoint at the next step boundary (SIGUSR1); the run goes on"));
  m_kill->setObjectName(QStringLiteral("killButton"));
  m_kill->setToolTip(
      tr("End the worker at once (SIGKILL), after a confirmation: progress since the last "
         "checkpoint is lost"));

  m_picker->setObjectName(QStringLiteral("liveRunPicker"));
  m_picker->setToolTip(
      tr("The run this page follows: this session's runs, including those re-attached at start"));
  m_picker->setSizeAdjustPolicy(QComboBox::AdjustToContents);
  m_picker->setFont(titleFont);  // with a choice of runs it is the title (the name once, not twice)
  m_picker->hide();              // shown once there is a choice

  auto* titleRow = new QHBoxLayout;
  titleRow->addWidget(m_title);
  titleRow->addWidget(m_picker);
  titleRow->addSpacing(12);
  titleRow->addWidget(m_state);
  titleRow->addStretch(1);
  titleRow->addWidget(m_stop);
  titleRow->addWidget(m_checkpoint);
  titleRow->addWidget(m_kill);

  m_log->setObjectName(QStringLiteral("liveLog"));
  m_log->setReadOnly(true);
  m_log->setMaximumBlockCount(5000);
  m_log->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
  m_log->setWordWrapMode(QTextOption::WrapAtWordBoundaryOrAnywhere);
  m_log->setMinimumHeight(48);
  m_log->setPlaceholderText(tr("The worker's events and checkpoints appear here."));

  m_samplesView->setObjectName(QStringLiteral("liveSamples"));
  m_samplesView->setReadOnly(true);
  m_samplesView->setMaximumBlockCount(2000);
  m_samplesView->setMinimumHeight(48);
  m_samplesView->setPlaceholderText(
      tr("Text the model writes every eval.sample_every steps, decoded with the run's tokenizer."));

  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(20, 16, 20, 12);
  layout->setSpacing(8);
  layout->addWidget(header);
  layout->addLayout(titleRow);
  layout->addWidget(m_failure);
  layout->addWidget(m_status);
  // Dashboard over the log, the split adjustable by the user.
  auto* split = new QSplitter(Qt::Vertical, this);
  split->setObjectName(QStringLiteral("liveSplit"));
  split->setChildrenCollapsible(false);
  split->addWidget(m_dashboard);
  // The log beside the samples, each as wide as the user drags it.
  auto* bottom = new QSplitter(Qt::Horizontal, this);
  bottom->setObjectName(QStringLiteral("liveBottomSplit"));
  bottom->setChildrenCollapsible(false);
  // The log with its find row (Ctrl+F): every match lit, Enter / Shift+Enter step through them.
  auto* logBox = new QWidget(this);
  auto* logLayout = new QVBoxLayout(logBox);
  logLayout->setContentsMargins(0, 0, 0, 0);
  logLayout->setSpacing(2);
  auto* findRow = new QHBoxLayout;
  auto* findField = new QLineEdit(logBox);
  findField->setObjectName(QStringLiteral("liveLogFind"));
  findField->setPlaceholderText(tr("Find in the log (Ctrl+F; Enter: next, Shift+Enter: previous)"));
  findField->setClearButtonEnabled(true);
  auto* findCount = new QLabel(logBox);
  findCount->setObjectName(QStringLiteral("liveLogFindCount"));
  findCount->setForegroundRole(QPalette::PlaceholderText);
  findRow->addWidget(findField, 1);
  findRow->addWidget(findCount);
  logLayout->addLayout(findRow);
  logLayout->addWidget(m_log, 1);
  m_logFind = new LogFind(m_log, findField, findCount, this);
  auto* findKey = new QShortcut(QKeySequence::Find, this);
  findKey->setContext(Qt::WidgetWithChildrenShortcut);
  connect(findKey, &QShortcut::activated, findField, [findField] {
    findField->setFocus(Qt::ShortcutFocusReason);
    findField->selectAll();
  });
  bottom->addWidget(logBox);
  bottom->addWidget(m_samplesView);
  bottom->setSizes({600, 400});
  split->addWidget(bottom);
  split->setStretchFactor(0, 1);
  split->setStretchFactor(1, 0);
  // The log starts about seven lines tall (not three), under a handle that looks like one: a bar
  // in the palette's mid tone across the page, a resize cursor, a tooltip saying what it does.
  split->setHandleWidth(7);
  split->handle(1)->setToolTip(tr("Drag to give the plots or the log more room"));
  split->handle(1)->setCursor(Qt::SplitVCursor);
  // Painted from the palette (a style sheet here would stop the page's labels following the theme).
  split->handle(1)->setAutoFillBackground(true);
  split->handle(1)->setBackgroundRole(QPalette::Mid);
  const int logLines = 7;
  m_log->setMinimumHeight(m_log->fontMetrics().lineSpacing() * 4 + 12);
  split->setSizes({560, m_log->fontMetrics().lineSpacing() * logLines + 40});
  // A multi-rank run's communication between the plots and the log, shown once it has comm records.
  split->insertWidget(1, m_comm);
  // The advice rules (runs/comm_advice.h), run on the reader's thread.
  m_comm->setAdviceSource(&runs::run_advice);
  split->setStretchFactor(1, 0);
  m_comm->hide();
  connect(m_comm, &CommPanel::updated, this, [this, split] {
    if (m_comm->hasData() == m_comm->isVisibleTo(this)) return;
    m_comm->setVisible(m_comm->hasData());
    if (m_comm->hasData()) {
      QList<int> sizes = split->sizes();
      if (sizes.size() == 3 && sizes[1] < 200) {
        sizes[0] = std::max(240, sizes[0] - 260);
        sizes[1] = 260;
        split->setSizes(sizes);
      }
    }
  });
  layout->addWidget(split, 1);

  connect(m_stop, &QPushButton::clicked, this, [this] {
    if (m_run) m_run->stop();
  });
  connect(m_checkpoint, &QPushButton::clicked, this, [this] {
    if (m_run) m_run->checkpointNow();
  });
  connect(m_kill, &QPushButton::clicked, this, &LivePage::confirmKill);
  m_timer->setInterval(kRefreshMs);
  connect(m_timer, &QTimer::timeout, this, &LivePage::refresh);
  connect(m_picker, &QComboBox::activated, this, [this](int index) {
    if (index >= 0 && index < m_entries.size() && m_entries[index] && m_entries[index] != m_run)
      setRun(m_entries[index]);
  });
  m_samplesTimer->setInterval(kSamplesMs);
  connect(m_samplesTimer, &QTimer::timeout, this, [this] {
    if (!m_run) return;
    if (m_samples->runId() == 0) followSamples(false);  // a run on nodes learns its store id late
    if (m_run->isActive()) {
      if (isVisible()) {
        pollSamples();
        m_comm->poll();  // comm records arrive every train.log_every steps
      }
    } else if (m_samples->runId() > 0) {
      m_samplesTimer->stop();  // ended: its readings were read when it ended (or when followed)
    }
  });
  connect(m_samples, &NodeSamplesPoller::samplesRead, this, &LivePage::onSamples);
  setRun(nullptr);
}

void LivePage::setRun(RunHandle* run) {
  if (m_run) m_run->disconnect(this);
  if (m_confirm) m_confirm->reject();
  m_run = run;
  ++m_followId;
  m_replaying = false;
  m_held.clear();
  m_log->clear();
  m_logFind->logChanged();
  m_samplesView->clear();
  m_dashboard->reset();
  if (!run) {
    m_dashboard->setEmptyMessage(tr("No run selected"));
    m_timer->stop();
  } else {
    m_dashboard->setEmptyMessage(tr("Waiting for the first step…"));
    for (const RunHandle::LogLine& line : run->log()) appendLog(line.level, line.text);
    for (const RunHandle::TextSample& sample : run->samples()) appendSample(sample.step, sample.text);
    connect(run, &RunHandle::sampleAppended, this, &LivePage::appendSample);
    replayHistory();
    addPickerEntry(run);
    connect(run, &RunHandle::recordReceived, this, &LivePage::onRecord);
    connect(run, &RunHandle::logAppended, this, &LivePage::appendLog);
    connect(run, &RunHandle::changed, this, &LivePage::updateControls);  // a followed run's first read
    connect(run, &RunHandle::stateChanged, this, [this] {
      updateControls();
      // Rare and final-ish (the last records were drained just before): draw everything.
      updateStatus();
      if (isVisible()) m_dashboard->refreshAll();
      pollSamples();  // the readings up to the end
      m_comm->poll();
    });
    connect(run, &QObject::destroyed, this, [this] { setRun(nullptr); });
  }
  syncPicker();
  followSamples(true);
  updateControls();
  refresh();
}

void LivePage::setRuns(LocalRuns* runs) {
  if (runs->store()) setDatabasePath(runs->store()->databasePath());
  for (int i = 0; i < runs->count(); ++i) addPickerEntry(runs->at(i));
  connect(runs, &LocalRuns::runAdded, this, [this, runs](int index) { addPickerEntry(runs->at(index)); });
  connect(runs, &LocalRuns::runReattached, this, &LivePage::offerRun);
}

void LivePage::offerRun(RunHandle* run) {
  if (!run) return;
  addPickerEntry(run);
  if (!m_run || !m_run->isActive()) setRun(run);
}

void LivePage::setDatabasePath(const QString& path) {
  m_samples->setDatabasePath(path);
  m_comm->setDatabasePath(path);
  followSamples(true);
}

QString LivePage::pickerLabel(const RunHandle* run) {
  const QString where = run->placeText();
  return where.isEmpty() ? run->name() : tr("%1 (%2)").arg(run->name(), where);
}

void LivePage::addPickerEntry(RunHandle* run) {
  if (!run || m_entries.contains(run)) return;
  m_entries.append(run);
  m_picker->addItem(pickerLabel(run));
  // The name and the place become known when the run is opened (an attach, a start elsewhere).
  connect(run, &RunHandle::changed, this, [this, run] {
    const qsizetype i = m_entries.indexOf(run);
    if (i >= 0 && m_picker->itemText(static_cast<int>(i)) != pickerLabel(run))
      m_picker->setItemText(static_cast<int>(i), pickerLabel(run));
  });
  // By the time destroyed() is emitted the run's QPointer reads null: drop every null entry.
  connect(run, &QObject::destroyed, this, [this] {
    for (qsizetype i = m_entries.size() - 1; i >= 0; --i) {
      if (m_entries[i]) continue;
      m_entries.remove(i);
      m_picker->removeItem(static_cast<int>(i));
    }
    syncPicker();
  });
  syncPicker();
}

void LivePage::syncPicker() {
  // QPointers of destroyed runs read null; their rows go in the destroyed handler above.
  const QSignalBlocker block(m_picker);
  m_picker->setCurrentIndex(m_run ? static_cast<int>(m_entries.indexOf(m_run.data())) : -1);
  m_picker->setVisible(m_entries.size() > 1);
  m_title->setVisible(!m_picker->isVisibleTo(this) || !m_run);
}

void LivePage::followSamples(bool restart) {
  const qint64 id = m_run ? storeIdOf(m_run) : 0;
  if (id != m_comm->runId()) m_comm->follow(id);
  if (restart || id != m_samples->runId()) {
    m_samples->follow(id);
    m_dashboard->data().clearNodeSamples();
    m_dashboard->setRunNodes({});
  }
  if (!m_run || m_samples->databasePath().isEmpty()) {
    m_samplesTimer->stop();
    return;
  }
  if (!m_samplesTimer->isActive()) m_samplesTimer->start();  // also: a run on nodes learns its id late
  if (id > 0) {
    pollSamples();
    m_comm->poll();
  }
}

void LivePage::pollSamples() {
  if (!m_run || m_replaying) return;
  // Readings are placed on the records' clock: wait for the first record of an active run.
  if (m_run->isActive() && m_dashboard->data().timeOrigin() <= 0) return;
  m_samples->poll();
}

void LivePage::onSamples(const NodeSampleBatch& batch) {
  if (!batch.error.isEmpty() || batch.runId != storeIdOf(m_run)) return;
  m_dashboard->data().setCost(batch.cost);  // the store's price and spend: one figure everywhere
  updateStatus();
  m_dashboard->setRunNodes(batch.sshNodes);
  if (batch.samples.isEmpty()) {
    if (isVisible() && !m_timer->isActive()) m_dashboard->refreshAll();
    return;
  }
  m_dashboard->data().appendNodeSamples(batch.samples, batch.startedAt);
  if (isVisible() && !m_timer->isActive()) m_dashboard->refreshAll();  // an ended run: no timer
}

void LivePage::onRecord(const flotilla::MetricsRecord& record) {
  if (m_replaying) {
    m_held.append(record);
    return;
  }
  m_dashboard->ingest(record);
  // Drawn within one tick whether or not the run is active (a stored run's history arrives after
  // the page started following it); refresh() stops the timer once nothing is left to draw.
  if (!m_timer->isActive()) m_timer->start();
  // A stored run's history arrives after the page started following it (read from the store off
  // the UI thread): node readings placed before its steps are placed again, once.
  if (m_run && !m_run->isActive() && !m_resampleQueued && m_dashboard->data().nodeGpus().rows() > 0) {
    m_resampleQueued = true;
    QTimer::singleShot(0, this, [this] {
      m_resampleQueued = false;
      followSamples(true);
    });
  }
}

void LivePage::replayHistory() {
  const qint64 upTo = m_run->deliveredRecords();
  if (upTo <= 0) return;
  const std::shared_ptr<const runs::RecordFeed> feed = m_run->feed();
  const RunCost cost = m_dashboard->data().cost();
  if (upTo <= kSyncReplayRecords) {
    m_dashboard->data() = replayFeed(feed, upTo);
    m_dashboard->data().setCost(cost);
    m_dashboard->dataChanged();
    return;
  }
  m_replaying = true;
  const quint64 id = m_followId;
  auto* watcher = new QFutureWatcher<LiveData>(this);
  connect(watcher, &QFutureWatcher<LiveData>::finished, this, [this, watcher, id] {
    watcher->deleteLater();
    if (id != m_followId) return;  // the page follows another run by now
    const RunCost cost = m_dashboard->data().cost();
    m_dashboard->data() = watcher->result();
    m_dashboard->data().setCost(cost);
    for (const MetricsRecord& record : std::as_const(m_held)) m_dashboard->ingest(record);
    m_held.clear();
    m_replaying = false;
    m_dashboard->dataChanged();
    // The replayed data replaced the node readings placed so far: read them again.
    followSamples(true);
    refresh();
  });
  watcher->setFuture(QtConcurrent::run(replayFeed, feed, upTo));
}

void LivePage::confirmKill() {
  if (!m_run || m_confirm) return;
  // Not exec(): the dashboard keeps drawing while the question is open.
  auto* box =
      new QMessageBox(QMessageBox::Warning, tr("Kill %1?").arg(m_run->name()),
                      tr("Kill the worker of %1 at once?\n\nProgress since the last checkpoint is lost. "
                         "Stop ends it gracefully with a checkpoint instead.")
                          .arg(m_run->name()),
                      QMessageBox::Yes | QMessageBox::Cancel, this);
  box->setObjectName(QStringLiteral("killConfirmation"));
  box->button(QMessageBox::Yes)->setText(tr("Kill"));
  box->setDefaultButton(QMessageBox::Cancel);
  box->setAttribute(Qt::WA_DeleteOnClose);
  QPointer<RunHandle> run = m_run;
  connect(box, &QMessageBox::finished, this, [run](int result) {
    if (result == QMessageBox::Yes && run) run->kill();
  });
  m_confirm = box;
  box->open();
}

ServiceRun* LivePage::run() const { return qobject_cast<ServiceRun*>(m_run.data()); }
RunHandle* LivePage::followed() const { return m_run; }
QMessageBox* LivePage::killConfirmation() const { return m_confirm; }
const SeriesStore* LivePage::series() const { return m_run ? &m_run->series() : nullptr; }
LossPlot* LivePage::lossPlot() const { return m_dashboard->lossPlot(); }
QSlider* LivePage::smoothingSlider() const { return m_dashboard->smoothingSlider(); }

void LivePage::updateControls() {
  const bool active = m_run && m_run->isActive();
  m_stop->setToolTip(
      tr("Graceful stop (SIGTERM): the worker saves a checkpoint at its next step and exits; "
         "the run can be resumed from it"));
  m_kill->setToolTip(
      tr("End the worker at once (SIGKILL), after a confirmation: progress since the last "
         "checkpoint is lost"));
  const bool running = m_run && m_run->state() == RunHandle::State::Running;
  // A run watched elsewhere (`flotilla run`) is asked through the runs service (its abilities).
  m_stop->setEnabled(m_run && m_run->canStop());
  m_checkpoint->setEnabled(m_run && (running || m_run->canStop()) && m_run->canCheckpoint());
  m_checkpoint->setToolTip(
      m_run && !m_run->canCheckpoint()
          ? m_run->checkpointUnsupportedReason()
          : tr("Save a checkpoint at the next step boundary (SIGUSR1); the run goes on"));
  m_kill->setEnabled(m_run && m_run->canKill());
  m_title->setText(m_run ? m_run->name() : tr("No run yet"));
  setStateText(m_run ? m_run->stateText() : QString());
  const QString why =
      m_run && m_run->state() == RunHandle::State::Failed ? m_run->failureReason() : QString();
  m_failure->setText(why.isEmpty() ? QString() : tr("Failed: %1").arg(why));
  m_failure->setVisible(!why.isEmpty());
  // Any run is drawn by the timer: refresh() stops it once an ended run has nothing left to draw.
  if (m_run && !m_timer->isActive()) m_timer->start();
  if (!m_run) m_timer->stop();
  if (const ServiceRun* s = run(); s && s->isFollowed() && !s->storeRead())
    m_dashboard->setEmptyMessage(tr("Reading %1 from the run database…").arg(s->name()));
  else if (m_run && !active && m_run->lastStep() == 0)
    m_dashboard->setEmptyMessage(m_run->state() == RunHandle::State::Failed
                                     ? tr("The run failed before its first step")
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
    if (!std::isnan(m_run->lastLoss())) parts << tr("loss %1").arg(formatMetric(m_run->lastLoss()));
    if (!std::isnan(m_run->lastValLoss()))
      parts << tr("val. loss %1").arg(formatMetric(m_run->lastValLoss()));
    // Running: this step's speed; ended: the run's, as the Runs table shows it (runs/run_speed.h).
    const bool ended = !m_run->isActive();
    const double tps = ended ? m_run->runTokensPerSec() : m_run->tokensPerSec();
    const double mfu = ended ? m_run->runMfu() : m_run->mfu();
    parts << (ended ? tr("%1 tokens/s (run mean)") : tr("%1 tokens/s"))
                 .arg(tps > 0 ? locale.toString(tps, 'f', 0) : QStringLiteral("–"));
    parts << (mfu > 0 ? (ended ? tr("MFU %1% (run mean)") : tr("MFU %1%")).arg(100.0 * mfu, 0, 'f', 1)
                      : tr("MFU n/a"));
    parts << tr("running time %1").arg(formatDuration(m_run->elapsedMs()));
    // Time left at the pace the run keeps now (its own steps' clock), not the plan's estimate.
    if (!ended) {
      const double pace = recentSecondsPerStep(m_dashboard->data().steps());
      const double left = runs::remaining_seconds(m_run->plannedSteps(), m_run->lastStep(), pace);
      if (left >= 0)
        parts << tr("%1 left").arg(formatDuration(static_cast<qint64>(left * 1000))) +
                     QStringLiteral(" (%1 s/step)").arg(QString::number(pace, 'g', 3));
    }
    if (m_dashboard->data().hasPrice())
      parts << tr("%1 spent").arg(LiveDashboard::money(m_dashboard->data().spentUsd()));
    text = parts.join(QStringLiteral("  ·  "));
  }
  if (text != m_status->text()) m_status->setText(text);
  setStateText(m_run ? m_run->stateText() : QString());
}

bool LivePage::refresh() {
  updateStatus();
  const bool idle = !m_run || (!m_run->isActive() && !m_replaying);
  if (!isVisible()) {
    if (idle) m_timer->stop();  // showEvent draws what is there
    return false;
  }
  const bool drew = m_dashboard->refresh() > 0;
  if (!drew && idle) m_timer->stop();
  return drew;
}

void LivePage::showEvent(QShowEvent* event) {
  QWidget::showEvent(event);
  pollSamples();  // catch up on readings skipped while hidden
  m_comm->poll();
  m_dashboard->refreshAll();
}

void LivePage::appendLog(const QString& level, const QString& text) {
  const QString prefix = level == QLatin1String("info") ? QString() : level.toUpper() + QStringLiteral(": ");
  m_log->appendPlainText(prefix + text);
  m_logFind->logChanged();
}

void LivePage::setStateText(const QString& text) {
  // Beside the name, short (a failure's whole reason is the banner below); the tooltip has it all.
  if (text == m_state->toolTip() && !text.isEmpty()) return;
  m_state->setToolTip(text);
  m_state->setText(m_state->fontMetrics().elidedText(text, Qt::ElideRight, 360));
}

void LivePage::appendSample(qint64 step, const QString& text) {
  m_samplesView->appendPlainText(tr("step %1: %2").arg(step).arg(text));
}

QString LivePage::samplesText() const { return m_samplesView->toPlainText(); }
QString LivePage::titleText() const { return m_title->text(); }
QString LivePage::statusText() const { return m_status->text(); }
QString LivePage::failureText() const { return m_failure->text(); }
QString LivePage::logText() const { return m_log->toPlainText(); }
LogFind* LivePage::logFind() const { return m_logFind; }

}  // namespace flotilla::ui
