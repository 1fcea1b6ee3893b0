// Budgets that stop runs started from the app (issue 16), under the offscreen platform with the
// real worker: a config-priced run ($36/h, a cent a second) started as the wizard starts it stops
// with a checkpoint at budget.max_usd, and another at budget.max_hours; the store has the cost and
// the reason; the Live page, the Runs table and the store show one figure for the spend, and the
// status bar's rate is the run's stored price while it runs.
#include <QTemporaryDir>
#include <QtTest>

#include <cmath>

#include "db/costs.h"
#include "db/database.h"
#include "db/run_records.h"
#include "db/run_store.h"
#include "db/workspace.h"
#include "engine/config/config_io.h"
#include "ui/live/livedashboard.h"
#include "ui/live/livepage.h"
#include "ui/main/runnotifier.h"
#include "ui/runs/servicerun.h"
#include "ui/runs/localruns.h"
#include "ui/runs/storerunsmodel.h"
#include "ui/runs/storeservice.h"

using flotilla::ui::LivePage;
using flotilla::ui::ServiceRun;
using flotilla::ui::LocalRuns;
using flotilla::ui::StoreRunsModel;
using flotilla::ui::StoreService;
namespace db = flotilla::db;

namespace {

flotilla::RunConfig priced(const std::string& name, const std::string& limit) {
  return flotilla::parse_config_toml(
      "[run]\nname = \"" + name +
          "\"\nthreads = 1\n[model]\npreset = \"custom\"\nn_layer = 2\nn_head = 2\n"
          "n_embd = 32\nvocab_size = 128\nmax_seq_len = 32\n[data]\nsynthetic_tokens = 30000\n[train]\n"
          "steps = 1000000\nmicro_batch = 2\nseq_len = 16\n[checkpoint]\nevery = "
          "1000000\n[budget]\nusd_per_hour = 36.0\n" +
          limit,
      "test");
}

db::Run storedRun(const QString& path, qint64 id) {
  const db::Database d(path.toStdString());
  return db::get_run(d, id);
}

}  // namespace

class TestAppBudgetE2e : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase();
  void aConfigPricedRunStopsAtItsBudget();
  void aRunStopsAtItsTimeLimit();

 private:
  QTemporaryDir m_tmp{QStringLiteral(FLOTILLA_TEST_TMP "/app_budget-XXXXXX")};
  QString m_db;
};

void TestAppBudgetE2e::initTestCase() {
  QVERIFY(m_tmp.isValid());
  db::ensure_workspace_dir(m_tmp.path().toStdString());
  m_db = QString::fromStdString(db::workspace_database_path(m_tmp.path().toStdString()));
  const db::Database d(m_db.toStdString());
}

void TestAppBudgetE2e::aConfigPricedRunStopsAtItsBudget() {
  qputenv("OMP_NUM_THREADS", "1");
  StoreService store(m_db, nullptr, 200);
  LocalRuns runs(m_tmp.path());
  runs.setStore(&store);
  runs.setWorkerPath(QStringLiteral(FLOTILLA_WORKER_PATH));
  StoreRunsModel model(&store);
  LivePage live;
  live.setRuns(&runs);
  live.resize(1200, 800);
  live.show();
  flotilla::ui::RunNotifier notifier(&runs);  // the user hears of the stop (issue 18)
  notifier.setDesktopEnabled(false);
  QSignalSpy notified(&notifier, &flotilla::ui::RunNotifier::notified);
  QString error;
  ServiceRun* run = runs.startConfig(priced("capped", "max_usd = 0.02\n"), 1, &error);
  QVERIFY2(run, qPrintable(error));
  live.setRun(run);
  QSignalSpy finished(run, &ServiceRun::finished);
  // While it runs, the status bar's rate is the run's stored price.
  QTRY_VERIFY_WITH_TIMEOUT(store.spendPerHour() == 36.0 || !run->isActive(), 20000);
  QCOMPARE(store.spendPerHour(), 36.0);
  QVERIFY(finished.count() || finished.wait(60000));
  QCOMPARE(run->exitCode(), 10);
  QVERIFY2(run->stateText().startsWith(QStringLiteral("stopped (budget reached: $0.02")), qPrintable(run->stateText()));
  const db::Run r = storedRun(m_db, run->storeId());
  QCOMPARE(r.status, db::RunStatus::kStopped);
  QVERIFY2(QString::fromStdString(r.status_note).startsWith(QStringLiteral("budget reached: $0.02")),
           r.status_note.c_str());
  QCOMPARE(*r.usd_per_hour, 36.0);
  const db::Database d(m_db.toStdString());
  const double cost = db::run_cost_usd(d, r.id);
  QVERIFY(cost >= 0.02);
  QVERIFY2(*r.ended_at - (*r.started_at + 2.0) < 3.0, "stopped promptly after crossing the cap");
  const auto cps = db::list_checkpoints(d, r.id);
  QVERIFY(!cps.empty() && cps.back().reason == "budget");
  qInfo("app: %s, cost $%.4f (stored), ran %.2f s", r.status_note.c_str(), cost, *r.ended_at - *r.started_at);
  // Notified: "stopped" with the budget's reason; the warning at 80% when the guard saw it before
  // the cap (its 1 s poll may see the cap first), in the runs layer's own words.
  using Event = flotilla::ui::RunNotifier::Event;
  QTRY_VERIFY_WITH_TIMEOUT(!notified.isEmpty() && notified.last().at(0).value<Event>() == Event::Stopped, 10000);
  QVERIFY2(notified.last().at(2).toString().startsWith(QStringLiteral("budget reached: $0.02")),
           qPrintable(notified.last().at(2).toString()));
  bool warnedInLog = false;
  for (const auto& line : run->log()) warnedInLog |= line.text.contains(QStringLiteral("has spent"));
  int warnings = 0;
  for (const auto& n : notified) warnings += n.at(0).value<Event>() == Event::BudgetWarning;
  QCOMPARE(warnings, warnedInLog ? 1 : 0);

  // One figure everywhere: the Runs table, the Live page and the store.
  store.refresh();
  QTRY_VERIFY_WITH_TIMEOUT(
      model.rowOfId(r.id) >= 0 && model.rowAt(model.rowOfId(r.id))->status == QLatin1String("stopped"), 10000);
  const int row = model.rowOfId(r.id);
  QVERIFY(std::abs(model.rowAt(row)->costUsd - cost) < 1e-9);
  QCOMPARE(model.index(row, StoreRunsModel::Status).data().toString(),
           QStringLiteral("stopped (%1)").arg(QString::fromStdString(r.status_note)));
  QTRY_VERIFY_WITH_TIMEOUT(
      live.dashboard()->data().cost().spentKnown && std::abs(live.dashboard()->data().spentUsd() - cost) < 1e-9, 10000);
  QVERIFY2(live.statusText().contains(flotilla::ui::LiveDashboard::money(cost) + QStringLiteral(" spent")),
           qPrintable(live.statusText()));
  QTRY_COMPARE_WITH_TIMEOUT(store.spendPerHour(), 0.0, 10000);  // nothing accrues once it stopped
}

void TestAppBudgetE2e::aRunStopsAtItsTimeLimit() {
  StoreService store(m_db, nullptr, 200);
  LocalRuns runs(m_tmp.path());
  runs.setStore(&store);
  runs.setWorkerPath(QStringLiteral(FLOTILLA_WORKER_PATH));
  QString error;
  ServiceRun* run = runs.startConfig(priced("timed", "max_hours = 0.0005\n"), 1, &error);  // 1.8 s
  QVERIFY2(run, qPrintable(error));
  QSignalSpy finished(run, &ServiceRun::finished);
  QVERIFY(finished.wait(60000));
  QVERIFY2(run->stateText().startsWith(QStringLiteral("stopped (time limit reached: ")), qPrintable(run->stateText()));
  const db::Run r = storedRun(m_db, run->storeId());
  QCOMPARE(r.status, db::RunStatus::kStopped);
  QVERIFY2(r.status_note.find(" of 0.0005 h") != std::string::npos, r.status_note.c_str());
  const double ran = *r.ended_at - *r.started_at;
  QVERIFY2(ran >= 1.8 && ran < 1.8 + 3.0, qPrintable(QString::number(ran)));
  const db::Database d(m_db.toStdString());
  qInfo("app: %s, cost $%.4f, ran %.2f s", r.status_note.c_str(), db::run_cost_usd(d, r.id), ran);
}

QTEST_MAIN(TestAppBudgetE2e)
#include "test_app_budget_e2e.moc"
