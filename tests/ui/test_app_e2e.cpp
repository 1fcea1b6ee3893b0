// The app end to end with the real worker and the run store (issue 6 items 1, 7):
//  1. MainWindow on a temporary workspace; the New Run wizard opened from the Runs page with its
//     demo template, shrunk through the wizard's own setConfig to a model that steps in
//     milliseconds; Finish launches it; the Live page draws steps with falling loss; Stop
//     (SIGTERM) ends it gracefully; the store then says stopped (or completed), holds a loss row
//     for every step the worker wrote, exactly once, and the checkpoint is on disk and recorded.
//     Every run goes through `flotilla-worker launch` (one rank too): Checkpoint now (SIGUSR1)
//     reaches the rank through it, and Kill ends the rank with the launcher (no orphan).
//  2. Restart: a run started, the window closed with "Leave it running", a new MainWindow on
//     the same workspace re-attaches (the worker is still alive), the run is stopped from there,
//     and the store ends with every step exactly once (ingest resumed at the committed offset).
#include <QDir>
#include <QHeaderView>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLabel>
#include <QLocale>
#include <QSettings>
#include <QSignalSpy>
#include <QStandardPaths>
#include <QStatusBar>
#include <QTableView>
#include <QFileInfo>
#include <QTemporaryDir>
#include <QtTest>

#include <signal.h>

#include <optional>
#include <set>

#include "db/database.h"
#include "db/queries.h"
#include "db/run_records.h"
#include "db/run_store.h"
#include "db/sql.h"
#include "db/workspace.h"
#include "engine/config/config_validate.h"
#include "engine/data/loader.h"
#include "engine/tokenizer/bpe.h"
#include "engine/train/metrics_reader.h"
#include "ui/live/livepage.h"
#include "ui/main/mainwindow.h"
#include "ui/plot/seriesstore.h"
#include "ui/runs/servicerun.h"
#include "ui/runs/localruns.h"
#include "ui/runs/runspage.h"
#include "ui/runs/storerunsmodel.h"
#include "ui/runs/storerunsview.h"
#include "ui/wizard/configdraft.h"
#include "ui/wizard/runwizard.h"

using flotilla::ui::ServiceRun;
using flotilla::ui::MainWindow;
namespace db = flotilla::db;

namespace {

// The demo template made tiny: ~ms per step on one core, long enough to be stopped.
flotilla::RunConfig shrink(flotilla::RunConfig c) {
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
  c.optim.lr = 3e-3;
  c.optim.warmup_steps = 5;
  c.parallel = {};
  c.run.threads = 1;
  c.run.device = "cpu";
  c.checkpoint.every = 0;
  c.eval.every = 0;
  c.budget = {};
  return c;
}

// Steps (rank 0) in a run's metrics.jsonl, and whether any appears twice.
std::set<qint64> fileSteps(const QString& runDir, int* duplicates) {
  std::set<qint64> steps;
  *duplicates = 0;
  QFile f(runDir + QStringLiteral("/metrics.jsonl"));
  if (!f.open(QIODevice::ReadOnly)) return steps;
  while (!f.atEnd()) {
    const QJsonObject r = QJsonDocument::fromJson(f.readLine()).object();
    if (r.value(QLatin1String("type")).toString() != QLatin1String("step")) continue;
    if (!steps.insert(r.value(QLatin1String("step")).toInteger()).second) ++*duplicates;
  }
  return steps;
}

db::Run storedRun(const QString& path, qint64 id) {
  const db::Database d(path.toStdString());
  return db::get_run(d, id);
}

std::vector<db::Point> lossRows(const QString& path, qint64 id) {
  const db::Database d(path.toStdString());
  return db::metric_points(d, id, "loss");
}

// Processes whose parent is `pid` (the ranks of a `launch`), from /proc/*/stat.
QList<qint64> childPids(qint64 pid) {
  QList<qint64> out;
  for (const QString& e : QDir(QStringLiteral("/proc")).entryList(QDir::Dirs | QDir::NoDotAndDotDot)) {
    QFile stat(QStringLiteral("/proc/%1/stat").arg(e));
    if (!stat.open(QIODevice::ReadOnly)) continue;
    const QByteArray text = stat.readAll();
    const QList<QByteArray> f = text.mid(text.lastIndexOf(')') + 2).split(' ');
    if (f.size() > 1 && f[1].toLongLong() == pid) out << e.toLongLong();
  }
  return out;
}

// Gone, or a zombie nobody reaped yet (a container's pid 1 may not).
bool processGone(qint64 pid) {
  QFile stat(QStringLiteral("/proc/%1/stat").arg(pid));
  if (!stat.open(QIODevice::ReadOnly)) return true;
  const QByteArray text = stat.readAll();
  const QByteArray state = text.mid(text.lastIndexOf(')') + 2, 1);
  return state == "Z" || state == "X";
}

void killLeftover(const QString& runDir) {
  if (const qint64 pid = ServiceRun::liveWorkerPid(runDir); pid > 0) {
    const QList<qint64> ranks = childPids(pid);
    ::kill(static_cast<pid_t>(pid), SIGKILL);
    for (qint64 r : ranks) ::kill(-static_cast<pid_t>(r), SIGKILL);
  }
}

// What the Runs table's Status column shows for stored run `id` ("" when it has no row yet).
QString tableStatus(MainWindow* w, qint64 id) {
  auto* runsPage = qobject_cast<flotilla::ui::RunsPage*>(w->page(MainWindow::Runs));
  flotilla::ui::StoreRunsModel* model = runsPage->storeView()->model();
  const int row = model->rowOfId(id);
  if (row < 0) return {};
  return model->index(row, flotilla::ui::StoreRunsModel::Status).data().toString();
}

QString liveState(MainWindow* w) {
  return w->page(MainWindow::Live)->findChild<QLabel*>(QStringLiteral("liveRunState"))->toolTip();
}

QString statusBarRunning(MainWindow* w) {
  return w->findChild<QLabel*>(QStringLiteral("statusRunning"))->text();
}

}  // namespace

class TestAppE2e : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase();
  void wizardRunIsStoredAndStopsWithACheckpoint();
  void leftRunningRunIsReattachedAfterRestart();
  void resumeForkDuplicateAndDeleteFromTheRunsView();
  void aRunThatFailsAtPreflightSaysWhyAtTheTopOfLive();
  void samplesAreDecodedWithTheRunsTokenizerOnLive();

 private:
  std::unique_ptr<MainWindow> makeWindow();
  ServiceRun* launchFromWizard(MainWindow* w);

  QTemporaryDir m_tmp{QStringLiteral(FLOTILLA_TEST_TMP "/app_e2e-XXXXXX")};
  flotilla::ui::WorkspaceInfo m_workspace;
};

void TestAppE2e::initTestCase() {
  QVERIFY(m_tmp.isValid());
  QStandardPaths::setTestModeEnabled(true);
  QSettings::setPath(QSettings::NativeFormat, QSettings::UserScope, m_tmp.filePath(QStringLiteral("config")));
  const std::string dir = m_tmp.filePath(QStringLiteral("workspace")).toStdString();
  db::ensure_workspace_dir(dir);
  const db::Database d(db::workspace_database_path(dir));
  m_workspace.directory = QString::fromStdString(dir);
  m_workspace.databasePath = QString::fromStdString(d.path());
}

std::unique_ptr<MainWindow> TestAppE2e::makeWindow() {
  auto w = std::make_unique<MainWindow>(m_workspace);
  w->localRuns()->setWorkerPath(QStringLiteral(FLOTILLA_WORKER_PATH));
  w->resize(1280, 800);
  w->show();
  return w;
}

ServiceRun* TestAppE2e::launchFromWizard(MainWindow* w) {
  auto* runsPage = qobject_cast<flotilla::ui::RunsPage*>(w->page(MainWindow::Runs));
  flotilla::ui::RunWizard* wizard = runsPage->openNewRunWizard();
  if (!wizard) return nullptr;
  wizard->setConfig(shrink(wizard->config()));
  auto* live = qobject_cast<flotilla::ui::LivePage*>(w->page(MainWindow::Live));
  wizard->accept();  // Finish: RunsPage launches config() and opens the run live
  return live->run();
}

void TestAppE2e::wizardRunIsStoredAndStopsWithACheckpoint() {
  auto w = makeWindow();
  ServiceRun* run = launchFromWizard(w.get());
  QVERIFY(run);
  QCOMPARE(w->currentPage(), int(MainWindow::Live));
  QVERIFY2(run->state() == ServiceRun::State::Running, qPrintable(run->stateText()));
  QVERIFY(run->storeId() > 0);
  const QString dir = run->runDir();
  auto cleanup = qScopeGuard([&] { killLeftover(dir); });

  auto* live = qobject_cast<flotilla::ui::LivePage*>(w->page(MainWindow::Live));
  const QString loss = QLatin1String(flotilla::ui::kSeriesLoss);
  QTRY_VERIFY_WITH_TIMEOUT(live->series()->size(loss) >= 30 || !run->isActive(), 60000);
  QVERIFY2(run->isActive(), qPrintable(run->stateText()));
  const QVector<double>& y = live->series()->series(loss).y;
  QVERIFY2(y.last() < y.first(), qPrintable(QStringLiteral("loss %1 -> %2").arg(y.first()).arg(y.last())));
  QCOMPARE(storedRun(m_workspace.databasePath, run->storeId()).status, db::RunStatus::kRunning);
  // One rank, under launch like any other run: its one rank is the launcher's child.
  QVERIFY2(
      run->commandLine().contains(QStringLiteral(" launch --nproc-per-node 1 --master-port 0 --init-timeout "
                                                 "3600 --max-restarts 2 -- train --config ")),
      qPrintable(run->commandLine()));
  QCOMPARE(childPids(run->pid()).size(), 1);

  // Checkpoint now: SIGUSR1 to the launcher reaches the rank, which saves one and goes on.
  QSignalSpy saved(run, &ServiceRun::checkpointReceived);
  run->checkpointNow();
  QTRY_VERIFY_WITH_TIMEOUT(saved.count() >= 1 || !run->isActive(), 30000);
  QVERIFY2(run->isActive(), qPrintable(run->stateText()));

  QSignalSpy finished(run, &ServiceRun::finished);
  run->stop();
  QVERIFY(finished.count() || finished.wait(60000));
  QCOMPARE(run->exitCode(), 10);
  // The store: final status after the ingestor drained the file; every step exactly once.
  QTRY_COMPARE_WITH_TIMEOUT(storedRun(m_workspace.databasePath, run->storeId()).status,
                            db::RunStatus::kStopped, 10000);
  // Issue 18 item 3: Stop reads "stopped (on request)" alike on Live, in Runs and in the CLI's
  // words (runs::status_text), never "exit 10: preempted".
  QCOMPARE(run->stateText(), QStringLiteral("stopped (on request)"));
  QTRY_COMPARE(liveState(w.get()), QStringLiteral("stopped (on request)"));
  QTRY_COMPARE(tableStatus(w.get(), run->storeId()), QStringLiteral("stopped (on request)"));
  QCOMPARE(statusBarRunning(w.get()), QStringLiteral("0 runs running"));
  // Issue 18 item 4: the ended run's speed is the run's (its summary's mean), on Live and in
  // Runs alike, not the last step's; and the Runs header's arrow sits on the order the rows have.
  {
    const db::Run stored = storedRun(m_workspace.databasePath, run->storeId());
    flotilla::MetricsRecord summary;
    QCOMPARE(flotilla::parse_metrics_line(stored.summary_json, summary), flotilla::ParseStatus::kRecord);
    const QString mean = QLocale().toString(summary.summary().mean_tokens_per_s, 'f', 0);
    QVERIFY(summary.summary().mean_tokens_per_s > 0);
    QCOMPARE(run->runTokensPerSec(), summary.summary().mean_tokens_per_s);
    live->refresh();
    QVERIFY2(live->statusText().contains(mean + QStringLiteral(" tokens/s (run mean)")),
             qPrintable(live->statusText()));
    auto* runsPage = qobject_cast<flotilla::ui::RunsPage*>(w->page(MainWindow::Runs));
    flotilla::ui::StoreRunsModel* model = runsPage->storeView()->model();
    QTRY_COMPARE(model->index(model->rowOfId(run->storeId()), flotilla::ui::StoreRunsModel::TokensPerSec)
                     .data()
                     .toString(),
                 mean);
    QHeaderView* header = runsPage->storeView()->table()->horizontalHeader();
    QCOMPARE(header->sortIndicatorSection(), int(flotilla::ui::StoreRunsModel::Created));
    QCOMPARE(header->sortIndicatorOrder(), Qt::DescendingOrder);
  }
  int duplicates = 0;
  const std::set<qint64> steps = fileSteps(dir, &duplicates);
  QCOMPARE(duplicates, 0);
  const auto rows = lossRows(m_workspace.databasePath, run->storeId());
  QCOMPARE(rows.size(), steps.size());
  QCOMPARE(rows.front().step, qint64{1});
  QCOMPARE(rows.back().step, static_cast<int64_t>(steps.size()));  // 1..N, no gap
  QVERIFY(rows.size() >= 30);

  // The checkpoint: on disk with its manifest, and recorded in the store.
  const db::Database d(m_workspace.databasePath.toStdString());
  const auto checkpoints = db::list_checkpoints(d, run->storeId());
  QVERIFY(!checkpoints.empty());
  QCOMPARE(checkpoints.back().reason, std::string("stop"));
  QVERIFY(QFileInfo::exists(QString::fromStdString(checkpoints.back().dir) + QStringLiteral("/MANIFEST")));
  QCOMPARE(checkpoints.back().step, rows.back().step);
  qInfo("stopped at step %lld: %zu loss rows stored, checkpoint %s", static_cast<long long>(rows.back().step),
        rows.size(), checkpoints.back().dir.c_str());
}

void TestAppE2e::leftRunningRunIsReattachedAfterRestart() {
  qint64 id = 0;
  QString dir;
  {
    auto w = makeWindow();
    ServiceRun* run = launchFromWizard(w.get());
    QVERIFY(run);
    id = run->storeId();
    dir = run->runDir();
    QTRY_VERIFY_WITH_TIMEOUT(run->lastStep() >= 10 || !run->isActive(), 60000);
    QVERIFY(run->isActive());
    w->setCloseQuestion([](int) { return MainWindow::CloseChoice::LeaveRunning; });
    QVERIFY(w->close());
    QCOMPARE(run->state(), ServiceRun::State::Detached);
  }  // the window, its writer and its ingestor are gone; the worker trains on
  auto cleanup = qScopeGuard([&] { killLeftover(dir); });
  QVERIFY(ServiceRun::liveWorkerPid(dir) > 0);
  QCOMPARE(storedRun(m_workspace.databasePath, id).status, db::RunStatus::kRunning);
  QTest::qWait(500);

  const double elapsedBefore = QDateTime::currentMSecsSinceEpoch() / 1000.0 -
                               storedRun(m_workspace.databasePath, id).started_at.value_or(0);
  auto w = makeWindow();
  QCOMPARE(w->reattachedRuns(), 1);
  ServiceRun* run = w->localRuns()->runForStoreId(id);
  QVERIFY(run);
  QVERIFY(run->isAttached());
  QVERIFY(run->isActive());
  // Issue 18 item 3: the status bar counts the re-attached run, in one label (no message drawn
  // over it), and elapsed is the store's: the time since the run started, not since re-attach.
  QCOMPARE(statusBarRunning(w.get()), QStringLiteral("1 run running (1 re-attached)"));
  QVERIFY(w->statusBar()->currentMessage().isEmpty());
  QVERIFY2(
      run->elapsedMs() >= static_cast<qint64>(elapsedBefore * 1000) - 100,
      qPrintable(
          QStringLiteral("%1 ms elapsed, %2 s before re-attach").arg(run->elapsedMs()).arg(elapsedBefore)));
  // The store catches up from the committed offset while the worker goes on.
  QTRY_VERIFY_WITH_TIMEOUT(lossRows(m_workspace.databasePath, id).size() > 10, 10000);
  QSignalSpy finished(run, &ServiceRun::finished);
  run->stop();
  QVERIFY(finished.count() || finished.wait(60000));
  QCOMPARE(run->state(), ServiceRun::State::Stopped);
  QTRY_COMPARE_WITH_TIMEOUT(storedRun(m_workspace.databasePath, id).status, db::RunStatus::kStopped, 10000);
  // Not "exit -1: unknown": the end the store recorded, in the same words as the Runs table.
  QCOMPARE(run->stateText(), QStringLiteral("stopped (on request)"));
  QTRY_COMPARE(tableStatus(w.get(), id), run->stateText());
  QVERIFY(run->elapsedMs() >= static_cast<qint64>(elapsedBefore * 1000));
  QCOMPARE(statusBarRunning(w.get()), QStringLiteral("0 runs running"));
  int duplicates = 0;
  const std::set<qint64> steps = fileSteps(dir, &duplicates);
  QCOMPARE(duplicates, 0);
  const auto rows = lossRows(m_workspace.databasePath, id);
  QCOMPARE(rows.size(), steps.size());
  QCOMPARE(rows.back().step, static_cast<int64_t>(steps.size()));
  QVERIFY(ServiceRun::liveWorkerPid(dir) == 0);
  qInfo("re-attached run stopped at step %lld: %zu loss rows, each step once",
        static_cast<long long>(rows.back().step), rows.size());
}

// The stopped run of the first test, from the Runs view's actions: resume continues it in place
// from its checkpoint (same row, the series goes on, every step once); fork starts a new run
// from that checkpoint with the parent recorded; duplicate opens the wizard with its config;
// delete refuses while running and removes a finished run from the store.
void TestAppE2e::resumeForkDuplicateAndDeleteFromTheRunsView() {
  // Steps of a millisecond outrun the window's view of them on a loaded machine: the resumed run
  // reached step 18,634 of 20,000 before its Stop landed and the fork then finished before its Kill.
  // A 5 ms pause per step (the trainer's test hook) keeps each run well inside its 20,000 steps.
  qputenv("FLOTILLA_TEST_STEP_SLEEP_MS", "5");
  auto unpace = qScopeGuard([] { qunsetenv("FLOTILLA_TEST_STEP_SLEEP_MS"); });
  auto w = makeWindow();
  auto* runsPage = qobject_cast<flotilla::ui::RunsPage*>(w->page(MainWindow::Runs));
  flotilla::ui::StoreRunsView* view = runsPage->storeView();
  QVERIFY(view);
  QTRY_VERIFY(view->model()->rowCount() >= 2);
  qint64 stoppedId = 0;
  for (int r = 0; r < view->model()->rowCount(); ++r)
    if (view->model()->rowAt(r)->status == QLatin1String("stopped") && stoppedId == 0)
      stoppedId = view->model()->rowAt(r)->id;
  QVERIFY(stoppedId > 0);
  const qint64 before = lossRows(m_workspace.databasePath, stoppedId).back().step;

  // Resume: the same row runs again from its checkpoint.
  ServiceRun* resumed = view->resume(stoppedId);
  QVERIFY(resumed);
  const QString dir = resumed->runDir();
  auto cleanup = qScopeGuard([&] { killLeftover(dir); });
  QCOMPARE(resumed->storeId(), stoppedId);
  QTRY_VERIFY_WITH_TIMEOUT(resumed->lastStep() >= before + 5 || !resumed->isActive(), 30000);
  QVERIFY2(resumed->isActive(), qPrintable(resumed->stateText()));
  view->confirmDelete = [](const QString&) { return true; };
  QVERIFY(!view->remove(stoppedId));  // refused while running, even when confirmed
  QSignalSpy finished(resumed, &ServiceRun::finished);
  resumed->stop();
  QVERIFY(finished.count() || finished.wait(60000));
  QTRY_COMPARE_WITH_TIMEOUT(storedRun(m_workspace.databasePath, stoppedId).status, db::RunStatus::kStopped,
                            10000);
  int duplicates = 0;
  const std::set<qint64> steps = fileSteps(dir, &duplicates);
  QVERIFY(duplicates == 0);  // the worker resumed exactly after its checkpoint: no step recomputed
  const auto rows = lossRows(m_workspace.databasePath, stoppedId);
  QCOMPARE(rows.size(), steps.size());
  QCOMPARE(rows.back().step, static_cast<int64_t>(steps.size()));
  QVERIFY(rows.back().step >= before + 5);

  // Fork from the newest checkpoint: a new run whose parent is the stopped one.
  const db::Database d(m_workspace.databasePath.toStdString());
  const auto checkpoints = db::list_checkpoints(d, stoppedId);
  QVERIFY(!checkpoints.empty());
  ServiceRun* fork = view->fork(stoppedId, QString::fromStdString(checkpoints.back().dir));
  QVERIFY(fork);
  const QString forkDir = fork->runDir();
  auto cleanupFork = qScopeGuard([&] { killLeftover(forkDir); });
  QVERIFY(fork->storeId() != stoppedId);
  QTRY_VERIFY_WITH_TIMEOUT(fork->lastStep() > 0 || !fork->isActive(), 30000);
  QVERIFY2(fork->isActive(), qPrintable(fork->stateText()));
  QCOMPARE(fork->lastStep() > checkpoints.back().step, true);  // it starts after the checkpoint
  const db::Run forkRow = storedRun(m_workspace.databasePath, fork->storeId());
  QCOMPARE(forkRow.parent_id.value_or(0), stoppedId);
  QCOMPARE(forkRow.parent_kind, std::string("fork"));
  QSignalSpy forkDone(fork, &ServiceRun::finished);
  const QList<qint64> forkRanks = childPids(fork->pid());
  QCOMPARE(forkRanks.size(), 1);
  fork->kill();
  QVERIFY(forkDone.count() || forkDone.wait(30000));
  QCOMPARE(fork->state(), ServiceRun::State::Killed);
  QTRY_VERIFY_WITH_TIMEOUT(processGone(forkRanks[0]), 5000);  // the rank ended with its launcher
  QTRY_COMPARE_WITH_TIMEOUT(storedRun(m_workspace.databasePath, fork->storeId()).status,
                            db::RunStatus::kStopped, 10000);
  // Killed reads the same on the run (Live) and in the Runs table.
  QCOMPARE(fork->stateText(), QStringLiteral("stopped (killed on request)"));
  QTRY_COMPARE(tableStatus(w.get(), fork->storeId()), fork->stateText());

  // Sample from the model and export its weights, from the run's menu (issue 18): the real worker
  // on the run's newest verified checkpoint, in the background.
  QString shown;
  view->showSample = [&](const QString& text) { shown = text; };
  QSignalSpy sampled(view, &flotilla::ui::StoreRunsView::sampled);
  QVERIFY(view->sampleModel(stoppedId, QStringLiteral("Once upon")));
  QVERIFY(view->isBusy());
  QVERIFY(sampled.wait(60000));
  QVERIFY2(sampled.at(0).at(0).toBool(), qPrintable(sampled.at(0).at(1).toString()));
  QVERIFY2(shown.startsWith(QStringLiteral("Token ids (this run has no tokenizer")) && shown == sampled.at(0).at(1).toString(), qPrintable(shown));
  qInfo("sample: %s", qPrintable(shown.left(120)));
  QSignalSpy exported(view, &flotilla::ui::StoreRunsView::weightsExported);
  const QString out = m_tmp.filePath(QStringLiteral("exported-weights"));
  QVERIFY(view->exportWeights(stoppedId, out));
  QVERIFY(exported.wait(60000));
  QVERIFY2(exported.at(0).at(0).toBool(), qPrintable(exported.at(0).at(1).toString()));
  QVERIFY(QFileInfo(out + QStringLiteral("/model.safetensors")).size() > 1000);
  QVERIFY(QFile::exists(out + QStringLiteral("/config.json")));

  // Duplicate: the wizard opens on Review with the run's config.
  view->duplicate(stoppedId);
  QVERIFY(runsPage->wizard());
  QCOMPARE(runsPage->wizard()->config().model.n_embd, 32);
  QTRY_COMPARE(runsPage->wizard()->currentId(), int(flotilla::ui::RunWizard::Review));
  runsPage->wizard()->reject();

  // Delete a finished run (confirmed): gone from the store and the table.
  const qint64 forkId = fork->storeId();
  QVERIFY(view->remove(forkId));
  QTRY_COMPARE(view->model()->rowOfId(forkId), -1);
  QVERIFY(!db::find_run(d, forkRow.name));
}

// Issue 18 item 1: a validation split smaller than one batch (B x T + 1 tokens). The wizard's
// draft refuses it naming data.val (the worker's preflight, the same code); started anyway (as
// an edited run.toml would be), the real worker fails at step 0 with exit 4, and the Live page
// says why at its top in the worker's words, as the Runs table does.
void TestAppE2e::aRunThatFailsAtPreflightSaysWhyAtTheTopOfLive() {
  const QString data = m_tmp.filePath(QStringLiteral("small-val"));
  QVERIFY(QDir().mkpath(data));
  std::vector<uint32_t> tokens(4000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>(i % 128);
  flotilla::write_shard((data + QStringLiteral("/train_000.bin")).toStdString(), tokens);
  tokens.resize(20);  // one batch reads 2 x 16 + 1 = 33 tokens
  flotilla::write_shard((data + QStringLiteral("/val_000.bin")).toStdString(), tokens);
  flotilla::RunConfig c = shrink(flotilla::RunConfig{});
  c.run.name = "small-val";
  c.data.source = "shards";
  c.data.train = (data + QStringLiteral("/train_*.bin")).toStdString();
  c.data.val = (data + QStringLiteral("/val_*.bin")).toStdString();
  c.train.steps = 5;

  flotilla::ui::ConfigDraft draft(c);
  QStringList refused;
  for (const auto& p : draft.problems()) refused << QString::fromStdString(flotilla::to_string(p));
  QVERIFY2(refused.size() == 1 && refused[0].startsWith(QStringLiteral("data.val: shard ")) &&
               refused[0].contains(QStringLiteral("20 tokens are too few for one batch")) &&
               refused[0].contains(QStringLiteral("lower train.micro_batch or train.seq_len")),
           qPrintable(refused.join(QLatin1Char('\n'))));

  auto w = makeWindow();
  QString error;
  ServiceRun* run = w->localRuns()->startConfig(c, 1, &error);
  QVERIFY2(run, qPrintable(error));
  auto* live = qobject_cast<flotilla::ui::LivePage*>(w->page(MainWindow::Live));
  live->setRun(run);
  QTRY_VERIFY_WITH_TIMEOUT(!run->isActive(), 60000);
  QCOMPARE(run->state(), ServiceRun::State::Failed);
  QCOMPARE(run->exitCode(), 4);
  const QString why = live->failureText();
  QVERIFY2(why.startsWith(QStringLiteral("Failed: exit 4: data error: data.val: shard ")) &&
               why.contains(QStringLiteral("20 tokens are too few for one batch")),
           qPrintable(why));
  QVERIFY(live->findChild<QLabel*>(QStringLiteral("liveFailure"))->isVisible());
  QVERIFY2(!why.contains(QLatin1Char('{')), qPrintable(why));  // words, not the launcher's JSON
  // The wizard's message and the worker's are the same text.
  QVERIFY2(why.contains(refused[0].mid(QStringLiteral("data.val: ").size())),
           qPrintable(why + "\n" + refused[0]));
  QCOMPARE(run->stateText(), QStringLiteral("failed (%1)").arg(why.mid(QStringLiteral("Failed: ").size())));
  QTRY_COMPARE(tableStatus(w.get(), run->storeId()), run->stateText());
  w->showPage(MainWindow::Live);
  QCoreApplication::processEvents();
  QVERIFY(w->grab().save(QStringLiteral(FLOTILLA_SCREENSHOT_DIR "/view-live-failed.png")));
}

// Issue 18 item 6: the worker writes its samples as ids (no tokenizer at hand); the Live page
// shows them per step as text, decoded with the tokenizer that made the run's shards (found
// beside them, as the Data page leaves it).
void TestAppE2e::samplesAreDecodedWithTheRunsTokenizerOnLive() {
  const QString data = m_tmp.filePath(QStringLiteral("sampled"));
  QVERIFY(QDir().mkpath(data));
  std::string corpus;
  for (int i = 0; i < 60; ++i) corpus += "the small boat sails on the calm sea and the wind is kind. ";
  const flotilla::Tokenizer tok = flotilla::Tokenizer::train({corpus}, 300);
  tok.save((data + QStringLiteral("/tokenizer.flotilla.json")).toStdString());
  const std::vector<uint32_t> ids = tok.encode(corpus);
  QVERIFY(ids.size() > 200);
  flotilla::write_shard((data + QStringLiteral("/train_000.bin")).toStdString(), ids);
  flotilla::write_shard((data + QStringLiteral("/val_000.bin")).toStdString(),
                        std::vector<uint32_t>(ids.begin(), ids.begin() + 100));
  flotilla::RunConfig c = shrink(flotilla::RunConfig{});
  c.run.name = "sampled";
  c.model.vocab_size = tok.vocab_size();
  c.data.source = "shards";
  c.data.train = (data + QStringLiteral("/train_*.bin")).toStdString();
  c.data.val = (data + QStringLiteral("/val_*.bin")).toStdString();
  c.train.steps = 6;
  c.eval.sample_every = 2;
  c.eval.sample_tokens = 8;

  auto w = makeWindow();
  QString error;
  ServiceRun* run = w->localRuns()->startConfig(c, 1, &error);
  QVERIFY2(run, qPrintable(error));
  auto* live = qobject_cast<flotilla::ui::LivePage*>(w->page(MainWindow::Live));
  live->setRun(run);
  QTRY_VERIFY_WITH_TIMEOUT(!run->isActive(), 60000);
  QVERIFY2(run->state() == ServiceRun::State::Completed, qPrintable(run->stateText()));
  // The worker's sample records: ids, empty text.
  QFile f(run->runDir() + QStringLiteral("/metrics.jsonl"));
  QVERIFY(f.open(QIODevice::ReadOnly));
  QStringList expected;
  while (!f.atEnd()) {
    const QJsonObject r = QJsonDocument::fromJson(f.readLine()).object();
    if (r.value(QLatin1String("type")).toString() != QLatin1String("sample")) continue;
    QVERIFY(r.value(QLatin1String("text")).toString().isEmpty());
    std::vector<uint32_t> sample;
    for (const QJsonValue& v : r.value(QLatin1String("tokens")).toArray())
      sample.push_back(static_cast<uint32_t>(v.toInt()));
    QCOMPARE(sample.size(), size_t{8});
    expected << QStringLiteral("step %1: %2")
                    .arg(r.value(QLatin1String("step")).toInteger())
                    .arg(QString::fromStdString(tok.decode(sample)));
  }
  QCOMPARE(expected.size(), 3);  // steps 2, 4, 6
  QTRY_COMPARE(live->samplesText(), expected.join(QLatin1Char('\n')));
  QVERIFY(!live->samplesText().contains(QStringLiteral("ids:")));
  w->showPage(MainWindow::Live);
  QCoreApplication::processEvents();
  QVERIFY(w->grab().save(QStringLiteral(FLOTILLA_SCREENSHOT_DIR "/view-live-samples.png")));
}

QTEST_MAIN(TestAppE2e)
#include "test_app_e2e.moc"
