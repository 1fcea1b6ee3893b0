// The queue served from the app, end to end with the real worker (issue 37): a config queued for
// this machine is started by the window's scheduler (runs::Scheduler on AppScheduler's thread), the
// run trains to completion, the entry ends done with its run, the run shows in the store feed the
// Runs page lists (as every run does), and switching serving off releases the lease.
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QtTest>

#include "db/database.h"
#include "db/queue.h"
#include "db/run_store.h"
#include "ui/main/runnotifier.h"
#include "ui/queue/appscheduler.h"
#include "ui/queue/queuestore.h"
#include "ui/runs/localruns.h"
#include "ui/runs/storeservice.h"

using namespace flotilla;
using namespace flotilla::ui;

class TestQueueSchedulerE2e : public QObject {
  Q_OBJECT

 private slots:
  void aQueuedConfigRunsFromTheWindow();
};

void TestQueueSchedulerE2e::aQueuedConfigRunsFromTheWindow() {
  QTemporaryDir tmp;
  QVERIFY(tmp.isValid());
  const QString ws = tmp.filePath(QStringLiteral("ws"));
  QVERIFY(QDir().mkpath(ws));
  const QString dbPath = tmp.filePath(QStringLiteral("flotilla.db"));
  { db::Database create(dbPath.toStdString()); }
  StoreService store(dbPath, nullptr, 200);
  LocalRuns runs(ws);
  runs.setWorkerPath(QStringLiteral(FLOTILLA_WORKER_PATH));
  runs.setStore(&store);

  QueueRequest request;
  request.configToml =
      "[run]\nname = \"queued-tiny\"\nthreads = 1\n[model]\npreset = \"custom\"\nn_layer = 2\nn_head = 2\n"
      "n_embd = 32\nvocab_size = 128\nmax_seq_len = 32\n[data]\nsynthetic_tokens = 30000\n[train]\nsteps = "
      "30\n"
      "micro_batch = 2\nseq_len = 16\n[checkpoint]\nevery = 1000\n";
  request.places = {QStringLiteral("local")};
  QString error;
  const qint64 id = addToQueue(&store, request, &error);
  QVERIFY2(id > 0, qPrintable(error));

  AppScheduler scheduler(dbPath, runsSchedulerEngine(runs.serviceOptions()));
  scheduler.setIntervals(200, 500);
  QSignalSpy decided(&scheduler, &AppScheduler::decided);
  scheduler.setEnabled(true);
  QTRY_COMPARE_WITH_TIMEOUT(scheduler.state(), AppScheduler::State::Serving, 10000);

  auto entry = [&] {
    const db::Database d(dbPath.toStdString());
    return *db::find_queue_entry(d, id);
  };
  QTRY_VERIFY_WITH_TIMEOUT(db::entry_finished(entry().state), 60000);
  const db::QueueEntry done = entry();
  QCOMPARE(db::entry_state_name(done.state), "done");
  QVERIFY(done.run_id.has_value());
  QCOMPARE(done.place, std::string("local"));
  {
    const db::Database d(dbPath.toStdString());
    const db::Run run = db::get_run(d, *done.run_id);
    QCOMPARE(run.name, std::string("queued-tiny"));
    QCOMPARE(db::to_string(run.status), "completed");
  }
  // In the store feed the Runs page lists, as every run.
  QTRY_VERIFY_WITH_TIMEOUT(
      [&] {
        for (const RunRow& row : store.lastSnapshot())
          if (row.id == *done.run_id && row.status == QLatin1String("completed")) return true;
        return false;
      }(),
      10000);
  // Told: started.
  QVERIFY(decided.count() >= 1);
  QCOMPARE(decided.first().at(0).value<RunNotifier::Event>(), RunNotifier::Event::QueueStarted);
  QCOMPARE(decided.first().at(1).toString(), QStringLiteral("queued-tiny"));

  scheduler.setEnabled(false);
  const db::Database d(dbPath.toStdString());
  QVERIFY(!db::scheduler_lease(d));
}

QTEST_MAIN(TestQueueSchedulerE2e)
#include "test_queue_scheduler_e2e.moc"
