// The stored runs view (see storerunsview.h).
#include "ui/runs/storerunsview.h"

#include <QAction>
#include <QComboBox>
#include <QDateTime>
#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QFutureWatcher>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QInputDialog>
#include <QLabel>
#include <QLineEdit>
#include <QLocale>
#include <QMenu>
#include <QMessageBox>
#include <QPushButton>
#include <QProgressBar>
#include <QRegularExpression>
#include <QTableView>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <type_traits>

#include "db/database.h"
#include "db/errors.h"
#include "db/queries.h"
#include "db/run_records.h"
#include "engine/config/config_io.h"
#include "engine/core/error.h"
#include "engine/core/stop_request.h"
#include "runs/service.h"
#include "ui/common/background.h"
#include "ui/common/numberformat.h"
#include "ui/common/savefile.h"
#include "ui/nodes/machinefacts.h"
#include "ui/nodes/machineprobe.h"
#include "ui/runs/servicerun.h"
#include "ui/runs/localruns.h"
#include "ui/runs/relaunchdialog.h"
#include "ui/runs/storerunsmodel.h"
#include "ui/runs/storeservice.h"

namespace flotilla::ui {
namespace {

struct CheckpointList {
  QList<CheckpointChoice> choices;  // newest first, only those still on disk
  QString error;
};

// The value of a stored series at `step`, or at the nearest step before it (a loss is logged every
// train.log_every steps, a checkpoint may fall between).
std::optional<double> valueAt(const std::vector<db::Point>& points, int64_t step) {
  const auto after = std::upper_bound(points.begin(), points.end(), step,
                                      [](int64_t s, const db::Point& p) { return s < p.step; });
  if (after == points.begin()) return std::nullopt;
  return std::prev(after)->value;
}

// The run's checkpoints that exist now, wherever they are (the runs service: a folder here, or on
// the run's master node or cluster), newest first, each labelled with what the store knows of it.
CheckpointList checkpointsOf(const runs::ServiceOptions& options, qint64 runId) {
  CheckpointList out;
  try {
    db::OpenOptions o;
    o.create = false;
    o.quick_check = false;
    const db::Database db(options.ssh.database_path, o);
    const std::vector<db::Point> losses = db::metric_points(db, runId, "loss");
    const std::vector<db::Point> valLosses = db::metric_points(db, runId, "val_loss");
    std::map<int64_t, db::CheckpointInfo> stored;
    for (const db::CheckpointInfo& c : db::list_checkpoints(db, runId)) stored[c.step] = c;
    runs::RunService service(options);
    for (const runs::CheckpointEntry& c : service.checkpoints(runId)) {
      const auto info = stored.find(c.step);
      QStringList parts{QObject::tr("step %1").arg(QLocale().toString(static_cast<qlonglong>(c.step)))};
      if (const auto loss = valueAt(losses, c.step)) parts << QObject::tr("loss %1").arg(formatMetric(*loss));
      if (const auto val = valueAt(valLosses, c.step)) parts << QObject::tr("val %1").arg(formatMetric(*val));
      if (info != stored.end() && info->second.time > 0)
        parts << QDateTime::fromSecsSinceEpoch(static_cast<qint64>(info->second.time))
                     .toString(QStringLiteral("yyyy-MM-dd HH:mm"));
      const int64_t bytes = c.bytes > 0 ? c.bytes : info != stored.end() ? info->second.bytes : 0;
      if (bytes > 0) parts << formatBytes(static_cast<quint64>(bytes));
      const std::string reason = !c.reason.empty() ? c.reason : info != stored.end() ? info->second.reason : "";
      if (!reason.empty()) parts << QString::fromStdString(checkpoint_reason_words(reason));
      if (c.local_dir.empty()) parts << QObject::tr("on %1").arg(QString::fromStdString(c.where));
      out.choices.prepend({QString::fromStdString(c.local_dir), c.step, parts.join(QStringLiteral(" · "))});
    }
  } catch (const std::exception& e) {
    out.error = QString::fromUtf8(e.what());
  }
  return out;
}

// A run's name without the "-yyyyMMdd-HHmmss[-N]" its launch appended (LocalRuns::newRunDir).
QString launchBaseName(const QString& name) {
  static const QRegularExpression stamp(QStringLiteral("-\\d{8}-\\d{6}(-\\d+)?$"));
  QString base = name;
  base.remove(stamp);
  return base.isEmpty() ? name : base;
}

}  // namespace

bool exportRunCsv(const QString& databasePath, qint64 runId, const QString& path, QString* error) {
  try {
    db::OpenOptions options;
    options.create = false;
    options.quick_check = false;
    const db::Database db(databasePath.toStdString(), options);
    const std::vector<std::string> names = db::metric_names(db, runId);
    std::map<int64_t, std::vector<QString>> table;  // step -> one cell per name
    for (size_t c = 0; c < names.size(); ++c) {
      for (const db::Point& p : db::metric_points(db, runId, names[c])) {
        auto& row = table[p.step];
        row.resize(names.size());
        row[c] = QString::number(p.value, 'g', 9);
      }
    }
    QByteArray out = "step";
    for (const std::string& n : names) out += ',' + QByteArray::fromStdString(n);
    out += '\n';
    for (auto& [step, cells] : table) {
      cells.resize(names.size());
      out += QByteArray::number(step);
      for (const QString& cell : cells) out += ',' + cell.toUtf8();
      out += '\n';
    }
    return saveFileAtomically(path, out, error);
  } catch (const db::DbError& e) {
    if (error) *error = QString::fromUtf8(e.what());
    return false;
  }
}

StoreRunsView::StoreRunsView(StoreService* store, LocalRuns* runs, QWidget* parent)
    : QWidget(parent),
      m_store(store),
      m_runs(runs),
      m_model(new StoreRunsModel(store, this)),
      m_filter(new RunsFilterModel(this)),
      m_table(new QTableView(this)),
      m_status(new QComboBox(this)),
      m_text(new QLineEdit(this)),
      m_tag(new QLineEdit(this)),
      m_busyText(new QLabel(this)),
      m_busyBar(new QProgressBar(this)) {
  m_filter->setSourceModel(m_model);
  m_busyText->setObjectName(QStringLiteral("runsBusyText"));
  m_busyText->hide();
  m_busyBar->setObjectName(QStringLiteral("runsBusyBar"));
  m_busyBar->setRange(0, 0);  // busy: no known end
  m_busyBar->setTextVisible(false);
  m_busyBar->setMaximumWidth(120);
  m_busyBar->hide();
  m_status->setObjectName(QStringLiteral("runsStatusFilter"));
  m_status->addItem(tr("All statuses"), QString());
  for (const char* s : {"running", "completed", "stopped", "preempted", "failed", "created"})
    m_status->addItem(QString::fromLatin1(s), QString::fromLatin1(s));
  m_text->setObjectName(QStringLiteral("runsTextFilter"));
  m_text->setPlaceholderText(tr("Filter by name, target, notes…"));
  m_text->setClearButtonEnabled(true);
  m_tag->setObjectName(QStringLiteral("runsTagFilter"));
  m_tag->setPlaceholderText(tr("Tag"));
  m_tag->setClearButtonEnabled(true);
  m_tag->setMaximumWidth(160);
  connect(m_status, &QComboBox::currentIndexChanged, this,
          [this] { m_filter->setStatusFilter(m_status->currentData().toString()); });
  connect(m_text, &QLineEdit::textChanged, m_filter, &RunsFilterModel::setTextFilter);
  connect(m_tag, &QLineEdit::textChanged, m_filter, &RunsFilterModel::setTagFilter);

  m_table->setObjectName(QStringLiteral("storeRunsTable"));
  m_table->setModel(m_filter);
  m_table->setSortingEnabled(true);
  // Newest first, and the header's arrow says so: it sits on Created, the order the rows are in.
  m_table->sortByColumn(StoreRunsModel::Created, Qt::DescendingOrder);
  m_table->setSelectionBehavior(QAbstractItemView::SelectRows);
  m_table->setSelectionMode(QAbstractItemView::SingleSelection);
  m_table->setEditTriggers(QAbstractItemView::DoubleClicked | QAbstractItemView::EditKeyPressed);
  m_table->verticalHeader()->hide();
  m_table->setAlternatingRowColors(true);
  m_table->setShowGrid(false);
  m_table->setWordWrap(false);
  m_table->setContextMenuPolicy(Qt::CustomContextMenu);
  m_table->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  m_table->horizontalHeader()->setStretchLastSection(true);
  // No column grows past about 40 characters: a longer status or note is elided, with the whole text
  // in its tooltip; and Created is shown before Tags and Notes (free text, the widest columns), so
  // neither pushes it off-screen (issue 34 #19). The model's column order is unchanged.
  m_table->setTextElideMode(Qt::ElideRight);
  m_table->horizontalHeader()->setMaximumSectionSize(m_table->fontMetrics().averageCharWidth() * 40 + 24);
  m_table->horizontalHeader()->moveSection(m_table->horizontalHeader()->visualIndex(StoreRunsModel::Created),
                                           m_table->horizontalHeader()->visualIndex(StoreRunsModel::Tags));
  // Rows that arrive after the first (a run started elsewhere, then the store's snapshot) do not
  // make the header measure its columns again: "long-warmup" was cut to "long-wa…" at the width
  // of the first row's name. Measure again whenever rows come or go.
  const auto remeasure = [this] { m_table->horizontalHeader()->resizeSections(QHeaderView::ResizeToContents); };
  connect(m_filter, &QAbstractItemModel::rowsInserted, this, remeasure);
  connect(m_filter, &QAbstractItemModel::rowsRemoved, this, remeasure);
  connect(m_filter, &QAbstractItemModel::modelReset, this, remeasure);
  connect(m_filter, &QAbstractItemModel::layoutChanged, this, remeasure);
  m_table->setToolTip(
      tr("Double-click a run to watch it on the Live page; tags and notes are edited in "
         "place (F2); Delete removes the selected run; right-click for resume, fork, duplicate, export and "
         "delete"));
  connect(m_table, &QWidget::customContextMenuRequested, this, &StoreRunsView::showMenu);
  // Delete on the selected run (with the same confirmation as the menu's Delete…); not while a tag
  // or note is being edited (the editor has the focus then, and the key is its own).
  auto* deleteKey = new QAction(tr("Delete run"), m_table);
  deleteKey->setObjectName(QStringLiteral("deleteRunAction"));
  deleteKey->setShortcut(QKeySequence::Delete);
  deleteKey->setShortcutContext(Qt::WidgetShortcut);
  m_table->addAction(deleteKey);
  connect(deleteKey, &QAction::triggered, this, [this] {
    const qint64 id = selectedId();
    const int row = id > 0 ? m_model->rowOfId(id) : -1;
    if (row < 0) return;
    if (m_model->rowAt(row)->status == QLatin1String("running")) {
      emit message(tr("%1 is running: stop it first, then delete it").arg(m_model->rowAt(row)->name));
      return;
    }
    remove(id);
  });
  connect(m_table, &QTableView::doubleClicked, this, [this](const QModelIndex& index) {
    const int column = index.column();
    if (column == StoreRunsModel::Tags || column == StoreRunsModel::Notes) return;  // edits instead
    openLive(index.data(StoreRunsModel::IdRole).toLongLong());
  });

  auto* filters = new QHBoxLayout;
  filters->addWidget(new QLabel(tr("Show"), this));
  filters->addWidget(m_status);
  filters->addWidget(m_text, 1);
  filters->addWidget(m_tag);
  filters->addWidget(m_busyText);
  filters->addWidget(m_busyBar);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addLayout(filters);
  layout->addWidget(m_table, 1);
}

qint64 StoreRunsView::selectedId() const {
  const QModelIndexList rows = m_table->selectionModel()->selectedRows();
  return rows.isEmpty() ? 0 : rows.first().data(StoreRunsModel::IdRole).toLongLong();
}

void StoreRunsView::selectId(qint64 id) {
  const int row = m_model->rowOfId(id);
  if (row < 0) return;
  const QModelIndex index = m_filter->mapFromSource(m_model->index(row, 0));
  if (index.isValid()) m_table->selectRow(index.row());
}

void StoreRunsView::showMenu(const QPoint& pos) {
  const QModelIndex index = m_table->indexAt(pos);
  if (!index.isValid()) return;
  const std::unique_ptr<QMenu> menu(runMenu(index.data(StoreRunsModel::IdRole).toLongLong()));
  if (menu) menu->exec(m_table->viewport()->mapToGlobal(pos));
}

QMenu* StoreRunsView::runMenu(qint64 id) {
  const int row = m_model->rowOfId(id);
  if (row < 0) return nullptr;
  const QModelIndex index = m_model->index(row, 0);
  const QString status = index.data(StoreRunsModel::StatusRole).toString();
  const bool running = status == QLatin1String("running");
  const bool checkpointed = index.data(StoreRunsModel::CheckpointsRole).toLongLong() > 0;
  auto* menu = new QMenu(this);
  menu->addAction(tr("Open live"), this, [this, id] { openLive(id); });
  // Resume and Fork need a checkpoint: without one they are shown off, saying why.
  QAction* resumeAction = menu->addAction(
      checkpointed ? tr("Resume from the last checkpoint") : tr("Resume (no checkpoint saved yet)"), this,
      [this, id] { resume(id); });
  resumeAction->setEnabled(checkpointed && !running && status != QLatin1String("completed"));
  QAction* elsewhere = menu->addAction(tr("Resume on another machine or layout…"), this,
                                       [this, id] { resumeElsewhere(id); });
  elsewhere->setEnabled(resumeAction->isEnabled());
  QAction* checkpointAction = menu->addAction(tr("Checkpoint now"), this, [this, id] { checkpointNow(id); });
  checkpointAction->setEnabled(running);
  menu->addAction(tr("List checkpoints…"), this, [this, id] { listCheckpoints(id); })->setEnabled(checkpointed);
  QAction* forkAction =
      menu->addAction(checkpointed ? tr("Fork from a checkpoint…") : tr("Fork (no checkpoint saved yet)"),
                      this, [this, id] { fork(id, QString()); });
  forkAction->setEnabled(checkpointed);
  menu->addAction(tr("Duplicate config…"), this, [this, id] { duplicate(id); });
  QAction* sampleAction =
      menu->addAction(tr("Sample from the model…"), this, [this, id] { sampleModel(id, {}); });
  sampleAction->setEnabled(checkpointed);
  menu->addAction(tr("Evaluate…"), this, [this, id] { evaluate(id); })->setEnabled(checkpointed);
  if (isLoraRun(id)) {
    // The adapter alone (small, loaded over the base with PEFT) or a standalone merged model.
    menu->addAction(tr("Export LoRA adapter (PEFT)…"), this, [this, id] { exportAdapter(id, {}); })
        ->setEnabled(checkpointed);
    menu->addAction(tr("Export merged Hugging Face folder…"), this, [this, id] { exportWeights(id, {}); })
        ->setEnabled(checkpointed);
  } else {
    menu->addAction(tr("Export weights…"), this, [this, id] { exportWeights(id, {}); })
        ->setEnabled(checkpointed);
  }
  menu->addSeparator();
  menu->addAction(tr("Export metrics as CSV…"), this, [this, id] { exportCsv(id, QString()); });
  menu->addSeparator();
  QAction* del = menu->addAction(tr("Delete…"), this, [this, id] { remove(id); });
  del->setEnabled(!running);
  return menu;
}

void StoreRunsView::openLive(qint64 id) {
  const std::optional<db::Run> stored = m_store->run(id);
  const bool running = stored && stored->status == db::RunStatus::kRunning;
  // A run this session watches (or watched to its end): follow it. One it only follows in the
  // store while it runs elsewhere is offered to be watched here again.
  if (ServiceRun* run = m_runs->runForStoreId(id);
      run && (run->isActive() || !running) && !(run->isFollowed() && running)) {
    emit runOpened(run);
    return;
  }
  if (!stored) {
    emit errorRaised(tr("This run is not in the run database any more."));
    return;
  }
  const QString name = QString::fromStdString(stored->name);
  const QString where = QString::fromStdString(runs::RunService::where_text(*stored));
  const runs::Abilities can = runs::RunService(m_runs->serviceOptions()).abilities(*stored);
  if (can.attach.empty()) {
    // Going on somewhere, watched by nobody here: watch it (asked first: a terminal may watch it).
    const QString status = QString::fromLatin1(db::to_string(stored->status));
    const bool yes =
        confirmAttach ? confirmAttach(name, where)
                      : QMessageBox::question(
                            this, tr("Watch run"),
                            tr("Run %1 is %2 on %3 and this window does not watch it.\n\n"
                               "Watch it here now? Its metrics continue from where the run database stopped. "
                               "Do not if `flotilla run` or `flotilla runs attach` watches it in a terminal.")
                                .arg(name, status, where)) == QMessageBox::Yes;
    if (!yes) {
      // Not watched here: shown from the store, followed there as it grows.
      if (ServiceRun* run = m_runs->openStored(id)) emit runOpened(run);
      emit message(tr("Not attached: %1 is shown from the run database as it trains. Open it again to watch "
                      "it here.")
                       .arg(name));
      return;
    }
    QString error;
    if (ServiceRun* run = m_runs->attachRun(id, &error))
      emit runOpened(run);
    else
      emit errorRaised(tr("Cannot attach to %1: %2. Check where it runs (the Nodes or Clusters page), then open "
                          "it again.")
                           .arg(name, error));
    return;
  }
  // Not watched here: what the store has of it, wherever it ran, followed while its row says it runs.
  if (ServiceRun* run = m_runs->openStored(id)) {
    emit runOpened(run);
    return;
  }
  emit errorRaised(tr("Run %1 ran on %2 and is %3; its files stay there. Its metrics are in the run database: "
                      "compare it with other runs or export them as CSV, or resume or fork it.")
                       .arg(name, where, QString::fromLatin1(db::to_string(stored->status))));
}

ServiceRun* StoreRunsView::resume(qint64 id) {
  QString error;
  ServiceRun* run = m_runs->resumeRun(id, &error);
  if (!run) {
    emit errorRaised(tr("Cannot resume: %1").arg(error));
    return nullptr;
  }
  emit runOpened(run);
  return run;
}

std::unique_ptr<RelaunchDialog> StoreRunsView::relaunchDialog(qint64 id, RelaunchDialog::Mode mode) {
  const std::optional<db::Run> stored = m_store->run(id);
  if (!stored) {
    emit errorRaised(tr("This run is not in the run database any more."));
    return nullptr;
  }
  flotilla::RunConfig config;
  try {
    config = flotilla::parse_config_toml(stored->config_toml, stored->name);
  } catch (const flotilla::Error& e) {
    emit errorRaised(tr("Cannot read the config of %1: %2")
                         .arg(QString::fromStdString(stored->name), QString::fromUtf8(e.what())));
    return nullptr;
  }
  const flotilla::ProbeResult probe = m_probe && m_probe->hasResult() ? m_probe->result() : flotilla::probe_machine();
  const QList<HardwareTarget> targets = relaunchTargets(probe, m_store->databasePath());
  const int current = relaunchTargetIndex(targets, runs::RunService::placement_of(*stored), config);
  return std::make_unique<RelaunchDialog>(mode, QString::fromStdString(stored->name), config, targets, current,
                                          this);
}

bool StoreRunsView::askRelaunch(RelaunchDialog& dialog) {
  if (answerRelaunch) return answerRelaunch(dialog);
  return dialog.exec() == QDialog::Accepted;
}

ServiceRun* StoreRunsView::resumeElsewhere(qint64 id) {
  const std::unique_ptr<RelaunchDialog> dialog = relaunchDialog(id, RelaunchDialog::Mode::Resume);
  if (!dialog || !askRelaunch(*dialog) || !dialog->canAccept()) return nullptr;
  const RelaunchChoice choice = dialog->choice();
  QString error;
  ServiceRun* run = m_runs->resumeRun(id, &choice, &error);
  if (!run) {
    emit errorRaised(tr("Cannot resume: %1").arg(error));
    return nullptr;
  }
  emit runOpened(run);
  return run;
}

ServiceRun* StoreRunsView::fork(qint64 id, const QString& checkpointDir) {
  if (checkpointDir.isEmpty()) {
    const runs::ServiceOptions options = m_runs->serviceOptions();
    beginBusy(tr("Reading the checkpoints…"));
    runInBackground(
        this, [options, id] { return checkpointsOf(options, id); },
        [this, id](const CheckpointList& list) {
          endBusy();
          forkFromList(id, list.choices, list.error);
          emit forkListed();
        });
    return nullptr;
  }
  QString error;
  ServiceRun* run = m_runs->forkRun(id, checkpointDir, &error);
  if (!run) {
    emit errorRaised(tr("Cannot fork: %1").arg(error));
    return nullptr;
  }
  emit runOpened(run);
  return run;
}

void StoreRunsView::forkFromList(qint64 id, const QList<CheckpointChoice>& choices, const QString& error) {
  if (!error.isEmpty()) {
    emit errorRaised(error);
    return;
  }
  if (choices.isEmpty()) {
    emit errorRaised(tr("This run has no checkpoint on disk to fork from."));
    return;
  }
  if (chooseCheckpoint) {  // the checkpoint only: forked on this machine, on the run's layout
    const QString dir = chooseCheckpoint(choices);
    if (!dir.isEmpty()) fork(id, dir);
    return;
  }
  // Which checkpoint, where and on which layout: one question.
  const std::unique_ptr<RelaunchDialog> dialog = relaunchDialog(id, RelaunchDialog::Mode::Fork);
  if (!dialog) return;
  dialog->setCheckpoints(choices);
  if (!askRelaunch(*dialog) || !dialog->canAccept()) return;
  const RelaunchChoice choice = dialog->choice();
  qint64 step = -1;
  for (const CheckpointChoice& c : choices)
    if (c.label == dialog->checkpointBox()->currentText()) step = c.step;
  QString why;
  ServiceRun* run = m_runs->forkRun(id, choice.checkpointDir, &choice, &why, step);
  if (!run) {
    emit errorRaised(tr("Cannot fork: %1").arg(why));
    return;
  }
  emit runOpened(run);
}

void StoreRunsView::checkpointNow(qint64 id) {
  if (ServiceRun* run = m_runs->runForStoreId(id); run && run->isActive()) {
    if (!run->canCheckpoint()) {
      emit errorRaised(run->checkpointUnsupportedReason());
      return;
    }
    run->checkpointNow();
    emit message(tr("%1 saves a checkpoint at its next step").arg(run->name()));
    emit checkpointRequested(true);
    return;
  }
  // Watched by another process (or nobody): the service asks the run where it is.
  const runs::ServiceOptions options = m_runs->serviceOptions();
  beginBusy(tr("Asking for a checkpoint…"));
  runInBackground(
      this,
      [options, id] {
        try {
          runs::RunService(options).request_checkpoint(id);
          return QString();
        } catch (const std::exception& e) {
          return QString::fromUtf8(e.what());
        }
      },
      [this, id](const QString& error) {
        endBusy();
        const int row = m_model->rowOfId(id);
        const QString name = row >= 0 ? m_model->rowAt(row)->name : QString::number(id);
        if (error.isEmpty())
          emit message(tr("%1 saves a checkpoint at its next step").arg(name));
        else
          emit errorRaised(tr("Cannot checkpoint %1: %2").arg(name, error));
        emit checkpointRequested(error.isEmpty());
      });
}

void StoreRunsView::checkpointChoices(
    qint64 id, std::function<void(const QList<CheckpointChoice>& choices, const QString& error)> then) {
  const runs::ServiceOptions options = m_runs->serviceOptions();
  beginBusy(tr("Reading the checkpoints…"));
  runInBackground(
      this, [options, id] { return checkpointsOf(options, id); },
      [this, then](const CheckpointList& list) {
        endBusy();
        then(list.choices, list.error);
      });
}

void StoreRunsView::listCheckpoints(qint64 id) {
  const runs::ServiceOptions options = m_runs->serviceOptions();
  beginBusy(tr("Reading the checkpoints…"));
  runInBackground(
      this, [options, id] { return checkpointsOf(options, id); },
      [this](const CheckpointList& list) {
        endBusy();
        if (!list.error.isEmpty()) {
          emit errorRaised(list.error);
        } else if (showCheckpoints) {
          showCheckpoints(list.choices);
        } else {
          QStringList lines;
          for (const CheckpointChoice& c : list.choices) lines << c.label;
          QMessageBox box(QMessageBox::NoIcon, tr("Checkpoints"),
                          lines.isEmpty() ? tr("No checkpoint exists now.") : lines.join(QLatin1Char('\n')),
                          QMessageBox::Close, this);
          box.setTextInteractionFlags(Qt::TextSelectableByMouse);
          box.exec();
        }
        emit checkpointsListed(list.choices, list.error);
      });
}

void StoreRunsView::duplicate(qint64 id) {
  const std::optional<db::Run> run = m_store->run(id);
  if (!run) return;
  try {
    flotilla::RunConfig config;
    if (!run->config_toml.empty()) {
      config = flotilla::parse_config_toml(run->config_toml, run->name);
    } else {
      config = flotilla::load_config_file(run->run_dir + "/config.toml");
    }
    config.run.out_dir.clear();
    config.run.name =
        launchBaseName(QString::fromStdString(config.run.name.empty() ? run->name : config.run.name))
            .toStdString();
    config.checkpoint.resume = "auto";
    emit duplicateRequested(config);
  } catch (const flotilla::Error& e) {
    emit errorRaised(tr("Cannot read the config of %1: %2")
                         .arg(QString::fromStdString(run->name), QString::fromUtf8(e.what())));
  }
}

bool StoreRunsView::exportCsv(qint64 id, const QString& path) {
  QString target = path;
  if (target.isEmpty()) {
    const int row = m_model->rowOfId(id);
    const QString suggested = QDir::home().filePath(
        (row >= 0 ? m_model->rowAt(row)->name : QStringLiteral("run")) + QStringLiteral(".csv"));
    target = chooseCsvPath
                 ? chooseCsvPath(suggested)
                 : QFileDialog::getSaveFileName(this, tr("Export metrics"), suggested, tr("CSV (*.csv)"));
    if (target.isEmpty()) return false;
  }
  const QString database = m_store->databasePath();
  beginBusy(tr("Exporting %1…").arg(QFileInfo(target).fileName()));
  runInBackground(
      this,
      [database, id, target] {
        QString error;
        try {
          if (exportRunCsv(database, id, target, &error)) return QString();
        } catch (const std::exception& e) {
          error = QString::fromUtf8(e.what());
        }
        return error.isEmpty() ? QObject::tr("unknown error") : error;
      },
      [this, target](const QString& error) {
        endBusy();
        if (error.isEmpty()) {
          emit message(tr("Exported to %1").arg(target));
        } else {
          emit errorRaised(tr("Export failed: %1").arg(error));
        }
        emit exportFinished(error.isEmpty());
      });
  return true;
}

void StoreRunsView::beginBusy(const QString& what) {
  m_busyText->setText(what);
  m_busyText->show();
  m_busyBar->show();
  if (++m_busy == 1) {
    setCursor(Qt::BusyCursor);
    emit busyChanged(true);
  }
}

void StoreRunsView::endBusy() {
  if (--m_busy > 0) return;
  m_busy = 0;
  m_busyText->hide();
  m_busyBar->hide();
  unsetCursor();
  emit busyChanged(false);
}

bool StoreRunsView::remove(qint64 id) {
  const int row = m_model->rowOfId(id);
  const QString name = row >= 0 ? m_model->rowAt(row)->name : QString::number(id);
  bool yes = false;
  if (confirmDelete) {
    yes = confirmDelete(name);
  } else {
    // Cancel is the default (as Kill's): Delete then Enter must not remove a run.
    QMessageBox box(QMessageBox::Question, tr("Delete run"),
                    tr("Delete run %1 and all its metrics from the run database? Its folder on disk is kept.")
                        .arg(name),
                    QMessageBox::Yes | QMessageBox::Cancel, this);
    box.setObjectName(QStringLiteral("deleteConfirmation"));
    box.button(QMessageBox::Yes)->setText(tr("Delete"));
    box.setDefaultButton(QMessageBox::Cancel);
    box.setEscapeButton(QMessageBox::Cancel);
    yes = box.exec() == QMessageBox::Yes;
  }
  if (!yes) return false;
  QString error;
  if (!m_store->deleteRun(id, &error)) {
    emit errorRaised(tr("Cannot delete: %1").arg(error));
    return false;
  }
  return true;
}

}  // namespace flotilla::ui
