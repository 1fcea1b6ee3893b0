// Models by name on the Model page (see hubpicker.h).
#include "ui/wizard/hubpicker.h"

#include <QCoreApplication>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QLocale>
#include <QProgressBar>
#include <QPushButton>
#include <QTableWidget>
#include <QtConcurrent/QtConcurrentRun>

#include <algorithm>
#include <exception>

#include "runs/worker_command.h"
#include "ui/wizard/wizardformat.h"

namespace flotilla::ui {
namespace hub = flotilla::interop::hub;
namespace {

QString sizeText(uint64_t bytes) {
  return QLocale().formattedDataSize(static_cast<qint64>(bytes), 1, QLocale::DataSizeSIFormat);
}

QString trimmed(const QString& s) { return s.trimmed(); }

// The last non-empty line of a process's stderr.
QString lastLine(const QByteArray& text) {
  const QList<QByteArray> lines = text.split('\n');
  for (auto it = lines.crbegin(); it != lines.crend(); ++it)
    if (!it->trimmed().isEmpty()) return QString::fromUtf8(it->trimmed());
  return QString();
}

}  // namespace

HubListing listHubCache() {
  HubListing out;
  try {
    const hub::CacheDir dir = hub::cache_dir();
    out.cacheDir = QString::fromStdString(dir.path);
    out.cacheSource = QString::fromStdString(dir.source);
    out.models = hub::list_cached_models(dir.path);
    std::sort(out.models.begin(), out.models.end(),
              [](const hub::CachedModel& a, const hub::CachedModel& b) { return a.repo_id < b.repo_id; });
  } catch (const std::exception& e) {
    out.error = QString::fromUtf8(e.what());
  }
  return out;
}

QString hubProgressText(const hub::Progress& p) { return QString::fromStdString(hub::progress_text(p)); }

QString hubRowName(const hub::CachedModel& m) {
  const QString id = QString::fromStdString(m.repo_id);
  if (std::find(m.refs.begin(), m.refs.end(), "main") != m.refs.end()) return id;
  if (!m.refs.empty()) return id + QLatin1Char('@') + QString::fromStdString(m.refs.front());
  return id + QLatin1Char('@') + QString::fromStdString(m.commit);
}

HubPicker::HubPicker(QWidget* page)
    : QObject(page),
      m_page(page),
      m_cacheLabel(new QLabel(page)),
      m_search(new QLineEdit(page)),
      m_table(new QTableWidget(0, 6, page)),
      m_nameRow(new QWidget(page)),
      m_name(new QLineEdit(page)),
      m_download(new QPushButton(tr("Download"), page)),
      m_nameMessage(new QLabel(page)),
      m_progressRow(new QWidget(page)),
      m_progress(new QProgressBar(page)),
      m_cancel(new QPushButton(tr("Cancel"), page)),
      m_status(new QLabel(page)) {
  m_cacheLabel->setObjectName(QStringLiteral("hubCache"));
  m_search->setObjectName(QStringLiteral("hubSearch"));
  m_table->setObjectName(QStringLiteral("hubModels"));
  m_name->setObjectName(QStringLiteral("hubName"));
  m_download->setObjectName(QStringLiteral("hubDownload"));
  m_nameMessage->setObjectName(QStringLiteral("hubNameMessage"));
  m_progress->setObjectName(QStringLiteral("hubProgress"));
  m_cancel->setObjectName(QStringLiteral("hubCancel"));
  m_status->setObjectName(QStringLiteral("hubStatus"));

  for (QLabel* l : {m_cacheLabel, m_nameMessage, m_status}) {
    l->setWordWrap(true);
    l->setTextInteractionFlags(Qt::TextSelectableByMouse);
  }
  QFont small = m_cacheLabel->font();
  small.setPointSizeF(small.pointSizeF() * 0.9);
  m_cacheLabel->setFont(small);
  m_search->setPlaceholderText(tr("search the cached models by name or architecture"));
  m_search->setClearButtonEnabled(true);
  m_table->setHorizontalHeaderLabels({tr("Name"), tr("Architecture"), tr("Parameters"), tr("Size on disk"),
                                      tr("Revision"), tr("Trainable")});
  m_table->verticalHeader()->hide();
  m_table->setSelectionBehavior(QAbstractItemView::SelectRows);
  m_table->setSelectionMode(QAbstractItemView::SingleSelection);
  m_table->setEditTriggers(QAbstractItemView::NoEditTriggers);
  m_table->setShowGrid(false);
  m_table->setWordWrap(false);
  m_table->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  m_table->horizontalHeader()->setSectionResizeMode(NameColumn, QHeaderView::Stretch);
  m_table->setMinimumHeight(150);
  m_table->setMaximumHeight(220);
  m_name->setPlaceholderText(tr("org/name or org/name@revision, e.g. HuggingFaceTB/SmolLM2-135M"));
  m_download->setToolTip(
      tr("Fetch the model from the Hugging Face Hub (or HF_ENDPOINT) into the cache: config, tokenizer and "
         "safetensors files only"));
  m_cancel->setToolTip(
      tr("Stop the download. What was fetched stays in the cache and the next download resumes from it."));
  m_progress->setRange(0, 1000);
  m_progress->setTextVisible(true);

  auto* nameLayout = new QHBoxLayout(m_nameRow);
  nameLayout->setContentsMargins(0, 0, 0, 0);
  nameLayout->addWidget(m_name, 1);
  nameLayout->addWidget(m_download);
  auto* progressLayout = new QVBoxLayout(m_progressRow);
  progressLayout->setContentsMargins(0, 0, 0, 0);
  auto* barRow = new QHBoxLayout;
  barRow->addWidget(m_progress, 1);
  barRow->addWidget(m_cancel);
  progressLayout->addLayout(barRow);
  progressLayout->addWidget(m_status);

  connect(&m_watcher, &QFutureWatcher<HubListing>::finished, this, &HubPicker::onListed);
  connect(m_search, &QLineEdit::textChanged, this, &HubPicker::applyFilter);
  connect(m_table, &QTableWidget::itemSelectionChanged, this, &HubPicker::onSelection);
  connect(m_name, &QLineEdit::textChanged, this, &HubPicker::onNameEdited);
  connect(m_name, &QLineEdit::returnPressed, this, [this] {
    const QString text = trimmed(m_name->text());
    if (nameProblem().isEmpty() && !text.isEmpty()) {
      if (isCached(text))
        emit chosen(text);
      else if (m_download->isEnabled())
        startDownload();
    }
  });
  connect(m_download, &QPushButton::clicked, this, &HubPicker::startDownload);
  connect(m_cancel, &QPushButton::clicked, this, &HubPicker::cancelDownload);
  updateControls();
}

HubPicker::~HubPicker() {
  if (m_process) {
    m_process->disconnect(this);
    m_process->kill();
    m_process->waitForFinished(3000);
  }
  m_watcher.waitForFinished();
}

void HubPicker::addRows(QFormLayout* form) {
  m_form = form;
  form->addRow(tr("Cache"), m_cacheLabel);
  form->addRow(tr("Search"), m_search);
  form->addRow(m_table);
  form->addRow(tr("Name"), m_nameRow);
  form->addRow(QString(), m_nameMessage);
  form->addRow(QString(), m_progressRow);
}

void HubPicker::setRowsVisible(bool visible) {
  if (!m_form) return;
  for (QWidget* w : {static_cast<QWidget*>(m_cacheLabel), static_cast<QWidget*>(m_search),
                     static_cast<QWidget*>(m_table), m_nameRow})
    m_form->setRowVisible(w, visible);
  m_form->setRowVisible(m_nameMessage, visible && !m_nameMessage->text().isEmpty());
  m_form->setRowVisible(m_progressRow, visible && (isDownloading() || !m_outcome.isEmpty()));
}

void HubPicker::refreshCache() {
  if (m_listing) {
    m_listAgain = true;
    return;
  }
  m_listing = true;
  if (m_cache.cacheDir.isEmpty()) m_cacheLabel->setText(tr("Reading the Hugging Face cache…"));
  m_watcher.setFuture(QtConcurrent::run(listHubCache));
  emit stateChanged();
}

void HubPicker::onListed() {
  m_listing = false;
  m_cache = m_watcher.result();
  if (m_listAgain) {
    m_listAgain = false;
    refreshCache();
    return;
  }
  const QString where = m_cache.cacheSource == QLatin1String("~/.cache")
                            ? tr("%1 (the default; HF_HUB_CACHE or HF_HOME move it)").arg(m_cache.cacheDir)
                            : tr("%1 (set by %2)").arg(m_cache.cacheDir, m_cache.cacheSource);
  if (!m_cache.error.isEmpty()) {
    m_cacheLabel->setText(tr("%1: not readable: %2").arg(where, m_cache.error));
  } else {
    const auto trainable = std::count_if(m_cache.models.begin(), m_cache.models.end(),
                                         [](const hub::CachedModel& m) { return m.trainable; });
    m_cacheLabel->setText(m_cache.models.empty()
                              ? tr("%1: no models yet; type a name below to download one").arg(where)
                              : tr("%1: %2 model(s), %3 Flotilla can train")
                                    .arg(where)
                                    .arg(m_cache.models.size())
                                    .arg(trainable));
  }
  fillTable();
  onNameEdited();
  if (!m_selectAfterList.isEmpty()) {
    const QString name = m_selectAfterList;
    m_selectAfterList.clear();
    showChosen(name);
    emit chosen(name);
  }
  emit stateChanged();
}

void HubPicker::fillTable() {
  m_filling = true;
  const QColor faint = faintText(m_page->palette());
  m_table->clearContents();
  m_table->setRowCount(static_cast<int>(m_cache.models.size()));
  int row = 0;
  for (const hub::CachedModel& m : m_cache.models) {
    QString revision = QString::fromStdString(m.commit).left(7);
    if (!m.refs.empty()) revision += QStringLiteral(" (%1)").arg(QString::fromStdString(m.refs.front()));
    const QString architecture = m.architecture.empty() ? QString::fromStdString(m.model_type)
                                                        : QString::fromStdString(m.architecture);
    const QStringList cells{QString::fromStdString(m.repo_id),
                            architecture,
                            m.parameters > 0 ? formatCount(static_cast<double>(m.parameters)) : tr("—"),
                            sizeText(m.bytes_on_disk),
                            revision,
                            m.trainable ? tr("yes") : tr("no")};
    const QString why = m.trainable ? QString() : QString::fromStdString(m.why_not);
    for (int col = 0; col < cells.size(); ++col) {
      auto* item = new QTableWidgetItem(cells[col]);
      item->setData(Qt::UserRole, hubRowName(m));
      if (col == ParamsColumn || col == SizeColumn) item->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
      if (!m.trainable) {
        // Greyed and not selectable: the tooltip says why.
        item->setFlags(Qt::ItemIsEnabled);
        item->setForeground(faint);
        item->setToolTip(tr("Flotilla cannot train this model: %1").arg(why));
      } else {
        item->setToolTip(tr("%1, commit %2, in %3")
                             .arg(QString::fromStdString(m.repo_id), QString::fromStdString(m.commit),
                                  QString::fromStdString(m.folder)));
      }
      m_table->setItem(row, col, item);
    }
    ++row;
  }
  m_filling = false;
  applyFilter();
}

void HubPicker::applyFilter() {
  const QStringList words = m_search->text().split(QLatin1Char(' '), Qt::SkipEmptyParts);
  for (int row = 0; row < m_table->rowCount(); ++row) {
    const auto& m = m_cache.models[static_cast<size_t>(row)];
    const QString hay = QString::fromStdString(m.repo_id + " " + m.architecture + " " + m.model_type);
    bool shown = true;
    for (const QString& w : words) shown = shown && hay.contains(w, Qt::CaseInsensitive);
    m_table->setRowHidden(row, !shown);
  }
}

void HubPicker::showChosen(const QString& name) {
  m_chosen = name;
  if (trimmed(m_name->text()) != name) {
    const QSignalBlocker block(m_name);
    m_name->setText(name);
  }
  onNameEdited();
  m_filling = true;
  m_table->clearSelection();
  QString repo = name.section(QLatin1Char('@'), 0, 0);
  for (int row = 0; row < m_table->rowCount(); ++row)
    if (m_table->item(row, NameColumn)->text() == repo &&
        (m_table->item(row, NameColumn)->flags() & Qt::ItemIsSelectable)) {
      m_table->selectRow(row);
      m_table->scrollToItem(m_table->item(row, NameColumn));
    }
  m_filling = false;
}

bool HubPicker::pick(const QString& repoId) {
  for (int row = 0; row < m_table->rowCount(); ++row) {
    QTableWidgetItem* item = m_table->item(row, NameColumn);
    if (item->text() != repoId) continue;
    if (!(item->flags() & Qt::ItemIsSelectable)) return false;
    m_table->selectRow(row);  // onSelection() emits chosen()
    return true;
  }
  return false;
}

void HubPicker::onSelection() {
  if (m_filling) return;
  const QList<QTableWidgetItem*> items = m_table->selectedItems();
  if (items.isEmpty()) return;
  const QString name = items.front()->data(Qt::UserRole).toString();
  m_chosen = name;
  {
    const QSignalBlocker block(m_name);
    m_name->setText(name);
  }
  onNameEdited();
  emit chosen(name);
}

bool HubPicker::isCached(const QString& name) const {
  // The cache itself, not the listing's rows: a row is a repo's newest snapshot, and a name may ask
  // for another revision. A few file lookups, no network.
  try {
    const hub::ModelRef ref = hub::parse_model_ref(name.toStdString(), "name");
    const std::string dir =
        m_cache.cacheDir.isEmpty() ? hub::cache_dir().path : m_cache.cacheDir.toStdString();
    return hub::find_cached(ref, hub::FileSet::kTraining, dir).has_value();
  } catch (const std::exception&) {
    return false;
  }
}

QString HubPicker::nameProblem() const {
  const QString text = trimmed(m_name->text());
  if (text.isEmpty()) return QString();
  try {
    hub::parse_model_ref(text.toStdString(), "name");
  } catch (const std::exception& e) {
    return QString::fromUtf8(e.what());
  }
  return QString();
}

void HubPicker::onNameEdited() {
  const QString text = trimmed(m_name->text());
  const QString problem = nameProblem();
  if (!problem.isEmpty())
    m_nameMessage->setText(problem);
  else if (text.isEmpty() || m_listing)
    m_nameMessage->clear();
  else if (text == m_chosen)
    m_nameMessage->clear();  // the model in use: its summary below says the rest
  else if (isCached(text))
    m_nameMessage->setText(tr("In the cache: press Enter or pick its row to use it."));
  else
    m_nameMessage->setText(
        tr("Not in the cache: Download fetches its config, tokenizer and safetensors files from the Hub."));
  updateControls();
}

void HubPicker::updateControls() {
  const QString text = trimmed(m_name->text());
  const bool valid = !text.isEmpty() && nameProblem().isEmpty();
  m_download->setEnabled(valid && !isCached(text) && !isDownloading());
  m_progress->setVisible(isDownloading());
  m_cancel->setVisible(isDownloading());
  if (isDownloading())
    m_status->setText(
        (m_progressLine.isEmpty() ? tr("Asking the Hub for %1…").arg(m_downloadName) : m_progressLine) +
        tr(". Cancel keeps what was fetched; the next download resumes from it."));
  else
    m_status->setText(m_outcome);
  setRowsVisible(m_form && m_form->isRowVisible(m_table));
}

QString HubPicker::statusText() const { return m_status->text(); }
QString HubPicker::progressText() const { return m_progressLine; }

void HubPicker::startDownload() {
  if (isDownloading()) return;
  const QString text = trimmed(m_name->text());
  hub::ModelRef ref;
  try {
    ref = hub::parse_model_ref(text.toStdString(), "name");
  } catch (const std::exception& e) {
    m_nameMessage->setText(QString::fromUtf8(e.what()));  // refused before any process starts
    updateControls();
    return;
  }
  QString worker;
  try {
    worker = QString::fromStdString(runs::find_worker(m_workerPath.toStdString()));
  } catch (const std::exception& e) {
    m_outcome = QString::fromUtf8(e.what());
    updateControls();
    return;
  }
  m_downloadName = text;
  m_downloadRepo = QString::fromStdString(ref.repo_id);
  m_out.clear();
  m_err.clear();
  m_cancelled = false;
  m_ended = false;
  m_progressLine.clear();
  m_outcome.clear();
  m_doneCommit.clear();
  m_progress->setValue(0);
  m_process = new QProcess(this);
  m_process->setProgram(worker);
  m_process->setArguments(
      {QStringLiteral("hub"), QStringLiteral("download"), text, QStringLiteral("--json")});
  connect(m_process, &QProcess::readyReadStandardOutput, this, &HubPicker::onOutput);
  connect(m_process, &QProcess::readyReadStandardError, this, [this] {
    m_err += m_process->readAllStandardError();
    if (m_err.size() > 65536) m_err = m_err.right(65536);
  });
  connect(m_process, &QProcess::finished, this, &HubPicker::onFinished);
  connect(m_process, &QProcess::errorOccurred, this, [this](QProcess::ProcessError e) {
    if (e != QProcess::FailedToStart) return;
    m_outcome = tr("cannot start %1: %2").arg(m_process->program(), m_process->errorString());
    m_process->deleteLater();
    m_process = nullptr;
    updateControls();
    emit stateChanged();
  });
  m_process->start();
  updateControls();
  emit chosen(text);  // the model being fetched is the choice: Next and Launch wait for it
  emit stateChanged();
}

void HubPicker::cancelDownload() {
  if (!m_process) return;
  m_cancelled = true;
  m_process->kill();  // finished() follows
}

void HubPicker::onOutput() {
  m_out += m_process->readAllStandardOutput();
  int nl;
  while ((nl = m_out.indexOf('\n')) >= 0) {
    const QByteArray line = m_out.left(nl).trimmed();
    m_out.remove(0, nl + 1);
    if (!line.isEmpty()) handleLine(line);
  }
}

void HubPicker::handleLine(const QByteArray& line) {
  // One parser of the worker's --json lines, the node fetch's too (hub::parse_download_event).
  const hub::DownloadEvent e = hub::parse_download_event(line.toStdString());
  if (e.kind == hub::DownloadEvent::Kind::kProgress) {
    const hub::Progress& p = e.progress;
    m_progressLine = hubProgressText(p);
    m_progress->setValue(
        p.total > 0 ? static_cast<int>(1000.0 * static_cast<double>(p.done) / static_cast<double>(p.total))
                    : 0);
    updateControls();
  } else if (e.kind == hub::DownloadEvent::Kind::kDone) {
    m_ended = true;
    m_doneCommit = QString::fromStdString(e.commit);
    m_progress->setValue(1000);
  } else if (e.kind == hub::DownloadEvent::Kind::kError) {
    m_ended = true;
    m_outcome = QString::fromStdString(e.message);  // the worker's words, verbatim
  }
}

void HubPicker::onFinished(int code, QProcess::ExitStatus status) {
  onOutput();
  if (!m_out.trimmed().isEmpty()) handleLine(m_out.trimmed());
  m_out.clear();
  const bool ok = status == QProcess::NormalExit && code == 0 && !m_doneCommit.isEmpty();
  if (m_cancelled) {
    m_outcome = tr("Download of %1 cancelled. What was fetched stays in the cache; the next download "
                   "resumes from it.")
                    .arg(m_downloadName);
  } else if (ok) {
    m_outcome = tr("Downloaded %1 (commit %2).").arg(m_downloadName, m_doneCommit.left(7));
    m_selectAfterList = m_downloadName;
  } else if (m_outcome.isEmpty()) {
    const QString why = lastLine(m_err);
    m_outcome = why.isEmpty() ? tr("The download stopped (worker exit code %1).").arg(code) : why;
  }
  m_process->deleteLater();
  m_process = nullptr;
  updateControls();
  if (ok) refreshCache();
  emit stateChanged();
}

}  // namespace flotilla::ui
