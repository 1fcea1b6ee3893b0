// The app's side of the queue (issue 37) over a real store file:
// - the Queue page lists the store's entries with state, place, priority, deadline, max $ and why;
//   Move up / Move down / To top / Pause / Resume / Cancel each change the store; a refused action
//   (cancel a running entry) shows the store's own sentence; the selected entry's decision shows
//   every place weighed; "Add config…" queues a TOML with its places and limits, a bad place key is
//   refused with its sentence;
// - the wizard's "Add to queue" (beside Launch) adds an entry with the wizard's config and the
//   target's place key (nodes:a,b) and limits, launches nothing, and the window shows the Queue page
//   with the entry selected;
// - the Costs page's Scheduler savings show runs/savings.h's figures (hand-computed in
//   savings_fixture.h) and the same summary and rows as `flotilla costs --savings`;
// - the in-app scheduler, refused while `flotilla queue serve` holds the lease, shows the holder
//   (pid and host), takes the lease once it is released, and releases it when switched off.
#include <QAbstractButton>
#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QLineEdit>
#include <QProcess>
#include <QPushButton>
#include <QSettings>
#include <QSignalSpy>
#include <QSpinBox>
#include <QStandardPaths>
#include <QTabWidget>
#include <QTableView>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QtTest>

#include <unistd.h>

#include "../runs/savings_fixture.h"
#include "db/database.h"
#include "db/errors.h"
#include "db/nodes.h"
#include "db/queue.h"
#include "engine/config/config_io.h"
#include "runs/savings.h"
#include "ui/costs/costspage.h"
#include "ui/costs/savingsview.h"
#include "ui/main/mainwindow.h"
#include "ui/main/runnotifier.h"
#include "ui/queue/addqueuedialog.h"
#include "ui/queue/appscheduler.h"
#include "ui/queue/decisionview.h"
#include "ui/queue/queuemodel.h"
#include "ui/queue/queueoptions.h"
#include "ui/queue/queuepage.h"
#include "ui/runs/localruns.h"
#include "ui/runs/runspage.h"
#include "ui/runs/storeservice.h"
#include "ui/wizard/hardwarepage.h"
#include "ui/wizard/runwizard.h"

using namespace flotilla;
using namespace flotilla::ui;

namespace {

const char* const kTinyToml =
    "[run]\nname = \"tiny\"\nthreads = 1\n[model]\npreset = \"custom\"\nn_layer = 2\nn_head = 2\nn_embd = "
    "32\n"
    "vocab_size = 128\nmax_seq_len = 32\n[data]\nsynthetic_tokens = 30000\n[train]\nsteps = 40\nmicro_batch "
    "= 2\n"
    "seq_len = 16\n";

ProbeResult cpuMachine() {
  ProbeResult p;
  p.cpu_model = "Test CPU";
  p.physical_cores = 8;
  p.memory_total_bytes = 32ull << 30;
  return p;
}

std::vector<int64_t> order(const std::string& path) {
  const db::Database d(path);
  std::vector<int64_t> ids;
  for (const auto& e : db::list_queue(d)) ids.push_back(e.id);
  return ids;
}

db::QueueEntry entry(const std::string& path, int64_t id) {
  const db::Database d(path);
  return *db::find_queue_entry(d, id);
}

}  // namespace

class TestQueuePage : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase();
  void pageListsTheStoreAndEachActionChangesIt();
  void wizardAddToQueueQueuesTheConfigForItsPlace();
  void savingsOnTheCostsPageAreTheCommandsFigures();
  void inAppSchedulerShowsTheHolderAndTakesOver();
  void schedulerDecisionsAreNotified();

 private:
  QTemporaryDir m_tmp;
};

void TestQueuePage::initTestCase() {
  QVERIFY(m_tmp.isValid());
  QStandardPaths::setTestModeEnabled(true);
  QSettings::setPath(QSettings::NativeFormat, QSettings::UserScope, m_tmp.filePath(QStringLiteral("config")));
  QSettings(QStringLiteral("Flotilla"), QStringLiteral("Flotilla")).clear();
}

void TestQueuePage::pageListsTheStoreAndEachActionChangesIt() {
  const std::string path = m_tmp.filePath(QStringLiteral("page.db")).toStdString();
  int64_t a = 0, b = 0, c = 0, running = 0;
  const std::string decision =
      R"J({"time":1700000000,"chosen":"node:b","words":"on node b: $1.92 and 3 h 10 min to finish; local: $0 but 11 h, past the deadline",)J"
      R"J("places":[{"key":"node:b","label":"node b","fits":true,"why_not":"","layout":"dp=2","tokens_per_s":1234.5,)J"
      R"J("basis":"measured: 3 runs, median 1234 tok/s","wait_s":0,"seconds":11400,"usd":1.92,"usd_per_hour":0.61,)J"
      R"J("meets_deadline":true,"within_budget":true},{"key":"local","label":"this machine","fits":true,"why_not":"",)J"
      R"J("layout":"dp=1","tokens_per_s":300,"basis":"planner (uncalibrated)","wait_s":0,"seconds":39600,"usd":0,)J"
      R"J("usd_per_hour":0,"meets_deadline":false,"within_budget":true},{"key":"node:a","label":"node a","fits":false,)J"
      R"J("why_not":"needs 40 GiB per device, 24 GiB there","layout":"","tokens_per_s":0,"basis":"","wait_s":0,)J"
      R"J("seconds":0,"usd":null,"usd_per_hour":null,"meets_deadline":true,"within_budget":true}]})J";
  {
    db::Database d(path);
    auto add = [&](const std::string& name) {
      db::NewQueueEntry e;
      e.name = name;
      e.config_toml = kTinyToml;
      return db::add_queue_entry(d, e, 1000);
    };
    a = add("first");
    b = add("second");
    c = add("third");
    running = add("busy");
    QVERIFY(db::claim_queue_entry(d, running, "tok", "node:b", "on node b: $1.92 and 3 h 10 min to finish",
                                  decision, 1001));
    QVERIFY(db::mark_queue_entry_running(d, running, "tok", 1002));
  }
  StoreService store(QString::fromStdString(path), nullptr, 200);
  QueuePage page(&store);
  page.resize(1000, 700);
  page.show();
  QTRY_COMPARE_WITH_TIMEOUT(page.model()->rowCount(), 4, 10000);
  // The scheduler's order: the started one first (it was claimed first), then the waiting ones.
  const int busyRow = page.model()->rowOf(running);
  QVERIFY(busyRow >= 0);
  QCOMPARE(page.model()->index(busyRow, QueueModel::State).data().toString(), QStringLiteral("running"));
  QCOMPARE(page.model()->index(busyRow, QueueModel::Place).data().toString(), QStringLiteral("node:b"));
  QCOMPARE(page.model()->index(page.model()->rowOf(a), QueueModel::Place).data().toString(),
           QStringLiteral("any place"));
  QCOMPARE(
      page.schedulerText(),
      QStringLiteral("Scheduler: stopped: nobody serves this queue (run `flotilla queue serve`, or serve it "
                     "from the app)"));

  // The decision in full.
  page.selectEntry(running);
  QCOMPARE(page.selectedId(), running);
  QVERIFY2(page.decision()->wordsText().contains(QStringLiteral("on node b: $1.92 and 3 h 10 min to finish")),
           qPrintable(page.decision()->wordsText()));
  const QString places = page.decision()->placesText();
  QCOMPARE(page.decision()->places()->rowCount(), 3);
  QVERIFY2(places.contains(QStringLiteral("measured: 3 runs, median 1234 tok/s")), qPrintable(places));
  QVERIFY2(places.contains(QStringLiteral("$1.92")) && places.contains(QStringLiteral("3 h 10 min")),
           qPrintable(places));
  QVERIFY2(places.contains(QStringLiteral("11 h")) && places.contains(QStringLiteral("past the deadline")),
           qPrintable(places));
  QVERIFY2(places.contains(QStringLiteral("needs 40 GiB per device, 24 GiB there")) &&
               places.contains(QStringLiteral("unpriced")),
           qPrintable(places));

  // A refused action shows the store's own sentence.
  QString expected;
  {
    db::Database d(path);
    try {
      db::cancel_queue_entry(d, running, 2000);
    } catch (const db::DbError& e) {
      expected = QString::fromUtf8(e.what());
    }
  }
  QVERIFY(!expected.isEmpty());
  QVERIFY(page.button(QueueAction::Cancel)->isEnabled());
  QVERIFY(!page.button(QueueAction::Pause)->isEnabled());
  page.button(QueueAction::Cancel)->click();
  QCOMPARE(page.messageText(), expected);
  QCOMPARE(entry(path, running).state, db::EntryState::kRunning);

  // Move up, to top, move down: the store's order follows.
  auto waitingOrder = [&] {
    std::vector<int64_t> out;
    for (int64_t id : order(path))
      if (id != running) out.push_back(id);
    return out;
  };
  QCOMPARE(waitingOrder(), (std::vector<int64_t>{a, b, c}));
  page.selectEntry(c);
  page.button(QueueAction::MoveUp)->click();
  QCOMPARE(waitingOrder(), (std::vector<int64_t>{a, c, b}));
  QVERIFY(page.messageText().isEmpty());
  QTRY_COMPARE(page.selectedId(), c);
  page.button(QueueAction::ToTop)->click();
  QCOMPARE(waitingOrder(), (std::vector<int64_t>{c, a, b}));
  page.selectEntry(c);
  page.activateWindow();
  QVERIFY(QTest::qWaitForWindowActive(&page));
  page.table()->setFocus();
  QTest::keyClick(page.table(), Qt::Key_Down, Qt::ControlModifier);  // the shortcut
  QCOMPARE(waitingOrder(), (std::vector<int64_t>{a, c, b}));
  // The table follows within a poll.
  QTRY_VERIFY_WITH_TIMEOUT(
      page.model()->rowOf(a) < page.model()->rowOf(c) && page.model()->rowOf(c) < page.model()->rowOf(b),
      5000);

  // Pause, resume, cancel.
  page.selectEntry(b);
  QTRY_VERIFY(page.button(QueueAction::Pause)->isEnabled());
  page.button(QueueAction::Pause)->click();
  QCOMPARE(entry(path, b).state, db::EntryState::kPaused);
  QTRY_COMPARE_WITH_TIMEOUT(page.model()->index(page.model()->rowOf(b), QueueModel::State).data().toString(),
                            QStringLiteral("paused"), 5000);
  QTRY_VERIFY(page.button(QueueAction::Resume)->isEnabled());
  page.button(QueueAction::Resume)->click();
  QCOMPARE(entry(path, b).state, db::EntryState::kQueued);
  page.selectEntry(a);
  page.button(QueueAction::Cancel)->click();
  QCOMPARE(entry(path, a).state, db::EntryState::kCancelled);
  QVERIFY(page.messageText().isEmpty());

  // Add config…: the file, its places and limits; a bad place is refused with its sentence.
  const QString toml = m_tmp.filePath(QStringLiteral("queued.toml"));
  {
    QFile f(toml);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write(kTinyToml);
  }
  const double deadline = 1.9e9;
  page.answerAdd = [&](AddQueueDialog& dialog) {
    dialog.pathEdit()->setText(toml);
    dialog.placesEdit()->setText(QStringLiteral("local  node:b nodes:a,b cluster:hpc/gpu"));
    dialog.options()->setPriority(5);
    dialog.options()->setDeadline(deadline);
    dialog.options()->setMaxUsd(2.5);
    return true;
  };
  const qint64 added = page.addConfig();
  QVERIFY2(added > 0, qPrintable(page.messageText()));
  const db::QueueEntry e = entry(path, added);
  QCOMPARE(e.name, std::string("tiny"));
  QCOMPARE(e.config_toml, std::string(kTinyToml));
  QCOMPARE(e.config_path, QFileInfo(toml).absoluteFilePath().toStdString());
  QCOMPARE(e.places, (std::vector<std::string>{"local", "node:b", "nodes:a,b", "cluster:hpc/gpu"}));
  QCOMPARE(e.priority, int64_t(5));
  QVERIFY(e.deadline && *e.deadline == deadline);
  QVERIFY(e.max_usd && *e.max_usd == 2.5);
  QTRY_COMPARE_WITH_TIMEOUT(page.selectedId(), added, 5000);  // shown selected
  page.answerAdd = [&](AddQueueDialog& dialog) {
    dialog.pathEdit()->setText(toml);
    dialog.placesEdit()->setText(QStringLiteral("node:b;rm"));
    return true;
  };
  QCOMPARE(page.addConfig(), qint64(0));
  QVERIFY2(page.messageText().contains(QStringLiteral("'node:b;rm' is not a place")),
           qPrintable(page.messageText()));
}

void TestQueuePage::wizardAddToQueueQueuesTheConfigForItsPlace() {
  const QString dbPath = m_tmp.filePath(QStringLiteral("wizard.db"));
  {
    db::Database d(dbPath.toStdString());
    for (const char* name : {"a", "b"}) {
      db::SshNode n;
      n.name = name;
      n.host = "127.0.0.1";
      n.port = 1;
      n.usd_per_hour = 2.0;
      const int64_t id = db::add_ssh_node(d, n);
      db::set_node_gpus(d, id, "NVIDIA H100 80GB HBM3", 8);
    }
  }
  // The place keys of each kind of target.
  QCOMPARE(placeKeysForTarget(std::nullopt, {}), QStringList{QStringLiteral("local")});
  QCOMPARE(placeKeysForTarget(std::nullopt, {QStringLiteral("b")}), QStringList{QStringLiteral("node:b")});
  ClusterLaunch launch;
  launch.cluster = QStringLiteral("hpc");
  QCOMPARE(placeKeysForTarget(launch, {}), QStringList{QStringLiteral("cluster:hpc")});
  launch.partition = QStringLiteral("gpu");
  QCOMPARE(placeKeysForTarget(launch, {}), QStringList{QStringLiteral("cluster:hpc/gpu")});

  StoreService store(dbPath);
  LocalRuns runs(m_tmp.filePath(QStringLiteral("ws-wizard")));
  runs.setStore(&store);
  RunsPage page(&runs);
  page.resize(1000, 700);
  page.show();
  QSignalSpy queued(&page, &RunsPage::entryQueued);
  QTest::mouseClick(page.newRunButton(), Qt::LeftButton);
  RunWizard* w = page.wizard();
  QVERIFY(w);
  w->setMachine(cpuMachine());
  QTRY_COMPARE_WITH_TIMEOUT(w->draft()->targets().size(), 4, 10000);  // this machine, a, b, "a, b"
  QVERIFY(!w->button(QWizard::CustomButton1)->isVisible());           // beside Launch only
  w->next();
  w->next();
  w->hardwarePage()->findChild<QComboBox*>(QStringLiteral("target"))->setCurrentIndex(3);
  QCOMPARE(w->targetNodes(), (QStringList{QStringLiteral("a"), QStringLiteral("b")}));
  while (w->currentId() != RunWizard::Review) w->next();
  QTRY_VERIFY(w->currentPage()->isComplete());
  QAbstractButton* add = w->button(QWizard::CustomButton1);
  QVERIFY(add->isVisible());
  QCOMPARE(add->objectName(), QStringLiteral("addToQueueButton"));
  QCOMPARE(add->text(), QStringLiteral("Add to &queue"));
  w->queueOptions()->setPriority(3);
  w->queueOptions()->setMaxUsd(5.0);
  const std::string toml = config_to_toml(w->config());
  const std::string name = w->config().run.name;
  add->click();
  QCOMPARE(queued.count(), 1);
  QCOMPARE(runs.count(), 0);  // queued, not launched
  const int64_t id = queued.first().at(0).toLongLong();
  const db::QueueEntry e = entry(dbPath.toStdString(), id);
  QCOMPARE(e.places, (std::vector<std::string>{"nodes:a,b"}));
  QCOMPARE(e.config_toml, toml);
  QCOMPARE(e.name, name);
  QCOMPARE(e.priority, int64_t(3));
  QVERIFY(e.max_usd && *e.max_usd == 5.0);
  QVERIFY(!e.deadline);
  QCOMPARE(e.state, db::EntryState::kQueued);

  // The window shows the Queue page with the entry selected.
  const QString ws = m_tmp.filePath(QStringLiteral("ws-window"));
  QDir().mkpath(ws);
  WorkspaceInfo info;
  info.directory = ws;
  info.databasePath = dbPath;
  QSettings(QStringLiteral("Flotilla"), QStringLiteral("Flotilla"))
      .setValue(QStringLiteral("queue/serve"), false);
  MainWindow window(info);
  window.show();
  auto* runsPage = qobject_cast<RunsPage*>(window.page(MainWindow::Runs));
  auto* queuePage = qobject_cast<QueuePage*>(window.page(MainWindow::Queue));
  QVERIFY(runsPage && queuePage);
  emit runsPage->entryQueued(id);
  QCOMPARE(window.currentPage(), int(MainWindow::Queue));
  QTRY_COMPARE_WITH_TIMEOUT(queuePage->selectedId(), qint64(id), 10000);
  QSettings(QStringLiteral("Flotilla"), QStringLiteral("Flotilla")).remove(QStringLiteral("queue/serve"));
}

void TestQueuePage::savingsOnTheCostsPageAreTheCommandsFigures() {
  const QString dbPath = m_tmp.filePath(QStringLiteral("savings.db"));
  savings_fixture::build(dbPath.toStdString(), db::now_seconds());
  runs::Savings s;
  {
    const db::Database d(dbPath.toStdString());
    s = runs::scheduler_savings(d);
  }
  QVERIFY(std::abs(s.saved_vs_most_expensive - savings_fixture::kSavedVsMostExpensive) < 1e-9);
  QVERIFY(std::abs(s.saved_vs_first_free - savings_fixture::kSavedVsFirstFree) < 1e-9);
  QVERIFY(std::abs(s.idle_usd - savings_fixture::kIdle) < 1e-9);

  CostsPage page(dbPath);
  page.resize(1200, 800);
  QSignalSpy loaded(page.savingsView(), &SavingsView::loaded);
  page.reload();
  QVERIFY(loaded.wait(10000));
  const QString summary = page.savingsView()->summaryText();
  QCOMPARE(summary, QString::fromStdString(runs::savings_summary(s)));
  QVERIFY2(summary.contains(QStringLiteral("$5.50 against the most expensive place")), qPrintable(summary));
  QVERIFY2(summary.contains(QStringLiteral("idle machines cost $3.00")), qPrintable(summary));
  QCOMPARE(page.savingsView()->table()->rowCount(), 2);
  // For the docs: the tab as it reads (build/screenshots/costs-savings.png).
  if (auto* tabs = page.findChild<QTabWidget*>(QStringLiteral("costsTabs"))) {
    tabs->setCurrentWidget(page.savingsView());
    page.show();
    QVERIFY(QTest::qWaitForWindowExposed(&page));
    QTRY_VERIFY_WITH_TIMEOUT(!page.busy(), 10000);
    QVERIFY(page.grab().save(QStringLiteral(FLOTILLA_SCREENSHOT_DIR "/costs-savings.png")));
  }

  // `flotilla costs --savings` prints the same summary and the same rows.
  QProcess cli;
  QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
  env.remove(QStringLiteral("DISPLAY"));
  env.remove(QStringLiteral("WAYLAND_DISPLAY"));
  env.remove(QStringLiteral("QT_QPA_PLATFORM"));
  cli.setProcessEnvironment(env);
  cli.start(QStringLiteral(FLOTILLA_CLI_PATH),
            {QStringLiteral("--db"), dbPath, QStringLiteral("costs"), QStringLiteral("--savings")});
  QVERIFY(cli.waitForFinished(30000));
  const QString out = QString::fromUtf8(cli.readAllStandardOutput());
  QCOMPARE(cli.exitCode(), 0);
  QVERIFY2(out.contains(summary), qPrintable(out));
  for (int r = 0; r < page.savingsView()->table()->rowCount(); ++r)
    QVERIFY2(out.contains(page.savingsView()->rowText(r) + QLatin1Char('\n')),
             qPrintable(page.savingsView()->rowText(r) + QStringLiteral("\nnot in\n") + out));
}

void TestQueuePage::inAppSchedulerShowsTheHolderAndTakesOver() {
  const QString dbPath = m_tmp.filePath(QStringLiteral("lease.db"));
  const std::string path = dbPath.toStdString();
  {
    // `flotilla queue serve` on another host holds the lease, its heartbeat fresh.
    db::Database d(path);
    db::SchedulerLease other;
    other.token = "other-token";
    other.pid = 4242;
    other.host = "host-a";
    other.origin = "flotilla queue serve";
    other.started_at = other.heartbeat = db::now_seconds();
    QVERIFY(db::acquire_scheduler_lease(d, other, 3600, [](const db::SchedulerLease&) {
              return false;
            }).acquired);
  }
  StoreService store(dbPath, nullptr, 200);
  LocalRuns runs(m_tmp.filePath(QStringLiteral("ws-lease")));
  runs.setStore(&store);
  AppScheduler scheduler(dbPath, runsSchedulerEngine(runs.serviceOptions()));
  scheduler.setIntervals(100, 200);
  QueuePage page(&store);
  page.setScheduler(&scheduler);
  page.resize(1000, 700);
  page.show();
  QVERIFY(page.serveToggle()->isEnabled());
  page.serveToggle()->setChecked(true);  // as the window does at start-up
  QVERIFY(scheduler.isEnabled());
  QTRY_COMPARE_WITH_TIMEOUT(scheduler.state(), AppScheduler::State::Elsewhere, 10000);
  QCOMPARE(scheduler.statusText(), QStringLiteral("served by flotilla queue serve (pid 4242 on host-a)"));
  QTRY_COMPARE_WITH_TIMEOUT(page.schedulerText(),
                            QStringLiteral("Scheduler: served by flotilla queue serve (pid 4242 on host-a)"),
                            5000);

  // The other scheduler stops: this window takes the lease at its next try.
  {
    db::Database d(path);
    db::release_scheduler_lease(d, "other-token");
  }
  QTRY_COMPARE_WITH_TIMEOUT(scheduler.state(), AppScheduler::State::Serving, 10000);
  QVERIFY2(page.schedulerText().startsWith(QStringLiteral("Scheduler: this window (since ")),
           qPrintable(page.schedulerText()));
  {
    const db::Database d(path);
    const auto lease = db::scheduler_lease(d);
    QVERIFY(lease);
    QCOMPARE(lease->origin, std::string("flotilla app"));
    QCOMPARE(lease->pid, int64_t(::getpid()));
  }
  // Switched off: the lease is released (the next scheduler takes it at once).
  page.serveToggle()->setChecked(false);
  QCOMPARE(scheduler.state(), AppScheduler::State::Stopped);
  {
    const db::Database d(path);
    QVERIFY(!db::scheduler_lease(d));
  }
}

// An engine that holds a lease of its own and moves one entry per tick: started, back in the queue
// (its place lost it), started again, failed for good: what the scheduler's decisions look like in
// the store.
class ScriptedEngine : public SchedulerEngine {
 public:
  ScriptedEngine(std::string path, int64_t entry) : m_path(std::move(path)), m_entry(entry) {}
  void acquire() override {}
  bool tick(std::vector<std::string>* lines) override {
    db::Database d(m_path);
    const double now = db::now_seconds();
    switch (m_step++) {
      case 0:
        db::claim_queue_entry(d, m_entry, "scripted", "node:b", "on node b: $1.92 and 3 h 10 min to finish",
                              "{}", now);
        break;
      case 1:
        db::requeue_queue_entry(d, m_entry, "node b was preempted at step 40: back at the head of the queue",
                                0.1, 40, now);
        break;
      case 2:
        db::claim_queue_entry(d, m_entry, "scripted", "local", "on this machine: $0 and 11 h to finish", "{}",
                              now);
        break;
      case 3:
        db::finish_queue_entry(d, m_entry, db::EntryState::kFailed, "failed 3 times: out of memory", now);
        break;
      default:
        break;
    }
    lines->push_back("tick " + std::to_string(m_step));
    return true;
  }

 private:
  std::string m_path;
  int64_t m_entry;
  int m_step = 0;
};

void TestQueuePage::schedulerDecisionsAreNotified() {
  const QString dbPath = m_tmp.filePath(QStringLiteral("notify.db"));
  int64_t id = 0;
  {
    db::Database d(dbPath.toStdString());
    db::NewQueueEntry e;
    e.name = "sweep-1";
    e.config_toml = kTinyToml;
    id = db::add_queue_entry(d, e, db::now_seconds());
  }
  LocalRuns runs(m_tmp.filePath(QStringLiteral("ws-notify")));
  RunNotifier notifier(&runs);
  notifier.setDesktopEnabled(false);
  QSignalSpy told(&notifier, &RunNotifier::notified);
  AppScheduler scheduler(dbPath, [&] { return std::make_unique<ScriptedEngine>(dbPath.toStdString(), id); });
  scheduler.setIntervals(50, 50);
  connect(&scheduler, &AppScheduler::decided, &notifier,
          [&](RunNotifier::Event event, const QString& entry, const QString& text) {
            notifier.notifyQueue(event, entry, text);
          });
  scheduler.setEnabled(true);
  QTRY_COMPARE_WITH_TIMEOUT(told.count(), 4, 10000);
  scheduler.setEnabled(false);
  QCOMPARE(told.at(0).at(0).value<RunNotifier::Event>(), RunNotifier::Event::QueueStarted);
  QCOMPARE(told.at(0).at(1).toString(), QStringLiteral("Queue: sweep-1 started"));
  QCOMPARE(told.at(0).at(2).toString(), QStringLiteral("on node b: $1.92 and 3 h 10 min to finish"));
  QCOMPARE(told.at(1).at(0).value<RunNotifier::Event>(), RunNotifier::Event::QueueRequeued);
  QCOMPARE(told.at(1).at(1).toString(), QStringLiteral("Queue: sweep-1 back in the queue"));
  QVERIFY(told.at(1).at(2).toString().contains(QStringLiteral("preempted at step 40")));
  QCOMPARE(told.at(2).at(0).value<RunNotifier::Event>(), RunNotifier::Event::QueueStarted);
  QCOMPARE(told.at(3).at(0).value<RunNotifier::Event>(), RunNotifier::Event::QueueFailed);
  QCOMPARE(told.at(3).at(2).toString(), QStringLiteral("failed 3 times: out of memory"));
}

QTEST_MAIN(TestQueuePage)
#include "test_queuepage.moc"
