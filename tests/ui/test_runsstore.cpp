// The Runs view over a real run store: StoreRunsModel under QAbstractItemModelTester fed by the
// StoreService's off-thread snapshots, its live columns (progress, loss, tokens/s, MFU, cost), the
// filters, tag and note edits written to the store, delete refused while running, CSV export,
// the settling of a run whose worker is gone, and the single-instance lock. (Ingesting by the
// committed offset, across a watcher that left and one that re-attached, is the runs layer's:
// tests/runs/test_local_lifecycle.cpp.)
#include <QAbstractItemModelTester>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QProcess>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QtTest>

#include <atomic>

#include "db/costs.h"
#include "db/database.h"
#include "db/ingest.h"
#include "db/queries.h"
#include "db/run_records.h"
#include "db/run_store.h"
#include "db/sql.h"
#include "db/workspace.h"
#include "db/writer.h"
#include "runs/run_status.h"
#include "ui/main/instancelock.h"
#include "ui/runs/servicerun.h"
#include "ui/runs/localruns.h"
#include "ui/runs/storerunsmodel.h"
#include "ui/runs/storerunsview.h"
#include "ui/runs/storeservice.h"

using flotilla::ui::RunsFilterModel;
using flotilla::ui::StoreRunsModel;
using flotilla::ui::StoreService;
namespace db = flotilla::db;

namespace {

QByteArray stepLine(int step, double loss) {
  return QStringLiteral(R"({"v":1,"type":"step","time":%1,"rank":0,"step":%2,"loss":%3,"lr":0.001,)"
                        R"("tokens_per_s":%4,"mfu":0.25,"tokens":%5})")
             .arg(1000 + step)
             .arg(step)
             .arg(loss)
             .arg(1000 + step)
             .arg(step * 64)
             .toUtf8() +
         '\n';
}

int64_t countRows(const QString& path, int64_t run, const char* name) {
  const db::Database d(path.toStdString());
  db::Stmt st(d, "SELECT count(*) FROM metrics WHERE run_id = ?1 AND name = ?2");
  st.bind(1, run).bind(2, name);
  st.step();
  return st.i64(0);
}

}  // namespace

class TestRunsStore : public QObject {
  Q_OBJECT

 private slots:
  void init();
  void modelShowsStoredRunsLive();
  void filtersTagsNotesAndDelete();
  void exportsCsv();
  void secondInstanceIsRefused();
  void goneWorkerIsMarkedLostAfterItsFileIsStored();

 private:
  QTemporaryDir m_tmp;
  QString m_db;
};

void TestRunsStore::init() {
  static int n = 0;
  m_db = m_tmp.filePath(QStringLiteral("ws%1/flotilla.db").arg(++n));
  db::ensure_workspace_dir(QFileInfo(m_db).path().toStdString());
  db::Database d(m_db.toStdString());
}

void TestRunsStore::modelShowsStoredRunsLive() {
  int64_t running = 0, done = 0;
  {
    db::Database d(m_db.toStdString());
    db::NewRun a;
    a.name = "alpha";
    a.config_json = R"({"train":{"steps":100},"parallel":{"dp":2,"tp":1,"pp":1}})";
    a.run_dir = m_tmp.filePath(QStringLiteral("alpha")).toStdString();
    running = db::create_run(d, a);
    const int64_t node = db::ensure_node(d, "local", "local");
    db::NodePricing price;
    price.usd_per_hour = 3.6;  // $0.001 per second
    db::set_node_pricing(d, node, price);
    db::attach_node(d, running, node, 2);
    db::set_status(d, running, db::RunStatus::kRunning, 1000);
    db::NewRun b;
    b.name = "beta";
    done = db::create_run(d, b);
  }
  StoreService store(m_db, nullptr, 100);
  StoreRunsModel model(&store);
  QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
  QTRY_COMPARE(model.rowCount(), 2);
  const int row = model.rowOfId(running);
  QVERIFY(row >= 0);
  QCOMPARE(model.index(row, StoreRunsModel::Name).data().toString(), QStringLiteral("alpha"));
  QCOMPARE(model.index(row, StoreRunsModel::Status).data().toString(), QStringLiteral("running"));
  QCOMPARE(model.index(row, StoreRunsModel::Layout).data().toString(), QStringLiteral("dp2 × tp1 × pp1"));
  QVERIFY(model.index(row, StoreRunsModel::Loss).data().toString().isEmpty());

  // Metrics arrive as a run's watcher stores them (runs/local_run.h: by offset, through the
  // service's writer); the model follows without a reset.
  const QString metrics = m_tmp.filePath(QStringLiteral("alpha-metrics.jsonl"));
  QFile f(metrics);
  QVERIFY(f.open(QIODevice::WriteOnly));
  for (int s = 1; s <= 40; ++s) f.write(stepLine(s, 5.0 - s * 0.05));
  f.close();
  QSignalSpy reset(&model, &QAbstractItemModel::modelReset);
  db::FileIngestor(store.writer(), running, metrics.toStdString(), "metrics.jsonl").poll();
  // Issue 18: the time left at the run's measured pace (its steps are 1 s apart): 60 steps, 1:00.
  QTRY_COMPARE(model.index(model.rowOfId(running), StoreRunsModel::Progress).data().toString(),
               QStringLiteral("40 / 100 (40%), 1:00 left"));
  const int r = model.rowOfId(running);
  QCOMPARE(model.index(r, StoreRunsModel::Loss).data().toString(), QStringLiteral("3.0000"));
  QCOMPARE(model.index(r, StoreRunsModel::Mfu).data().toString(), QStringLiteral("25.0%"));
  // Issue 18 item 4: the run's speed (the mean of steps 2..40: 1002..1040), not the last step's 1040.
  QCOMPARE(model.index(r, StoreRunsModel::TokensPerSec).data(StoreRunsModel::SortRole).toDouble(), 1021.0);
  QCOMPARE(model.index(r, StoreRunsModel::TokensPerSec).data().toString(),
           QLocale().toString(1021.0, 'f', 0));
  // Running since t=1000 (1970) at $3.60/h: the cost is large and still accruing.
  QVERIFY(model.rowAt(r)->costUsd > 1000.0);
  QCOMPARE(model.rowAt(r)->usdPerHour, 3.6);
  QCOMPARE(store.spendPerHour(), 3.6);
  QCOMPARE(reset.count(), 0);

  // The end, as the watcher records it (the runs layer is the one place that writes a status).
  flotilla::runs::RunEnd end;
  end.status = db::RunStatus::kCompleted;
  end.reason = "test: done";
  end.exit_code = 0;
  store.writer().run([&](db::Database& wdb) { flotilla::runs::record_end(wdb, running, end); });
  store.refresh();
  QTRY_COMPARE(model.index(model.rowOfId(running), StoreRunsModel::Status).data().toString(),
               QStringLiteral("completed"));
  QCOMPARE(countRows(m_db, running, "loss"), int64_t{40});
  QTRY_COMPARE(store.spendPerHour(), 0.0);
  // A run with no price says so, as the CLI does: never "$0.00" (issue 18, one truth per number).
  QCOMPARE(model.index(model.rowOfId(done), StoreRunsModel::Cost).data().toString(), QStringLiteral("unpriced"));
  QVERIFY(model.index(model.rowOfId(running), StoreRunsModel::Cost).data().toString().startsWith(QLatin1Char('$')));
}

void TestRunsStore::filtersTagsNotesAndDelete() {
  int64_t keep = 0, live = 0;
  {
    db::Database d(m_db.toStdString());
    for (const char* name : {"gpt-small", "gpt-large", "bert"}) {
      db::NewRun r;
      r.name = name;
      const int64_t id = db::create_run(d, r);
      if (std::string(name) == "gpt-small") keep = id;
      if (std::string(name) == "gpt-large") {
        live = id;
        db::set_status(d, id, db::RunStatus::kRunning);
      }
    }
  }
  StoreService store(m_db, nullptr, 100);
  StoreRunsModel model(&store);
  RunsFilterModel filter;
  filter.setSourceModel(&model);
  QAbstractItemModelTester tester(&filter, QAbstractItemModelTester::FailureReportingMode::QtTest);
  QTRY_COMPARE(model.rowCount(), 3);

  filter.setTextFilter(QStringLiteral("GPT"));
  QCOMPARE(filter.rowCount(), 2);
  filter.setStatusFilter(QStringLiteral("running"));
  QCOMPARE(filter.rowCount(), 1);
  QCOMPARE(filter.index(0, StoreRunsModel::Name).data().toString(), QStringLiteral("gpt-large"));
  filter.setStatusFilter(QString());
  filter.setTextFilter(QString());

  // Tags and notes: edited in the model, stored, and filterable.
  const QModelIndex tags = model.index(model.rowOfId(keep), StoreRunsModel::Tags);
  QVERIFY(model.flags(tags) & Qt::ItemIsEditable);
  QVERIFY(model.setData(tags, QStringLiteral("baseline, lr-sweep")));
  QVERIFY(
      model.setData(model.index(model.rowOfId(keep), StoreRunsModel::Notes), QStringLiteral("the good one")));
  {
    const db::Database d(m_db.toStdString());
    const db::Run r = db::get_run(d, keep);
    QCOMPARE(r.notes, std::string("the good one"));
    QCOMPARE(r.tags.size(), size_t{2});
  }
  filter.setTagFilter(QStringLiteral("lr-sweep"));
  QCOMPARE(filter.rowCount(), 1);
  QCOMPARE(filter.index(0, StoreRunsModel::Name).data(StoreRunsModel::IdRole).toLongLong(), keep);
  filter.setTagFilter(QString());
  filter.setTextFilter(QStringLiteral("good one"));  // notes are searched too
  QCOMPARE(filter.rowCount(), 1);
  filter.setTextFilter(QString());

  // Delete: refused while running, done otherwise (the row leaves the model).
  QString error;
  QVERIFY(!store.deleteRun(live, &error));
  QVERIFY2(error.contains(QStringLiteral("running")), qPrintable(error));
  QVERIFY(store.deleteRun(keep, &error));
  QTRY_COMPARE(model.rowCount(), 2);
  QCOMPARE(model.rowOfId(keep), -1);
}

void TestRunsStore::exportsCsv() {
  int64_t id = 0;
  {
    db::Database d(m_db.toStdString());
    db::NewRun r;
    r.name = "csv";
    id = db::create_run(d, r);
  }
  {
    db::Writer writer(m_db.toStdString());
    writer.wait(
        writer.append({{id, "loss", 1, 2.5, 10}, {id, "loss", 2, 2.25, 11}, {id, "val_loss", 2, 2.75, 11}}));
  }
  const QString out = m_tmp.filePath(QStringLiteral("csv.csv"));
  QString error;
  QVERIFY2(flotilla::ui::exportRunCsv(m_db, id, out, &error), qPrintable(error));
  QFile f(out);
  QVERIFY(f.open(QIODevice::ReadOnly));
  QCOMPARE(f.readAll(), QByteArray("step,loss,val_loss\n1,2.5,\n2,2.25,2.75\n"));
}

void TestRunsStore::secondInstanceIsRefused() {
  const QString ws = QFileInfo(m_db).path();
  flotilla::ui::InstanceLock first(ws);
  QString why;
  QVERIFY(first.tryLock(&why));
  flotilla::ui::InstanceLock second(ws);
  QVERIFY(!second.tryLock(&why));
  QVERIFY2(why.contains(QStringLiteral("already open on this workspace")), qPrintable(why));
  QVERIFY(why.contains(QString::number(QCoreApplication::applicationPid())));
}

// Re-attach at start when the worker is gone (crashed, or the machine rebooted while the app was
// closed): what is left of its metrics file is stored, then the run is marked failed with a
// "lost" event, and nothing is re-attached.
void TestRunsStore::goneWorkerIsMarkedLostAfterItsFileIsStored() {
  const QString runDir = m_tmp.filePath(QStringLiteral("gone-run"));
  QVERIFY(QDir().mkpath(runDir));
  QFile f(runDir + QStringLiteral("/metrics.jsonl"));
  QVERIFY(f.open(QIODevice::WriteOnly));
  for (int s = 1; s <= 7; ++s) f.write(stepLine(s, 2.0));
  f.close();
  QProcess gone;  // a pid that certainly existed and is now dead
  gone.start(QStringLiteral("/bin/true"));
  QVERIFY(gone.waitForFinished(5000));
  QFile pid(runDir + QStringLiteral("/worker.pid"));
  QVERIFY(pid.open(QIODevice::WriteOnly));
  pid.write(QByteArray::number(gone.processId()) + " 12345\n");
  pid.close();
  QCOMPARE(flotilla::ui::ServiceRun::liveWorkerPid(runDir), qint64{0});
  int64_t id = 0;
  {
    db::Database d(m_db.toStdString());
    db::NewRun r;
    r.name = "gone";
    r.run_dir = runDir.toStdString();
    id = db::create_run(d, r);
    db::set_status(d, id, db::RunStatus::kRunning);
  }
  StoreService store(m_db, nullptr, 100);
  flotilla::ui::LocalRuns runs(QFileInfo(m_db).path());
  runs.setStore(&store);
  QSignalSpy ended(&store, &StoreService::runEnded);
  QCOMPARE(runs.reattachRunning(), 0);
  QCOMPARE(runs.count(), 0);
  QVERIFY(ended.wait(5000));
  QCOMPARE(ended.first().at(1).toString(), QStringLiteral("failed"));
  QCOMPARE(countRows(m_db, id, "loss"), int64_t{7});
  const db::Database d(m_db.toStdString());
  bool lost = false;
  for (const db::EventInfo& e : db::list_events(d, id))
    lost = lost || e.message.find("lost: its worker is no longer running") != std::string::npos;
  QVERIFY(lost);
}

QTEST_MAIN(TestRunsStore)
#include "test_runsstore.moc"
