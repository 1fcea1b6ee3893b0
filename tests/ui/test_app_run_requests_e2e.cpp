// Stop, Checkpoint now and Kill asked of a run this window did not start (issue 34 #5, #15, #16),
// with the real worker and the run store:
//  1. A run started in a window, left running, re-attached by a new window and killed there ends
//     "stopped (killed on request)" on Live, in the Runs table and in the store (it read "failed
//     (lost: the worker ended without a summary record)": a re-attached worker is not our child, so
//     nothing told the watcher that the end it saw was the kill it asked for).
//  2. A run started as `flotilla run` does (the runs service with origin "flotilla run", watched on
//     its own thread, as the CLI's main thread watches it) is shown by the window without being
//     watched there; Live's Stop, Checkpoint now and Kill are enabled (the service can signal its
//     worker: pid and start time checked) and reach it: a checkpoint is written, Stop ends it
//     "stopped (on request)" with the worker's summary saying so (not "exit preempted"), and a Kill
//     of another such run is recorded by the CLI's watcher as "stopped (killed on request)".
#include <QLabel>
#include <QPushButton>
#include <QSettings>
#include <QSignalSpy>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QtTest>

#include <signal.h>

#include <atomic>
#include <thread>

#include "db/database.h"
#include "db/run_records.h"
#include "db/run_store.h"
#include "db/workspace.h"
#include "engine/train/metrics_reader.h"
#include "runs/service.h"
#include "ui/live/livepage.h"
#include "ui/main/mainwindow.h"
#include "ui/runs/localruns.h"
#include "ui/runs/runspage.h"
#include "ui/runs/servicerun.h"
#include "ui/runs/storerunsmodel.h"
#include "ui/runs/storerunsview.h"
#include "ui/wizard/runwizard.h"

using flotilla::ui::MainWindow;
using flotilla::ui::ServiceRun;
namespace db = flotilla::db;
namespace runs = flotilla::runs;

namespace {

// A model that steps in milliseconds, paced (FLOTILLA_TEST_STEP_SLEEP_MS) to outlast the test.
flotilla::RunConfig tiny(flotilla::RunConfig c) {
  c.model.preset = "custom";
  c.model.n_layer = 1;
  c.model.n_head = 2;
  c.model.n_embd = 32;
  c.model.vocab_size = 128;
  c.model.max_seq_len = 32;
  c.data.source = "synthetic";
  c.data.synthetic_tokens = 30000;
  c.train.steps = 20000;
  c.train.micro_batch = 2;
  c.train.seq_len = 16;
  c.train.global_batch_tokens = 0;
  c.train.log_every = 1;
  c.optim.warmup_steps = 5;
  c.parallel = {};
  c.run.threads = 1;
  c.run.device = "cpu";
  c.checkpoint.every = 0;
  c.eval.every = 0;
  c.budget = {};
  return c;
}

db::Run storedRun(const QString& path, qint64 id) {
  const db::Database d(path.toStdString());
  return db::get_run(d, id);
}

void killLeftover(const QString& runDir) {
  if (const qint64 pid = ServiceRun::liveWorkerPid(runDir); pid > 0) ::kill(static_cast<pid_t>(pid), SIGKILL);
}

QString tableStatus(MainWindow* w, qint64 id) {
  auto* runsPage = qobject_cast<flotilla::ui::RunsPage*>(w->page(MainWindow::Runs));
  flotilla::ui::StoreRunsModel* model = runsPage->storeView()->model();
  const int row = model->rowOfId(id);
  if (row < 0) return {};
  return model->index(row, flotilla::ui::StoreRunsModel::Status).data().toString();
}

// `flotilla run CONFIG`: the runs service started on this thread, its watch on a thread of its own.
struct CliRun {
  std::unique_ptr<runs::RunService> service;
  std::unique_ptr<runs::ActiveRun> active;
  std::thread watcher;
  std::atomic<bool> done{false};
  runs::WatchResult result;
  std::atomic<int> checkpoints{0};
  std::atomic<qint64> lastStep{0};

  CliRun(const QString& workspace, const QString& database, const std::string& name) {
    runs::ServiceOptions o;
    o.ssh.database_path = database.toStdString();
    o.runs_root = QDir(workspace).filePath(QStringLiteral("runs")).toStdString();
    o.worker_path = FLOTILLA_WORKER_PATH;
    o.origin = "flotilla run";
    service = std::make_unique<runs::RunService>(o);
    runs::RunRequest r;
    r.config = tiny(flotilla::RunConfig{});
    r.config.run.name = name;
    r.name = name;
    active = service->start(r);
    watcher = std::thread([this] {
      runs::WatchHooks hooks;
      hooks.on_record = [this](const flotilla::MetricsRecord& rec) {
        if (rec.type == flotilla::MetricsRecordType::kCheckpoint) ++checkpoints;
        if (rec.type == flotilla::MetricsRecordType::kStep) lastStep = rec.step().step;
      };
      result = active->watch(hooks);
      done = true;
    });
  }
  ~CliRun() {
    if (watcher.joinable()) {
      if (!done) killLeftover(QString::fromStdString(active->folder_text()));
      watcher.join();
    }
  }
  qint64 id() const { return active->id(); }
};

}  // namespace

class TestAppRunRequests : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase();
  void killAfterReattachIsKilledOnRequest();
  void aCliRunIsCheckpointedStoppedAndKilledFromTheApp();

 private:
  std::unique_ptr<MainWindow> makeWindow() {
    auto w = std::make_unique<MainWindow>(m_workspace);
    w->localRuns()->setWorkerPath(QStringLiteral(FLOTILLA_WORKER_PATH));
    w->resize(1280, 800);
    w->show();
    return w;
  }

  QTemporaryDir m_tmp{QStringLiteral(FLOTILLA_TEST_TMP "/app_run_requests-XXXXXX")};
  flotilla::ui::WorkspaceInfo m_workspace;
};

void TestAppRunRequests::initTestCase() {
  QVERIFY(m_tmp.isValid());
  QStandardPaths::setTestModeEnabled(true);
  QSettings::setPath(QSettings::NativeFormat, QSettings::UserScope, m_tmp.filePath(QStringLiteral("config")));
  const std::string dir = m_tmp.filePath(QStringLiteral("workspace")).toStdString();
  db::ensure_workspace_dir(dir);
  const db::Database d(db::workspace_database_path(dir));
  m_workspace.directory = QString::fromStdString(dir);
  m_workspace.databasePath = QString::fromStdString(d.path());
  qputenv("FLOTILLA_TEST_STEP_SLEEP_MS", "5");
}

void TestAppRunRequests::killAfterReattachIsKilledOnRequest() {
  qint64 id = 0;
  QString dir;
  {
    auto w = makeWindow();
    auto* runsPage = qobject_cast<flotilla::ui::RunsPage*>(w->page(MainWindow::Runs));
    flotilla::ui::RunWizard* wizard = runsPage->openNewRunWizard();
    QVERIFY(wizard);
    wizard->setConfig(tiny(wizard->config()));
    wizard->accept();
    ServiceRun* run = qobject_cast<flotilla::ui::LivePage*>(w->page(MainWindow::Live))->run();
    QVERIFY(run);
    id = run->storeId();
    dir = run->runDir();
    QTRY_VERIFY_WITH_TIMEOUT(run->lastStep() >= 5 || !run->isActive(), 60000);
    QVERIFY2(run->isActive(), qPrintable(run->stateText()));
    w->setCloseQuestion([](int) { return MainWindow::CloseChoice::LeaveRunning; });
    QVERIFY(w->close());
  }
  auto cleanup = qScopeGuard([&] { killLeftover(dir); });
  QVERIFY(ServiceRun::liveWorkerPid(dir) > 0);

  auto w = makeWindow();
  QCOMPARE(w->reattachedRuns(), 1);
  ServiceRun* run = w->localRuns()->runForStoreId(id);
  QVERIFY(run && run->isAttached() && run->isActive());
  QSignalSpy finished(run, &ServiceRun::finished);
  run->kill();
  QVERIFY(finished.count() || finished.wait(30000));
  QCOMPARE(run->state(), ServiceRun::State::Killed);
  QCOMPARE(run->stateText(), QStringLiteral("stopped (killed on request)"));
  const db::Run stored = storedRun(m_workspace.databasePath, id);
  QCOMPARE(stored.status, db::RunStatus::kStopped);
  QCOMPARE(stored.status_note, std::string("killed on request"));
  QTRY_COMPARE(tableStatus(w.get(), id), QStringLiteral("stopped (killed on request)"));
  QTRY_VERIFY(ServiceRun::liveWorkerPid(dir) == 0);
}

void TestAppRunRequests::aCliRunIsCheckpointedStoppedAndKilledFromTheApp() {
  auto w = makeWindow();
  auto* live = qobject_cast<flotilla::ui::LivePage*>(w->page(MainWindow::Live));
  const QString db = m_workspace.databasePath;

  {
    CliRun cli(m_workspace.directory, db, "cli-stop");
    QTRY_VERIFY_WITH_TIMEOUT(cli.lastStep >= 5 || cli.done, 60000);
    QVERIFY(!cli.done);
    // The window shows it without watching it (a terminal watches it).
    ServiceRun* run = w->localRuns()->openStored(cli.id());
    QVERIFY(run);
    QVERIFY(!run->isWatched());
    live->setRun(run);
    QTRY_VERIFY(live->findChild<QPushButton*>(QStringLiteral("stopButton"))->isEnabled());
    QVERIFY(live->findChild<QPushButton*>(QStringLiteral("killButton"))->isEnabled());
    QVERIFY(run->canCheckpoint());
    auto* stopAction = w->findChild<QAction*>(QStringLiteral("stopRunAction"));
    QTRY_VERIFY(stopAction->isEnabled());

    // Checkpoint now: the worker writes one and goes on.
    run->checkpointNow();
    QTRY_VERIFY_WITH_TIMEOUT(cli.checkpoints >= 1 || cli.done, 30000);
    QVERIFY(!cli.done);

    // Stop: the CLI's watcher records the end it was asked for elsewhere.
    run->stop();
    QTRY_VERIFY_WITH_TIMEOUT(cli.done, 60000);
    QCOMPARE(cli.result.exit_code, 10);
    const db::Run stored = storedRun(db, cli.id());
    QCOMPARE(stored.status, db::RunStatus::kStopped);
    QCOMPARE(stored.status_note, std::string("on request"));
    flotilla::MetricsRecord summary;
    QCOMPARE(flotilla::parse_metrics_line(stored.summary_json, summary), flotilla::ParseStatus::kRecord);
    QCOMPARE(summary.summary().exit, std::string("stopped"));
    QCOMPARE(summary.summary().stop_reason, std::string("stopped on request (flotilla app)"));
    const db::Database d(db.toStdString());
    const auto cps = db::list_checkpoints(d, cli.id());
    QVERIFY(cps.size() >= 2);
    QCOMPARE(cps.front().reason, std::string("request"));
    QCOMPARE(cps.back().reason, std::string("stop"));
  }
  {
    CliRun cli(m_workspace.directory, db, "cli-kill");
    QTRY_VERIFY_WITH_TIMEOUT(cli.lastStep >= 5 || cli.done, 60000);
    QVERIFY(!cli.done);
    ServiceRun* run = w->localRuns()->openStored(cli.id());
    QVERIFY(run && !run->isWatched());
    QVERIFY(run->canKill());
    run->kill();
    QTRY_VERIFY_WITH_TIMEOUT(cli.done, 30000);
    const db::Run stored = storedRun(db, cli.id());
    QCOMPARE(stored.status, db::RunStatus::kStopped);
    QCOMPARE(stored.status_note, std::string("killed on request"));
    QTRY_COMPARE(tableStatus(w.get(), cli.id()), QStringLiteral("stopped (killed on request)"));
    // Ended: nothing more to ask.
    QVERIFY(!run->canStop() && !run->canKill());
  }
}

QTEST_MAIN(TestAppRunRequests)
#include "test_app_run_requests_e2e.moc"
