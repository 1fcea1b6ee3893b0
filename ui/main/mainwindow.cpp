// Main window composition (see mainwindow.h).
#include "ui/main/mainwindow.h"

#include <QAction>
#include <QActionGroup>
#include <QApplication>
#include <QCheckBox>
#include <QCloseEvent>
#include <QDesktopServices>
#include <QDir>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QLabel>
#include <QMenuBar>
#include <QMessageBox>
#include <QPushButton>
#include <QScreen>
#include <QSettings>
#include <QStackedWidget>
#include <QStatusBar>
#include <QThreadPool>
#include <QTimer>
#include <QUrl>

#include "db/errors.h"
#include "engine/cpu/cpu_features.h"
#include "engine/cpu/peak_cache.h"
#include "engine/plan/calibration.h"
#include "ui/chat/chatpage.h"
#include "ui/clusters/clusterspage.h"
#include "ui/common/accessiblestyle.h"
#include "ui/common/icons.h"
#include "ui/compare/comparepage.h"
#include "ui/costs/costspage.h"
#include "ui/live/livepage.h"
#include "ui/main/aboutdialog.h"
#include "ui/main/runnotifier.h"
#include "ui/main/sidebar.h"
#include "ui/nodes/machineprobe.h"
#include "ui/nodes/nodespage.h"
#include "ui/queue/appscheduler.h"
#include "ui/queue/queuepage.h"
#include "ui/runs/localruns.h"
#include "ui/runs/runhandle.h"
#include "ui/runs/runspage.h"
#include "ui/runs/servicerun.h"
#include "ui/runs/storeservice.h"
#include "ui/settings/settingspage.h"

namespace flotilla::ui {
namespace {

QSettings layoutSettings() { return QSettings(QStringLiteral("Flotilla"), QStringLiteral("Flotilla")); }

// "/home/ana/.local/share/flotilla" -> "~/.local/share/flotilla"
QString shortPath(const QString& path) {
  const QString home = QDir::homePath();
  if (path == home) return QStringLiteral("~");
  if (path.startsWith(home + QLatin1Char('/'))) return QStringLiteral("~") + path.mid(home.size());
  return path;
}

}  // namespace

namespace {

void keepCpuCeilingInBackground() {
  static bool started = false;  // once per process
  if (started) return;
  started = true;
  const int threads = flotilla::rank_threads(flotilla::RunConfig{});
  const std::string path = flotilla::cpu::peak_cache_path();
  const std::string brand = flotilla::cpu::cpu_features().brand;
  if (flotilla::cpu::load_cached_peak(path, brand, threads) ||
      flotilla::cpu::load_provisional_peak(path, brand, threads))
    return;
  QThreadPool::globalInstance()->start([threads] { flotilla::cpu::peak_for_run(threads); });
}

}  // namespace

MainWindow::MainWindow(const WorkspaceInfo& workspace, QWidget* parent)
    : QMainWindow(parent),
      m_versions(collectVersions()),
      m_probe(new MachineProbe(this)),
      m_runs(new LocalRuns(workspace.directory, this)),
      m_sidebar(new Sidebar(this)),
      m_stack(new QStackedWidget(this)) {
  initResources();
  installAccessibleStyle();  // before any page is built: every control draws 3:1 edges and focus rings
  setObjectName(QStringLiteral("mainWindow"));
  setWindowTitle(tr("Flotilla"));
  setWindowIcon(appIcon());

  QString storeError;
  if (!workspace.databasePath.isEmpty()) {
    try {
      m_store = new StoreService(workspace.databasePath, this);
      m_runs->setStore(m_store);
    } catch (const flotilla::db::DbError& e) {
      storeError = tr("The run database cannot be written (%1): runs are kept for this session only.")
                       .arg(QString::fromUtf8(e.what()));
    }
  }

  buildPages(workspace);
  buildMenus();
  buildStatusBar(workspace);
  connectRuns();
  connectQueue();

  // A one-pixel rule in the palette's mid tone (a sunken QFrame draws a bright edge on dark themes).
  auto* divider = new QWidget(this);
  divider->setFixedWidth(1);
  divider->setAutoFillBackground(true);
  divider->setBackgroundRole(QPalette::Mid);
  auto* central = new QWidget(this);
  auto* layout = new QHBoxLayout(central);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->setSpacing(0);
  layout->addWidget(m_sidebar);
  layout->addWidget(divider);
  layout->addWidget(m_stack, 1);
  setCentralWidget(central);

  connect(m_sidebar, &Sidebar::currentIndexChanged, this, &MainWindow::showPage);
  restoreLayout();
  m_probe->start();
  // The MFU ceiling a local run divides by, measured once in the background two seconds after the
  // window shows, when none is kept for the threads a default run uses: the first run then starts on
  // a kept figure instead of measuring for seconds it is billed for (engine/cpu/peak_cache.h).
  QTimer::singleShot(2000, this, [] { keepCpuCeilingInBackground(); });
  if (!storeError.isEmpty()) statusBar()->showMessage(storeError);
  if (m_store) {
    // Workers an earlier session left running: watch them again, or record that they are gone.
    // Said in the running count's label, not as a temporary message drawn over the bar.
    m_reattached = m_runs->reattachRunning();
    showRunning(m_runs->runningCount());
  }
}

MainWindow::~MainWindow() {
  // Before the store service (an earlier child): the scheduler stores through its writer, and
  // releases the lease on its way out.
  delete m_scheduler;
  m_scheduler = nullptr;
}

void MainWindow::buildPages(const WorkspaceInfo& workspace) {
  struct Entry {
    const char* icon;
    QString title;
    QWidget* widget;
  };
  const QString settingsFile = layoutSettings().fileName();
  const Entry entries[] = {
      {"runs", tr("Runs"), new RunsPage(m_runs, m_stack)},
      {"queue", tr("Queue"), new QueuePage(m_store, m_stack)},
      {"live", tr("Live"), new LivePage(m_stack)},
      {"compare", tr("Compare"), new ComparePage(workspace.databasePath, m_stack)},
      {"chat", tr("Chat"), new ChatPage(workspace.databasePath, QString(), m_stack)},
      {"nodes", tr("Nodes"), new NodesPage(m_probe, m_stack)},
      {"costs", tr("Costs"), new CostsPage(workspace.databasePath, m_stack)},
      {"clusters", tr("Clusters"), new ClustersPage(workspace.databasePath, m_stack)},
      {"settings", tr("Settings"), new SettingsPage(workspace, settingsFile, m_stack)},
  };
  static_cast<RunsPage*>(entries[Runs].widget)
      ->setMachineProbe(m_probe);  // the wizard reuses the app's probe
  // Nodes are rows of the workspace database; without it the page shows only this machine.
  if (!workspace.databasePath.isEmpty()) {
    static_cast<NodesPage*>(entries[Nodes].widget)->setDatabasePath(workspace.databasePath);
  }
  for (const Entry& e : entries) {
    e.widget->setObjectName(QLatin1String(e.icon) + QStringLiteral("Page"));
    m_sidebar->addPage(QLatin1String(e.icon), e.title);
    m_stack->addWidget(e.widget);
  }
}

void MainWindow::buildMenus() {
  QMenu* file = menuBar()->addMenu(tr("&File"));
  // The Runs page owns "New run…" (Ctrl+N); listing the same action here makes the shortcut work
  // from every page, and the wizard opens over the Runs page.
  auto* runsPage = static_cast<RunsPage*>(page(Runs));
  if (QAction* newRun = runsPage->findChild<QAction*>(QStringLiteral("newRunAction"))) {
    file->addAction(newRun);
    connect(newRun, &QAction::triggered, this, [this] { showPage(Runs); });
    file->addSeparator();
  }
  QAction* quit = file->addAction(tr("&Quit"), this, &QWidget::close);
  quit->setShortcut(QKeySequence::Quit);  // Ctrl+Q
  quit->setShortcutContext(Qt::ApplicationShortcut);
  quit->setMenuRole(QAction::QuitRole);

  QMenu* view = menuBar()->addMenu(tr("&View"));
  m_pageActions = new QActionGroup(this);
  const QStringList titles = m_sidebar->titles();
  for (int i = 0; i < titles.size(); ++i) {
    QAction* action = view->addAction(titles[i]);
    action->setObjectName(QStringLiteral("showPage%1").arg(i + 1));
    action->setCheckable(true);
    action->setShortcut(QKeySequence(Qt::CTRL | static_cast<Qt::Key>(Qt::Key_1 + i)));
    action->setShortcutContext(Qt::ApplicationShortcut);
    m_pageActions->addAction(action);
    connect(action, &QAction::triggered, this, [this, i] { showPage(i); });
  }

  buildRunMenu();

  QMenu* help = menuBar()->addMenu(tr("&Help"));
  QAction* docs = help->addAction(tr("Flotilla &documentation"), this, [this] {
    const QString index = documentationIndex();
    if (index.isEmpty()) {
      statusBar()->showMessage(tr("The documentation is not installed next to Flotilla (docs/README.md)"),
                               8000);
      return;
    }
    const QUrl url = QUrl::fromLocalFile(index);
    if (m_openUrl ? m_openUrl(url) : QDesktopServices::openUrl(url)) return;
    // No desktop handler (a bare X server, no xdg-open): say where the documentation is.
    if (m_docsMessage) m_docsMessage->close();
    auto* box = new QMessageBox(QMessageBox::Information, tr("Flotilla documentation"),
                                tr("No program on this desktop opens documents, so Flotilla cannot show "
                                   "its documentation itself. It is at:\n\n%1\n\nOpen that file in a web "
                                   "browser or a text editor (the folder holds one page per topic).")
                                    .arg(QDir::toNativeSeparators(index)),
                                QMessageBox::Ok, this);
    box->setObjectName(QStringLiteral("documentationMessage"));
    box->setTextInteractionFlags(Qt::TextSelectableByMouse);
    box->setAttribute(Qt::WA_DeleteOnClose);
    m_docsMessage = box;
    box->open();
  });
  docs->setObjectName(QStringLiteral("helpAction"));
  docs->setShortcut(QKeySequence::HelpContents);  // F1
  docs->setShortcutContext(Qt::ApplicationShortcut);
  help->addSeparator();
  QAction* about = help->addAction(tr("&About Flotilla"), this, &MainWindow::showAbout);
  about->setObjectName(QStringLiteral("aboutAction"));
  about->setMenuRole(QAction::AboutRole);
  help->addAction(tr("About &Qt"), qApp, &QApplication::aboutQt);
}

void MainWindow::buildRunMenu() {
  // The run shown on the Live page: its controls from every page, by keyboard; enabled only for
  // what that run can do now (nothing with no run), as Live's buttons.
  QMenu* menu = menuBar()->addMenu(tr("&Run"));
  auto* live = static_cast<LivePage*>(page(Live));
  QAction* demo = menu->addAction(tr("Run the &demo"), this, [this] {
    showPage(Runs);
    static_cast<RunsPage*>(page(Runs))->runDemoButton()->click();
  });
  demo->setObjectName(QStringLiteral("runDemoAction"));
  menu->addSeparator();
  connect(menu, &QMenu::aboutToShow, this, &MainWindow::updateRunMenu);
  const struct {
    const char* name;
    QString text;
    QKeySequence keys;
    void (RunHandle::*slot)();
  } entries[] = {
      {"checkpointNowAction", tr("&Checkpoint now"), QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_S),
       &RunHandle::checkpointNow},
      {"stopRunAction", tr("&Stop (with checkpoint)"), QKeySequence(Qt::CTRL | Qt::Key_Period),
       &RunHandle::stop},
      {"killRunAction", tr("&Kill"), QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_K), &RunHandle::kill},
  };
  for (const auto& e : entries) {
    QAction* action = menu->addAction(e.text);
    action->setObjectName(QLatin1String(e.name));
    action->setShortcut(e.keys);
    action->setShortcutContext(Qt::ApplicationShortcut);
    const auto slot = e.slot;
    connect(action, &QAction::triggered, this, [this, live, slot, action, text = e.text] {
      updateRunMenu();
      RunHandle* run = live->followed();
      if (!run || !action->isEnabled()) {
        statusBar()->showMessage(
            run ? tr("%1 cannot %2 now (%3)")
                      .arg(run->name(), QString(text).remove(QLatin1Char('&')).toLower(), run->stateText())
                : tr("No run to act on: open a running run on the Live page (Runs → double-click)"),
            8000);
        return;
      }
      (run->*slot)();
    });
    m_runActions << action;
  }
  updateRunMenu();
  // The run Live follows changes state without telling the window (a run watched elsewhere ends in
  // its terminal): the shortcuts follow it within a second, as the menu does when opened.
  auto* poll = new QTimer(this);
  poll->setInterval(1000);
  connect(poll, &QTimer::timeout, this, &MainWindow::updateRunMenu);
  poll->start();
}

void MainWindow::updateRunMenu() {
  if (m_runActions.size() != 3) return;
  const RunHandle* run = static_cast<LivePage*>(page(Live))->followed();
  const bool canStop = run && run->canStop();
  m_runActions[0]->setEnabled(run && (run->state() == RunHandle::State::Running || canStop) &&
                              run->canCheckpoint());
  m_runActions[1]->setEnabled(canStop);
  m_runActions[2]->setEnabled(run && run->canKill());
}

void MainWindow::buildStatusBar(const WorkspaceInfo& workspace) {
  auto* where = new QLabel(tr("Workspace: %1").arg(shortPath(workspace.directory)), this);
  where->setObjectName(QStringLiteral("statusWorkspace"));
  where->setToolTip(workspace.databasePath);
  // Runs running: the local-runs service feeds it; spend: the store's snapshots (open accruals).
  auto* running = new QLabel(tr("0 runs running"), this);
  running->setObjectName(QStringLiteral("statusRunning"));
  m_running = running;
  auto* spend = new QLabel(tr("$0.00/h"), this);
  spend->setObjectName(QStringLiteral("statusSpend"));
  spend->setToolTip(tr("Current spend rate of all running runs (node prices: Costs page)"));
  m_spend = spend;
  if (m_store)
    connect(m_store, &StoreService::snapshotReady, this, [this](const QVector<RunRow>& rows) {
      m_spend->setText(tr("$%1/h").arg(m_store->spendPerHour(), 0, 'f', 2));
      // Runs this session does not watch (started by `flotilla run` in a terminal, or by another
      // window) count too: the store says they are running.
      int others = 0;
      for (const RunRow& row : rows) {
        if (row.status != QLatin1String("running")) continue;
        // A run this session watches is counted (or not, once ended) by the session; one it only
        // follows in the store (ServiceRun::isFollowed) is still someone else's.
        const ServiceRun* known = m_runs->runForStoreId(row.id);
        if (!known || known->isFollowed()) ++others;
      }
      if (others != m_othersRunning) {
        m_othersRunning = others;
        showRunning(m_runs->runningCount());
      }
    });
  for (QLabel* label : {where, running, spend}) label->setContentsMargins(8, 0, 8, 0);
  statusBar()->addWidget(where, 1);
  statusBar()->addPermanentWidget(running);
  statusBar()->addPermanentWidget(spend);
}

void MainWindow::connectRuns() {
  auto* runsPage = static_cast<RunsPage*>(page(Runs));
  auto* livePage = static_cast<LivePage*>(page(Live));
  // The Live page's run picker lists the session's runs and follows a re-attached one when it
  // follows no active run, without switching pages (unlike a run the user starts or opens).
  livePage->setRuns(m_runs);
  connect(m_runs, &LocalRuns::runChanged, this, &MainWindow::updateRunMenu);
  connect(m_runs, &LocalRuns::runAdded, this, &MainWindow::updateRunMenu);
  connect(runsPage, &RunsPage::runOpened, this, [this, livePage](ServiceRun* run) {
    livePage->setRun(run);
    showPage(Live);
  });
  // Runs that finish, fail, stall or near their budget while the user looks elsewhere.
  m_notifier = new RunNotifier(m_runs, this);
  m_notifier->setDesktopEnabled(Preferences::load().notifyDesktop);
  connect(m_notifier, &RunNotifier::notified, this,
          [this](RunNotifier::Event, const QString& title, const QString& text) {
            statusBar()->showMessage(title + QStringLiteral(": ") + text, 30000);
          });
  connect(m_notifier, &RunNotifier::webhookDelivered, this, [this](bool ok, const QString& error) {
    if (!ok) statusBar()->showMessage(tr("Notification not delivered: %1").arg(error), 30000);
  });
  connect(static_cast<SettingsPage*>(page(Settings)), &SettingsPage::preferencesChanged, m_notifier,
          [this](const Preferences& p) { m_notifier->setDesktopEnabled(p.notifyDesktop); });
  connect(m_runs, &LocalRuns::runningCountChanged, this, [this](int n) {
    showRunning(n);
    if (n == 0 && m_closeWhenStopped) QTimer::singleShot(0, this, [this] { close(); });
  });
}

void MainWindow::connectQueue() {
  auto* queuePage = static_cast<QueuePage*>(page(Queue));
  auto* runsPage = static_cast<RunsPage*>(page(Runs));
  // The wizard's "Add to queue": the Queue page with the new entry selected.
  connect(runsPage, &RunsPage::entryQueued, this, [this, queuePage](qint64 id) {
    showPage(Queue);
    queuePage->selectEntry(id);
  });
  if (!m_store) return;
  // One scheduler per workspace: this window serves the queue unless another holds the lease
  // (then the Queue page says who, and this window takes over once it stops). Its own thread.
  m_scheduler =
      new AppScheduler(m_store->databasePath(), runsSchedulerEngine(m_runs->serviceOptions()), this);
  queuePage->setScheduler(m_scheduler);
  connect(m_scheduler, &AppScheduler::decided, m_notifier,
          [this](RunNotifier::Event event, const QString& entry, const QString& text) {
            m_notifier->notifyQueue(event, entry, text);
          });
  connect(m_scheduler, &AppScheduler::autostopped, m_notifier, &RunNotifier::notifyAutostop);
  // Remembered per user (Settings' file); on unless turned off. Checking the toggle starts it.
  queuePage->serveToggle()->setChecked(layoutSettings().value(QStringLiteral("queue/serve"), true).toBool());
}

void MainWindow::showRunning(int sessionRuns) {
  const int n = sessionRuns + m_othersRunning;
  QString text = n == 1 ? tr("1 run running") : tr("%1 runs running").arg(n);
  QStringList notes;
  if (m_reattached > 0 && sessionRuns > 0) notes << tr("%n re-attached", nullptr, m_reattached);
  if (m_othersRunning > 0) notes << tr("%n started elsewhere", nullptr, m_othersRunning);
  if (!notes.isEmpty()) text += QStringLiteral(" (%1)").arg(notes.join(QStringLiteral(", ")));
  m_running->setText(text);
  m_running->setToolTip(m_othersRunning > 0
                            ? tr("Runs the store records as running that this window does not "
                                 "watch (started with `flotilla run` or by another window); "
                                 "the Runs page lists them")
                            : QString());
}

MainWindow::CloseChoice MainWindow::askAboutActiveRuns(int activeRuns) {
  if (m_closeQuestion) return m_closeQuestion(activeRuns);
  QMessageBox box(
      QMessageBox::Question, tr("Flotilla"),
      activeRuns == 1 ? tr("A run is still training.") : tr("%1 runs are still training.").arg(activeRuns),
      QMessageBox::NoButton, this);
  box.setInformativeText(tr(
      "Stop: each worker saves a checkpoint at its next step, then Flotilla closes; the run can be resumed.\n"
      "Leave it running: it keeps training and writing its run folder after Flotilla closes."));
  QPushButton* stop =
      box.addButton(activeRuns == 1 ? tr("Stop the run") : tr("Stop the runs"), QMessageBox::AcceptRole);
  QPushButton* leave = box.addButton(tr("Leave it running"), QMessageBox::DestructiveRole);
  box.addButton(QMessageBox::Cancel);
  box.setDefaultButton(stop);
  box.exec();
  if (box.clickedButton() == stop) return CloseChoice::StopRuns;
  if (box.clickedButton() == leave) return CloseChoice::LeaveRunning;
  return CloseChoice::Cancel;
}

int MainWindow::currentPage() const { return m_stack->currentIndex(); }
QStringList MainWindow::pageTitles() const { return m_sidebar->titles(); }
QWidget* MainWindow::page(Page page) const { return m_stack->widget(page); }

void MainWindow::showPage(int page) {
  if (page < 0 || page >= m_stack->count()) return;
  m_stack->setCurrentIndex(page);
  if (m_sidebar->currentIndex() != page) m_sidebar->setCurrentIndex(page);
  const QList<QAction*> actions = m_pageActions->actions();
  if (page < actions.size()) actions[page]->setChecked(true);
}

QString MainWindow::documentationIndex() {
  // Installed (share/doc/flotilla next to bin/), then the source tree a developer build sits in.
  const QDir bin(QCoreApplication::applicationDirPath());
  for (const QString& candidate :
       {bin.filePath(QStringLiteral("../share/doc/flotilla/README.md")),
        bin.filePath(QStringLiteral("../docs/README.md")),
        bin.filePath(QStringLiteral("../../docs/README.md")), QStringLiteral(FLOTILLA_DOCS_DIR "/README.md")})
    if (QFileInfo::exists(candidate)) return QFileInfo(candidate).canonicalFilePath();
  return {};
}

QString MainWindow::aboutText() const { return AboutDialog::versionsHtml(m_versions, m_probe); }

void MainWindow::showAbout() {
  if (!m_about) m_about = new AboutDialog(m_versions, m_probe, this);
  m_about->show();
  m_about->raise();
  m_about->activateWindow();
}

void MainWindow::closeEvent(QCloseEvent* event) {
  if (const int active = m_runs->runningCount(); active > 0) {
    switch (askAboutActiveRuns(active)) {
      case CloseChoice::Cancel:
        m_closeWhenStopped = false;
        event->ignore();
        return;
      case CloseChoice::StopRuns:
        // Never block here: the window stays open (and responsive) until the workers have
        // checkpointed and exited, then closes itself.
        m_closeWhenStopped = true;
        m_runs->stopAll();
        statusBar()->showMessage(tr("Stopping: each run saves a checkpoint, then Flotilla closes…"));
        event->ignore();
        return;
      case CloseChoice::LeaveRunning:
        m_runs->detachAll();
        break;
    }
  }
  saveLayout();
  QMainWindow::closeEvent(event);
}

void MainWindow::restoreLayout() {
  QSettings settings = layoutSettings();
  const QByteArray geometry = settings.value(QLatin1String(kGeometryKey)).toByteArray();
  if (geometry.isEmpty() || !restoreGeometry(geometry)) {
    // First start: 1280x800, or 90% of a smaller screen.
    QSize size(1280, 800);
    if (const QScreen* screen = QGuiApplication::primaryScreen())
      size = size.boundedTo(screen->availableSize() * 0.9);
    resize(size);
  }
  restoreState(settings.value(QLatin1String(kStateKey)).toByteArray());
  showPage(qBound(0, settings.value(QLatin1String(kPageKey), 0).toInt(), PageCount - 1));
}

void MainWindow::saveLayout() const {
  QSettings settings = layoutSettings();
  settings.setValue(QLatin1String(kGeometryKey), saveGeometry());
  settings.setValue(QLatin1String(kStateKey), saveState());
  settings.setValue(QLatin1String(kPageKey), currentPage());
}

}  // namespace flotilla::ui
