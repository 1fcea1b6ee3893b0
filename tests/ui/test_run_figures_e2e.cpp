// A run's time and money on every page (issue 34 #8, #14, #17, #19), over real worker runs started
// as the app starts them, under the offscreen platform: one priced ($36/h in its config), one
// unpriced (no price anywhere).
// - one running time: the Runs table, Compare's summary and cost-to-reach, and Costs give the runs
//   layer's figure under one name ("Running time"), and $/h x running time = the cost shown;
// - training time (first to last step) is its own column, not the running time;
// - an unpriced run reads "unpriced" in Costs (spend, budgets), Compare (cost, cost per M tokens,
//   cost to reach a loss), never $0.00, and the Dollars axis leaves it out with a note saying so;
// - money has the CLI's digits ("$0.0053"), device-hours their unit;
// - no clipped columns: Compare's last summary column keeps its width, and a long status in the
//   Runs table leaves Created on screen. The pages are saved as PNGs to look at.
#include <QComboBox>
#include <QHeaderView>
#include <QSettings>
#include <QStandardPaths>
#include <QTableView>
#include <QTemporaryDir>
#include <QtTest>

#include <algorithm>
#include <cmath>

#include "db/costs.h"
#include "db/database.h"
#include "db/queries.h"
#include "db/run_records.h"
#include "db/run_store.h"
#include "db/workspace.h"
#include "engine/config/config_io.h"
#include "runs/figures.h"
#include "runs/run_speed.h"
#include "ui/compare/comparemodels.h"
#include "ui/compare/comparepage.h"
#include "ui/compare/comparequery.h"
#include "ui/compare/runpickermodel.h"
#include "ui/costs/costmodels.h"
#include "ui/costs/costspage.h"
#include "ui/costs/costsquery.h"
#include "ui/plot/compareplot.h"
#include "ui/runs/localruns.h"
#include "ui/runs/servicerun.h"
#include "ui/runs/storerunsmodel.h"
#include "ui/runs/storerunsview.h"
#include "ui/runs/storeservice.h"

using namespace flotilla;
using namespace flotilla::ui;

namespace {

flotilla::RunConfig tiny(const std::string& name, const std::string& extra) {
  return flotilla::parse_config_toml(
      "[run]\nname = \"" + name +
          "\"\nthreads = 1\n[model]\npreset = \"custom\"\nn_layer = 2\nn_head = 2\n"
          "n_embd = 32\nvocab_size = 128\nmax_seq_len = 32\n[data]\nsynthetic_tokens = 30000\n[train]\n"
          "steps = 40\nmicro_batch = 2\nseq_len = 16\n[checkpoint]\nevery = 1000000\n" +
          extra,
      "test");
}

QString q(const std::string& s) { return QString::fromStdString(s); }

int rowOf(const QAbstractItemModel& m, const QString& name, int column = 0) {
  for (int r = 0; r < m.rowCount(); ++r)
    if (m.index(r, column).data().toString() == name) return r;
  return -1;
}

void save(QWidget* w, const QString& name) {
  const QString dir =
      qEnvironmentVariable("FLOTILLA_SCREENSHOT_DIR", QStringLiteral(FLOTILLA_SCREENSHOT_DIR));
  const QString path = dir + QLatin1Char('/') + name + QStringLiteral(".png");
  QVERIFY2(w->grab().save(path), qPrintable(path));
  qInfo("screenshot: %s", qPrintable(path));
}

}  // namespace

class TestRunFiguresE2e : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase();
  void oneRunningTimeEverywhere();
  void unpricedIsNeverZeroDollars();
  void compareLeavesAnUnpricedRunOffTheDollarsAxis();
  void noColumnIsClipped();
  void theCatalogueSaysHowOldItIs();

 private:
  QTemporaryDir m_tmp{QStringLiteral(FLOTILLA_TEST_TMP "/run_figures-XXXXXX")};
  QString m_db;
  qint64 m_paid = 0, m_free = 0;
  db::RunSummary m_s, m_f;  // the runs layer's figures of each
};

void TestRunFiguresE2e::initTestCase() {
  QVERIFY(m_tmp.isValid());
  QStandardPaths::setTestModeEnabled(true);
  QSettings::setPath(QSettings::NativeFormat, QSettings::UserScope, m_tmp.filePath(QStringLiteral("config")));
  qputenv("OMP_NUM_THREADS", "1");
  db::ensure_workspace_dir(m_tmp.path().toStdString());
  m_db = q(db::workspace_database_path(m_tmp.path().toStdString()));
  StoreService store(m_db, nullptr, 200);
  LocalRuns runs(m_tmp.path());
  runs.setStore(&store);
  runs.setWorkerPath(QStringLiteral(FLOTILLA_WORKER_PATH));
  for (const auto& [name, extra] :
       {std::pair<std::string, std::string>{"paid", "[budget]\nusd_per_hour = 36.0\n"},
        std::pair<std::string, std::string>{"free", ""}}) {
    QString error;
    ServiceRun* run = runs.startConfig(tiny(name, extra), 1, &error);
    QVERIFY2(run, qPrintable(error));
    QSignalSpy finished(run, &ServiceRun::finished);
    QVERIFY(finished.count() || finished.wait(120000));
    QVERIFY2(run->state() == RunHandle::State::Completed, qPrintable(run->stateText()));
    (name == "paid" ? m_paid : m_free) = run->storeId();
    // The end reaches the store through its writer thread: the figures are final once it is there.
    const qint64 id = run->storeId();
    QTRY_VERIFY_WITH_TIMEOUT(db::get_run(db::Database(m_db.toStdString()), id).status == db::RunStatus::kCompleted,
                             10000);
  }
  const db::Database d(m_db.toStdString());
  m_s = runs::run_summary(d, m_paid);
  m_f = runs::run_summary(d, m_free);
  qInfo("paid: running %.3f s, training %.3f s, $%.6f; free: running %.3f s", m_s.running_s, m_s.training_s,
        m_s.cost_usd.value_or(-1), m_f.running_s);
  for (const db::Accrual& a : db::run_accruals(d, m_paid))
    qInfo("paid's cost interval: %s from %.6f to %.6f for %.6f s at $%.2f/h (boot %.6f to %.6f)", a.status.c_str(),
          a.start, a.end.value_or(0), a.seconds(0), a.usd_per_hour, a.start_boot.value_or(0), a.end_boot.value_or(0));
  for (const auto& e : db::list_events(d, m_paid, 50)) qInfo("paid's event: %.6f %s", e.time, e.message.c_str());
}

void TestRunFiguresE2e::oneRunningTimeEverywhere() {
  // The runs layer: $/h x running time is the cost; training time is shorter (no start-up).
  QVERIFY(m_s.cost_usd.has_value());
  QVERIFY2(std::abs(*m_s.cost_usd - 36.0 * m_s.running_s / 3600.0) < 1e-9,
           qPrintable(QString::number(*m_s.cost_usd)));
  QVERIFY(m_s.training_s > 0 && m_s.training_s < m_s.running_s);
  const QString running = q(runs::clock_text(m_s.running_s)), training = q(runs::clock_text(m_s.training_s));
  const QString cost = q(runs::usd_text(m_s.cost_usd));

  // Runs table.
  StoreService store(m_db, nullptr, 200);
  StoreRunsModel runsModel(&store);
  store.refresh();
  QTRY_VERIFY_WITH_TIMEOUT(runsModel.rowOfId(m_paid) >= 0, 10000);
  const int row = runsModel.rowOfId(m_paid);
  QCOMPARE(runsModel.headerData(StoreRunsModel::Elapsed, Qt::Horizontal).toString(),
           QStringLiteral("Running time"));
  QCOMPARE(runsModel.index(row, StoreRunsModel::Elapsed).data().toString(), running);
  QCOMPARE(runsModel.index(row, StoreRunsModel::Cost).data().toString(), cost);

  // Compare: summary and cost to reach a loss.
  CompareRequest req;
  req.databasePath = m_db;
  req.runIds = {m_paid, m_free};
  req.targetLoss = m_s.best_loss.value_or(0) + 0.5;
  const CompareResult r = loadComparison(req);
  SummaryModel summary;
  summary.setResult(r);
  QCOMPARE(summary.headerData(SummaryModel::RunningTime, Qt::Horizontal).toString(),
           QStringLiteral("Running time"));
  QCOMPARE(summary.headerData(SummaryModel::TrainingTime, Qt::Horizontal).toString(),
           QStringLiteral("Training time"));
  QCOMPARE(summary.index(0, SummaryModel::RunningTime).data().toString(), running);
  QCOMPARE(summary.index(0, SummaryModel::TrainingTime).data().toString(), training);
  QCOMPARE(summary.index(0, SummaryModel::Cost).data().toString(), cost);
  QVERIFY(summary.index(0, SummaryModel::GpuHours).data().toString().endsWith(QStringLiteral(" CPU-h")));
  if (m_s.mfu) QCOMPARE(summary.index(0, SummaryModel::Mfu).data().toString(), q(runs::mfu_text(*m_s.mfu)));
  const TargetHit& hit = r.hits[0];
  QVERIFY(hit.reached && hit.usd.has_value());
  QVERIFY2(std::abs(*hit.usd - 36.0 * hit.runningSeconds / 3600.0) < 1e-9,
           "cost to reach = $/h x running time");
  TargetModel target;
  target.setResult(r);
  QCOMPARE(target.headerData(TargetModel::RunningTime, Qt::Horizontal).toString(),
           QStringLiteral("Running time"));
  QCOMPARE(target.index(0, TargetModel::RunningTime).data().toString(),
           q(runs::clock_text(hit.runningSeconds)));

  // Costs by run.
  const CostsResult costs = loadCosts(m_db);
  CostLinesModel byRun(QStringLiteral("Run"));
  byRun.setLines(costs.byRun);
  const int line = rowOf(byRun, QStringLiteral("paid"));
  QVERIFY(line >= 0);
  QCOMPARE(byRun.headerData(CostLinesModel::Hours, Qt::Horizontal).toString(),
           QStringLiteral("Running time"));
  QCOMPARE(byRun.index(line, CostLinesModel::Hours).data().toString(), running);
  QCOMPARE(byRun.index(line, CostLinesModel::Usd).data().toString(), cost);
}

void TestRunFiguresE2e::unpricedIsNeverZeroDollars() {
  QVERIFY(!m_f.cost_usd && !m_f.usd_per_million_tokens);
  const CostsResult costs = loadCosts(m_db);
  CostLinesModel byRun(QStringLiteral("Run"));
  byRun.setLines(costs.byRun);
  const int line = rowOf(byRun, QStringLiteral("free"));
  QVERIFY(line >= 0);
  QCOMPARE(byRun.index(line, CostLinesModel::Usd).data().toString(), QStringLiteral("unpriced"));
  BudgetModel budgets;
  budgets.setBudgets(costs.budgets);
  const int b = rowOf(budgets, QStringLiteral("free"));
  QVERIFY(b >= 0);
  QCOMPARE(budgets.index(b, BudgetModel::Spent).data().toString(), QStringLiteral("unpriced"));

  CompareRequest req;
  req.databasePath = m_db;
  req.runIds = {m_paid, m_free};
  req.targetLoss = m_f.best_loss.value_or(0) + 0.5;
  const CompareResult r = loadComparison(req);
  SummaryModel summary;
  summary.setResult(r);
  QCOMPARE(summary.index(1, SummaryModel::Cost).data().toString(), QStringLiteral("unpriced"));
  QCOMPARE(summary.index(1, SummaryModel::CostPerMTokens).data().toString(), QStringLiteral("unpriced"));
  TargetModel target;
  target.setResult(r);
  QVERIFY(r.hits[1].reached);
  QCOMPARE(target.index(1, TargetModel::Cost).data().toString(), QStringLiteral("unpriced"));

  // The page's total counts the unpriced run as such.
  CostsPage page(m_db);
  page.resize(1280, 800);
  page.show();
  QTRY_VERIFY_WITH_TIMEOUT(!page.busy() && page.totalText().contains(QStringLiteral("unpriced")), 10000);
  QVERIFY2(page.totalText().contains(q(runs::usd_text(m_s.cost_usd))), qPrintable(page.totalText()));
  QVERIFY(!page.totalText().contains(QStringLiteral("(s)")));
  save(&page, QStringLiteral("figures-costs"));
}

void TestRunFiguresE2e::compareLeavesAnUnpricedRunOffTheDollarsAxis() {
  ComparePage page(m_db);
  page.resize(1280, 800);
  page.show();
  QTRY_VERIFY_WITH_TIMEOUT(page.runModel()->rowCount() == 2 && !page.busy(), 10000);
  page.runModel()->setChecked(m_paid, true);
  page.runModel()->setChecked(m_free, true);
  QTRY_VERIFY_WITH_TIMEOUT(!page.busy() && page.plot()->curveCount() == 2, 10000);
  QVERIFY(page.axisNote().isEmpty());
  page.xAxisBox()->setCurrentIndex(page.xAxisBox()->findData(static_cast<int>(db::XAxis::kDollars)));
  QTRY_VERIFY_WITH_TIMEOUT(!page.busy() && page.plot()->curveCount() == 1, 10000);
  QVERIFY2(page.axisNote().contains(QStringLiteral("free")) &&
               page.axisNote().contains(QStringLiteral("unpriced")),
           qPrintable(page.axisNote()));
  save(&page, QStringLiteral("figures-compare-dollars"));
}

void TestRunFiguresE2e::noColumnIsClipped() {
  // Compare at a small size: the summary's last column (Cost/M tok) keeps the width of its text.
  ComparePage compare(m_db);
  compare.resize(1024, 700);
  compare.show();
  QTRY_VERIFY_WITH_TIMEOUT(compare.runModel()->rowCount() == 2 && !compare.busy(), 10000);
  compare.runModel()->setChecked(m_paid, true);
  compare.runModel()->setChecked(m_free, true);
  QTRY_VERIFY_WITH_TIMEOUT(!compare.busy() && compare.summaryModel()->rowCount() == 2, 10000);
  auto* table = compare.findChild<QTableView*>(QStringLiteral("compareSummary"));
  QVERIFY(table);
  QTest::qWait(50);
  const int last = SummaryModel::CostPerMTokens;
  int wanted = table->horizontalHeader()->sectionSizeHint(last);
  for (int r = 0; r < compare.summaryModel()->rowCount(); ++r)
    wanted = std::max(wanted, table->fontMetrics().horizontalAdvance(
                                  compare.summaryModel()->index(r, last).data().toString()));
  QVERIFY2(table->horizontalHeader()->sectionSize(last) >= wanted,
           qPrintable(QStringLiteral("%1 < %2").arg(table->horizontalHeader()->sectionSize(last)).arg(wanted)));
  save(&compare, QStringLiteral("figures-compare-small"));

  // Runs: a long status ("stopped (budget reached: ...)") and a long note leave Created on screen;
  // a run that arrives after the first rows still gets its whole name (no "long-wa…").
  StoreService store(m_db, nullptr, 200);
  LocalRuns runs(m_tmp.filePath(QStringLiteral("view")));
  StoreRunsView view(&store, &runs);
  view.resize(1200, 800);  // the review's 1440-wide window less the sidebar
  view.show();
  store.refresh();
  QTRY_VERIFY_WITH_TIMEOUT(view.model()->rowCount() == 2, 10000);
  QTest::qWait(100);
  {
    db::Database d(m_db.toStdString());
    db::NewRun nr;
    nr.name = "budget-llama";
    const int64_t id = db::create_run(d, nr);
    db::set_status(d, id, db::RunStatus::kRunning);
    db::set_status(d, id, db::RunStatus::kStopped, 0, "budget", 10, "budget reached: $0.1512 of $0.15");
    db::set_notes(d, id, "llama-tiny at $36/h with a $0.15 cap, to see the warning and then the stop with a checkpoint");
  }
  store.refresh();
  QTRY_VERIFY_WITH_TIMEOUT(view.model()->rowCount() == 3, 10000);
  QTest::qWait(100);
  const int nameWidth = view.table()->fontMetrics().horizontalAdvance(QStringLiteral("budget-llama"));
  QVERIFY2(view.table()->horizontalHeader()->sectionSize(StoreRunsModel::Name) >= nameWidth,
           qPrintable(QStringLiteral("Name is %1 px for a %2 px name")
                          .arg(view.table()->horizontalHeader()->sectionSize(StoreRunsModel::Name))
                          .arg(nameWidth)));
  QHeaderView* header = view.table()->horizontalHeader();
  const int createdRight =
      header->sectionViewportPosition(StoreRunsModel::Created) + header->sectionSize(StoreRunsModel::Created);
  QVERIFY2(header->sectionViewportPosition(StoreRunsModel::Created) >= 0 && createdRight <= view.table()->viewport()->width(),
           qPrintable(QStringLiteral("Created starts at %1 of %2 (ends at %3)")
                          .arg(header->sectionViewportPosition(StoreRunsModel::Created))
                          .arg(view.table()->viewport()->width())
                          .arg(createdRight)));
  save(&view, QStringLiteral("figures-runs"));
}

void TestRunFiguresE2e::theCatalogueSaysHowOldItIs() {
  db::PriceEntry listed;
  listed.as_of = "2024-06";
  db::PriceEntry edited = listed;
  edited.as_of = "2020-01";
  edited.user_edited = true;  // the user's own: not the list's age
  const QString text = CostsPage::pricingAgeText({listed, edited}, QDate(2026, 12, 6));
  QVERIFY2(text.contains(QStringLiteral("as of 2024-06")) &&
               text.contains(QStringLiteral("about 2 years old")) &&
               text.contains(QStringLiteral("prices change")) &&
               text.contains(QStringLiteral("flotilla pricing set")),
           qPrintable(text));
  // Resetting with nothing edited says so in words ("0 entry(ies)" before).
  CostsPage page(m_db);
  page.show();
  QTRY_VERIFY_WITH_TIMEOUT(!page.busy(), 10000);
  QVERIFY2(page.pricingAgeText().contains(QStringLiteral("List prices as of")),
           qPrintable(page.pricingAgeText()));
  QSignalSpy wrote(&page, &CostsPage::writeFinished);
  page.resetPrices();
  QTRY_COMPARE_WITH_TIMEOUT(wrote.count(), 1, 10000);
  QCOMPARE(wrote.at(0).at(1).toString(),
           QStringLiteral("No entry was edited: every price is already the list price."));
}

QTEST_MAIN(TestRunFiguresE2e)
#include "test_run_figures_e2e.moc"
