// Queue page (see queuepage.h).
#include "ui/queue/queuepage.h"

#include <QAction>
#include <QCheckBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QItemSelectionModel>
#include <QLabel>
#include <QPushButton>
#include <QSettings>
#include <QSplitter>
#include <QTableView>
#include <QTimer>
#include <QVBoxLayout>

#include <unistd.h>

#include "ui/common/pageheader.h"
#include "ui/compare/asyncquery.h"
#include "ui/queue/addqueuedialog.h"
#include "ui/queue/appscheduler.h"
#include "ui/queue/decisionview.h"
#include "ui/queue/queuemodel.h"
#include "ui/runs/storeservice.h"

namespace flotilla::ui {
namespace {

bool waiting(db::EntryState s) { return s == db::EntryState::kQueued || s == db::EntryState::kPaused; }

}  // namespace

QueuePage::QueuePage(StoreService* store, QWidget* parent)
    : QWidget(parent),
      m_store(store),
      m_model(new QueueModel(this)),
      m_table(new QTableView(this)),
      m_decision(new DecisionView(this)),
      m_schedulerLine(new QLabel(this)),
      m_serve(new QCheckBox(tr("&Serve the queue from this window"), this)),
      m_message(new QLabel(this)),
      m_add(new QPushButton(tr("&Add config…"), this)),
      m_poll(new QTimer(this)) {
  auto* header = new PageHeader(
      tr("Queue"),
      tr("Runs waiting to start and the ones the scheduler started: it starts the highest-priority entry "
         "that fits on the place with the lowest predicted cost to finish, within its deadline and money "
         "limit, and puts a preempted run back at the head of the queue. Select an entry to see every "
         "place it weighed and why."),
      this);

  m_schedulerLine->setObjectName(QStringLiteral("schedulerStatus"));
  m_schedulerLine->setWordWrap(true);
  m_schedulerLine->setTextInteractionFlags(Qt::TextSelectableByMouse);
  m_serve->setObjectName(QStringLiteral("serveQueueCheck"));
  m_serve->setToolTip(
      tr("One scheduler serves a workspace: this window, or `flotilla queue serve` on a "
         "server. While another holds it, this window says who and takes over when it stops."));
  m_serve->setEnabled(false);
  // Short rows rather than one long one: the page fits the window's smallest size (780 px wide,
  // test_mainwindow) and 1024x640 (test_small_window).
  auto* schedulerRow = new QHBoxLayout;
  schedulerRow->addWidget(m_serve);
  schedulerRow->addStretch(1);
  schedulerRow->addWidget(m_add);

  m_add->setObjectName(QStringLiteral("addQueueButton"));
  m_add->setToolTip(tr("Queue a run config (.toml), with the places it may go to and its limits"));
  connect(m_add, &QPushButton::clicked, this, [this] { addConfig(); });
  auto* toolbar = new QHBoxLayout;
  const struct {
    QueueAction action;
    const char* name;
    QString text;
    QKeySequence keys;
    QString tip;
  } actions[] = {
      {QueueAction::Cancel, "cancelEntryButton", tr("&Cancel"), QKeySequence(Qt::Key_Delete),
       tr("Take the entry out of the queue (a started run is stopped as a run, on Runs or Live) (Del)")},
      {QueueAction::Pause, "pauseEntryButton", tr("&Pause"), QKeySequence(Qt::CTRL | Qt::Key_P),
       tr("Keep the entry but do not start it (Ctrl+P)")},
      {QueueAction::Resume, "resumeEntryButton", tr("&Resume"), QKeySequence(Qt::CTRL | Qt::Key_R),
       tr("Let a paused entry start again (Ctrl+R)")},
      {QueueAction::MoveUp, "moveUpButton", tr("Move &up"), QKeySequence(Qt::CTRL | Qt::Key_Up),
       tr("Before the entry above it (Ctrl+Up)")},
      {QueueAction::MoveDown, "moveDownButton", tr("Move &down"), QKeySequence(Qt::CTRL | Qt::Key_Down),
       tr("After the entry below it (Ctrl+Down)")},
      {QueueAction::ToTop, "toTopButton", tr("To &top"), QKeySequence(Qt::CTRL | Qt::Key_Home),
       tr("The next entry the scheduler considers (Ctrl+Home)")},
  };
  for (const auto& a : actions) {
    auto* b = new QPushButton(a.text, this);
    b->setObjectName(QLatin1String(a.name));
    b->setToolTip(a.tip);
    const QueueAction which = a.action;
    connect(b, &QPushButton::clicked, this, [this, which] { act(which); });
    auto* shortcut = new QAction(this);
    shortcut->setShortcut(a.keys);
    shortcut->setShortcutContext(Qt::WidgetWithChildrenShortcut);
    connect(shortcut, &QAction::triggered, this, [this, which] { act(which); });
    addAction(shortcut);
    if (which == QueueAction::Cancel)
      schedulerRow->insertWidget(schedulerRow->count() - 1, b);  // beside Add config: in and out of the queue
    else
      toolbar->addWidget(b);
    m_actions << b;
  }
  toolbar->addStretch(1);
  auto* refreshAction = new QAction(this);  // the page polls every second; F5 reads at once
  refreshAction->setShortcut(QKeySequence::Refresh);
  refreshAction->setShortcutContext(Qt::WidgetWithChildrenShortcut);
  connect(refreshAction, &QAction::triggered, this, &QueuePage::refresh);
  addAction(refreshAction);

  m_message->setObjectName(QStringLiteral("queueMessage"));
  m_message->setWordWrap(true);
  m_message->setTextInteractionFlags(Qt::TextSelectableByMouse);
  m_message->hide();

  m_table->setObjectName(QStringLiteral("queueTable"));
  m_table->setModel(m_model);
  m_table->setSelectionBehavior(QAbstractItemView::SelectRows);
  m_table->setSelectionMode(QAbstractItemView::SingleSelection);
  m_table->setAlternatingRowColors(true);
  m_table->verticalHeader()->hide();
  m_table->setWordWrap(false);
  m_table->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  m_table->horizontalHeader()->setStretchLastSection(true);
  m_table->setTabKeyNavigation(false);  // Tab leaves the table for the decision and the buttons
  connect(m_table->selectionModel(), &QItemSelectionModel::currentRowChanged, this, [this] {
    m_wantSelected = 0;
    showSelected();
  });

  auto* decisionTitle = new QLabel(tr("Decision"), this);
  QFont bold = decisionTitle->font();
  bold.setBold(true);
  decisionTitle->setFont(bold);
  auto* decisionBox = new QWidget(this);
  auto* dl = new QVBoxLayout(decisionBox);
  dl->setContentsMargins(0, 4, 0, 0);
  dl->addWidget(decisionTitle);
  dl->addWidget(m_decision, 1);
  auto* split = new QSplitter(Qt::Vertical, this);
  split->setObjectName(QStringLiteral("queueSplit"));
  split->setChildrenCollapsible(false);
  split->addWidget(m_table);
  split->addWidget(decisionBox);
  split->setStretchFactor(0, 3);
  split->setStretchFactor(1, 2);

  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(28, 24, 28, 16);
  layout->setSpacing(10);
  layout->addWidget(header);
  layout->addWidget(m_schedulerLine);
  layout->addLayout(schedulerRow);
  layout->addLayout(toolbar);
  layout->addWidget(m_message);
  layout->addWidget(split, 1);

  m_poll->setInterval(1000);
  connect(m_poll, &QTimer::timeout, this, &QueuePage::refresh);
  m_add->setEnabled(m_store != nullptr);
  updateSchedulerLine();
  updateActions();
}

void QueuePage::setScheduler(AppScheduler* scheduler) {
  m_scheduler = scheduler;
  m_serve->setEnabled(scheduler != nullptr);
  if (!scheduler) return;
  m_serve->setChecked(scheduler->isEnabled());
  connect(m_serve, &QCheckBox::toggled, scheduler, [scheduler](bool on) {
    QSettings(QStringLiteral("Flotilla"), QStringLiteral("Flotilla"))
        .setValue(QStringLiteral("queue/serve"), on);
    scheduler->setEnabled(on);
  });
  connect(scheduler, &AppScheduler::statusChanged, this, [this] {
    updateSchedulerLine();
    refresh();
  });
  updateSchedulerLine();
}

QPushButton* QueuePage::button(QueueAction action) const { return m_actions.value(static_cast<int>(action)); }
QString QueuePage::messageText() const {
  return m_message->isVisible() || !m_message->text().isEmpty() ? m_message->text() : QString();
}
QString QueuePage::schedulerText() const { return m_schedulerLine->text(); }

qint64 QueuePage::selectedId() const {
  const QModelIndex current = m_table->selectionModel()->currentIndex();
  const db::QueueEntry* e = current.isValid() ? m_model->entry(current.row()) : nullptr;
  return e ? e->id : 0;
}

void QueuePage::selectEntry(qint64 id) {
  const int row = m_model->rowOf(id);
  if (row < 0) {
    m_wantSelected = id;
    refresh();
    return;
  }
  m_table->selectionModel()->setCurrentIndex(m_model->index(row, 0),
                                             QItemSelectionModel::ClearAndSelect | QItemSelectionModel::Rows);
  m_table->scrollTo(m_model->index(row, 0));
  m_wantSelected = 0;
  showSelected();
}

void QueuePage::showEvent(QShowEvent* event) {
  QWidget::showEvent(event);
  refresh();
  m_poll->start();
}

void QueuePage::hideEvent(QHideEvent* event) {
  QWidget::hideEvent(event);
  m_poll->stop();
}

void QueuePage::refresh() {
  if (!m_store) return;
  m_loading = true;  // a newer read supersedes an older one still running (its answer is dropped)
  const quint64 generation = ++m_generation;
  runAsync<QueueSnapshot>(
      this, [path = m_store->databasePath()] { return loadQueue(path); },
      [this, generation](Outcome<QueueSnapshot> r) {
        if (generation != m_generation) return;
        m_loading = false;
        if (auto* error = std::get_if<QString>(&r)) {
          showMessage(tr("Could not read the queue: %1").arg(*error), true);
          return;
        }
        apply(std::move(std::get<0>(r)));
      });
}

void QueuePage::apply(QueueSnapshot snapshot) {
  const qint64 keep = m_wantSelected ? m_wantSelected : selectedId();
  m_lease = snapshot.lease;
  m_model->setEntries(std::move(snapshot.entries));
  if (keep && m_model->rowOf(keep) >= 0 && selectedId() != keep) {
    selectEntry(keep);
  } else {
    showSelected();  // the entry's state, why and decision may have changed
  }
  updateSchedulerLine();
  emit loaded();
}

void QueuePage::showSelected() {
  const QModelIndex current = m_table->selectionModel()->currentIndex();
  m_decision->setEntry(current.isValid() ? m_model->entry(current.row()) : nullptr);
  updateActions();
}

void QueuePage::updateActions() {
  const QModelIndex current = m_table->selectionModel()->currentIndex();
  const db::QueueEntry* e = current.isValid() ? m_model->entry(current.row()) : nullptr;
  const bool store = m_store != nullptr;
  // Cancel stays offered for a started entry: the store then says how to stop it (as a run).
  button(QueueAction::Cancel)->setEnabled(store && e && !db::entry_finished(e->state));
  button(QueueAction::Pause)->setEnabled(store && e && e->state == db::EntryState::kQueued);
  button(QueueAction::Resume)->setEnabled(store && e && e->state == db::EntryState::kPaused);
  for (QueueAction a : {QueueAction::MoveUp, QueueAction::MoveDown, QueueAction::ToTop})
    button(a)->setEnabled(store && e && waiting(e->state));
}

void QueuePage::updateSchedulerLine() {
  QString text;
  if (!m_store) {
    text = tr("stopped: this window has no workspace database");
  } else if (m_scheduler && m_scheduler->state() == AppScheduler::State::Serving) {
    text = m_scheduler->statusText();
  } else if (m_lease && !(m_lease->pid == ::getpid() && m_lease->origin == "flotilla app")) {
    text = tr("served by %1")
               .arg(AppScheduler::holderText(QString::fromStdString(m_lease->origin), m_lease->pid,
                                             QString::fromStdString(m_lease->host)));
  } else if (m_scheduler) {
    text = m_scheduler->statusText();
  } else {
    text = tr("stopped: nobody serves this queue (run `flotilla queue serve`, or serve it from the app)");
  }
  m_schedulerLine->setText(tr("Scheduler: %1").arg(text));
}

void QueuePage::showMessage(const QString& text, bool error) {
  QPalette pal = palette();
  if (error) pal.setColor(QPalette::WindowText, QColor(0xc6, 0x28, 0x28));
  m_message->setPalette(pal);
  m_message->setText(text);
  m_message->setVisible(!text.isEmpty());
}

bool QueuePage::act(QueueAction action) {
  const qint64 id = selectedId();
  if (!id) {
    showMessage(tr("Select an entry first."), true);
    return false;
  }
  QString error;
  if (!applyQueueAction(m_store, id, action, &error)) {
    showMessage(error, true);
    return false;
  }
  showMessage(QString(), false);
  m_wantSelected = id;  // keep it selected when it moves
  refresh();
  return true;
}

qint64 QueuePage::addConfig() {
  AddQueueDialog dialog(this);
  const bool ok = answerAdd ? answerAdd(dialog) : dialog.exec() == QDialog::Accepted;
  if (!ok) return 0;
  QueueRequest request;
  QString error;
  if (!dialog.request(&request, &error)) {
    showMessage(error, true);
    return 0;
  }
  QString name;
  const qint64 id = addToQueue(m_store, request, &error, &name);
  if (!id) {
    showMessage(error, true);
    return 0;
  }
  showMessage(tr("Queued %1 (entry %2).").arg(name).arg(id), false);
  selectEntry(id);
  return id;
}

}  // namespace flotilla::ui
