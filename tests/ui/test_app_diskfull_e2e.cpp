// The run database fills up while a run started from the app trains (docs/reliability.md D3, from
// the app), under the offscreen platform with the real worker. SQLite's answer to a full disk
// (SQLITE_FULL) is injected with PRAGMA max_page_count on the app's own writer connection:
// - Live's log says the metrics could not be stored and that training goes on; the worker keeps
//   writing metrics.jsonl while nothing reaches the store;
// - once writing works again, Live says so, the missing steps are stored from metrics.jsonl, and
//   after a Stop every step the worker wrote is in the store exactly once; integrity_check is ok.
#include <QTemporaryDir>
#include <QtTest>

#include <fstream>
#include <set>

#include "db/database.h"
#include "db/queries.h"
#include "db/run_records.h"
#include "db/sql.h"
#include "db/workspace.h"
#include "engine/config/config_io.h"
#include "ui/live/livepage.h"
#include "ui/runs/localruns.h"
#include "ui/runs/servicerun.h"
#include "ui/runs/storeservice.h"

using flotilla::ui::LivePage;
using flotilla::ui::LocalRuns;
using flotilla::ui::ServiceRun;
using flotilla::ui::StoreService;
namespace db = flotilla::db;

namespace {

flotilla::RunConfig longRun() {
  return flotilla::parse_config_toml(
      "[run]\nname = \"filling\"\nthreads = 1\n[model]\npreset = \"custom\"\nn_layer = 1\nn_head = 2\n"
      "n_embd = 16\nvocab_size = 64\nmax_seq_len = 16\n[data]\nsynthetic_tokens = 20000\n[train]\n"
      "steps = 1000000\nmicro_batch = 1\nseq_len = 8\n[checkpoint]\nevery = 1000000\n",
      "test");
}

// Step records rank 0 wrote to the run's metrics.jsonl.
qint64 stepLines(const QString& metricsPath) {
  std::ifstream f(metricsPath.toStdString());
  qint64 n = 0;
  for (std::string l; std::getline(f, l);)
    n += l.find("\"type\":\"step\"") != std::string::npos && l.find("\"rank\":0") != std::string::npos;
  return n;
}

// Steps with a stored loss; `distinct` counts each step number once.
qint64 storedSteps(const QString& dbPath, qint64 runId, bool distinct = false) {
  const db::Database d(dbPath.toStdString());
  const auto points = db::metric_points(d, runId, "loss");
  if (!distinct) return static_cast<qint64>(points.size());
  std::set<int64_t> steps;
  for (const auto& p : points) steps.insert(p.step);
  return static_cast<qint64>(steps.size());
}

}  // namespace

class TestAppDiskfullE2e : public QObject {
  Q_OBJECT

 private slots:
  void theStoreFillsWhileARunTrains();
};

void TestAppDiskfullE2e::theStoreFillsWhileARunTrains() {
  QTemporaryDir tmp(QStringLiteral(FLOTILLA_TEST_TMP "/app_diskfull-XXXXXX"));
  QVERIFY(tmp.isValid());
  db::ensure_workspace_dir(tmp.path().toStdString());
  const QString dbPath = QString::fromStdString(db::workspace_database_path(tmp.path().toStdString()));
  { const db::Database create(dbPath.toStdString()); }
  qputenv("OMP_NUM_THREADS", "1");
  StoreService store(dbPath, nullptr, 200);
  LocalRuns runs(tmp.path());
  runs.setStore(&store);
  runs.setWorkerPath(QStringLiteral(FLOTILLA_WORKER_PATH));
  LivePage live;
  live.setRuns(&runs);
  live.resize(1200, 800);
  live.show();
  QString error;
  ServiceRun* run = runs.startConfig(longRun(), 1, &error);
  QVERIFY2(run, qPrintable(error));
  live.setRun(run);
  QSignalSpy finished(run, &ServiceRun::finished);
  QTRY_VERIFY_WITH_TIMEOUT(run->storeId() > 0 && storedSteps(dbPath, run->storeId()) >= 5, 30000);

  // Full: no page beyond the ones the database has now.
  store.writer().run([](db::Database& d) {
    d.exec("PRAGMA max_page_count = " + std::to_string(db::query_int(d, "PRAGMA page_count")));
  });
  QTRY_VERIFY_WITH_TIMEOUT(live.logText().contains(QStringLiteral("storing the metrics failed")), 30000);
  QVERIFY2(live.logText().contains(QStringLiteral("training goes on")), qPrintable(live.logText()));
  const qint64 storedWhenFull = storedSteps(dbPath, run->storeId());
  const qint64 writtenWhenFull = stepLines(run->metricsPath());
  QTRY_VERIFY_WITH_TIMEOUT(stepLines(run->metricsPath()) >= writtenWhenFull + 50, 60000);  // it trains on
  QVERIFY(run->isActive());
  QVERIFY2(storedSteps(dbPath, run->storeId()) <= storedWhenFull + 1,
           "steps were stored into a full database");

  // Space again: the missing steps arrive from metrics.jsonl.
  store.writer().run([](db::Database& d) { d.exec("PRAGMA max_page_count = 1073741823"); });
  QTRY_VERIFY_WITH_TIMEOUT(live.logText().contains(QStringLiteral("accepts writes again")), 30000);
  const qint64 writtenBeforeStop = stepLines(run->metricsPath());
  QTRY_VERIFY_WITH_TIMEOUT(storedSteps(dbPath, run->storeId()) >= writtenBeforeStop, 30000);
  run->stop();
  QVERIFY(finished.count() || finished.wait(60000));
  const qint64 written = stepLines(run->metricsPath());
  QTRY_COMPARE_WITH_TIMEOUT(storedSteps(dbPath, run->storeId()), written, 20000);
  QCOMPARE(storedSteps(dbPath, run->storeId(), true), written);  // each step once
  const db::Database d(dbPath.toStdString());
  QCOMPARE(db::query_int(d, "SELECT count(*) FROM pragma_integrity_check WHERE integrity_check = 'ok'"), 1);
  QCOMPARE(db::get_run(d, run->storeId()).status, db::RunStatus::kStopped);
  qInfo("%lld steps stored when the store filled, %lld written by then; %lld written and stored in the end",
        static_cast<long long>(storedWhenFull), static_cast<long long>(writtenWhenFull),
        static_cast<long long>(written));
}

QTEST_MAIN(TestAppDiskfullE2e)
#include "test_app_diskfull_e2e.moc"
