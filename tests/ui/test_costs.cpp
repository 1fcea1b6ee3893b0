// The Costs page over a real store: spend by run, node and day; the pricing catalogue editor
// (edit, add, delete, reset to list prices) and budgets written back through background tasks;
// every model passes QAbstractItemModelTester.
#include <QAbstractItemModelTester>
#include <QItemSelectionModel>
#include <QSettings>
#include <QSignalSpy>
#include <QStandardPaths>
#include <QTableView>
#include <QTemporaryDir>
#include <QtTest>

#include <cmath>

#include "db/costs.h"
#include "db/run_store.h"
#include "db/sql.h"
#include "store_workspace.h"
#include "ui/costs/costmodels.h"
#include "ui/costs/costspage.h"
#include "ui/costs/costsquery.h"
#include "ui/plot/costplot.h"

using namespace flotilla;
using namespace flotilla::ui;

class TestCosts : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase();
  void spendAndBudgetsFromTheStore();
  void pageEditsCatalogueAndBudgets();

 private:
  int rowOf(PricingModel* m, const QString& provider, const QString& item) const;
  QTemporaryDir m_tmp;
  QString m_db;
  double m_now = 0;
  std::vector<int64_t> m_ids;
};

void TestCosts::initTestCase() {
  QStandardPaths::setTestModeEnabled(true);
  QSettings::setPath(QSettings::NativeFormat, QSettings::UserScope, m_tmp.filePath(QStringLiteral("config")));
  m_db = m_tmp.filePath(QStringLiteral("flotilla.db"));
  m_now = db::now_seconds();
  m_ids = store_workspace::build(m_db.toStdString(), m_now);
}

int TestCosts::rowOf(PricingModel* m, const QString& provider, const QString& item) const {
  for (int r = 0; r < m->rowCount(); ++r)
    if (m->index(r, PricingModel::Provider).data().toString() == provider &&
        m->index(r, PricingModel::Item).data().toString() == item)
      return r;
  return -1;
}

void TestCosts::spendAndBudgetsFromTheStore() {
  const CostsResult r = loadCosts(m_db, m_now);
  // 400 + 400 + 300 steps of 2 s, and the running run's 300 s so far, all at $8/h.
  const double expectTotal = (800 + 800 + 600 + 300) * 8.0 / 3600.0;
  QVERIFY2(std::abs(r.totalUsd - expectTotal) < 1e-6, qPrintable(QString::number(r.totalUsd)));
  QCOMPARE(r.byRun.size(), size_t(4));
  QCOMPARE(r.byNode.size(), size_t(1));
  QVERIFY(r.byDay.size() >= 3);  // runs started 3, 2 and 1 days ago, and today
  QVERIFY(r.prices.size() >= 10);
  CostLinesModel byRun(QStringLiteral("Run")), byDay(QStringLiteral("Day"));
  QAbstractItemModelTester t1(&byRun, QAbstractItemModelTester::FailureReportingMode::QtTest);
  QAbstractItemModelTester t2(&byDay, QAbstractItemModelTester::FailureReportingMode::QtTest);
  byRun.setLines(r.byRun);
  byDay.setLines(r.byDay);
  QCOMPARE(byRun.rowCount(), 4);
  QVERIFY(byRun.index(0, CostLinesModel::Usd).data().toString().startsWith(QLatin1Char('$')));

  BudgetModel budgets;
  QAbstractItemModelTester t3(&budgets, QAbstractItemModelTester::FailureReportingMode::QtTest);
  budgets.setBudgets(r.budgets);
  QCOMPARE(budgets.rowCount(), 4);
  // The running run: 150 of 600 planned steps done, so the projection is 4× its spend.
  const auto live = std::find_if(r.budgets.begin(), r.budgets.end(), [](const BudgetLine& b) { return b.name == "live-tuning"; });
  QVERIFY(live != r.budgets.end());
  QVERIFY(std::abs(live->projectedUsd - 4 * live->spentUsd) < 1e-9);
  QVERIFY(live->spentUsd > 0.6 && live->spentUsd < 0.7);
  QSignalSpy edited(&budgets, &BudgetModel::budgetEdited);
  const int row = static_cast<int>(live - r.budgets.begin());
  QVERIFY(budgets.setData(budgets.index(row, BudgetModel::Cap), QStringLiteral("$2.00")));
  QVERIFY(budgets.setData(budgets.index(row, BudgetModel::WarnAt), QStringLiteral("50%")));
  QVERIFY(!budgets.setData(budgets.index(row, BudgetModel::WarnAt), QStringLiteral("150")));
  QVERIFY(!budgets.setData(budgets.index(row, BudgetModel::Cap), QStringLiteral("lots")));
  QCOMPARE(edited.count(), 2);
  QCOMPARE(edited.last().at(2).toDouble(), 0.5);
  // Projected $2.67 > cap $2: shown in red.
  QVERIFY(budgets.index(row, BudgetModel::Projected).data(Qt::ForegroundRole).isValid());

  PricingModel pricing;
  QAbstractItemModelTester t4(&pricing, QAbstractItemModelTester::FailureReportingMode::QtTest);
  pricing.setPrices(r.prices);
  QSignalSpy priceEdited(&pricing, &PricingModel::priceEdited);
  QVERIFY(pricing.setData(pricing.index(0, PricingModel::Spot), 1.25));
  QVERIFY(!pricing.setData(pricing.index(0, PricingModel::OnDemand), -3));
  QVERIFY(!(pricing.flags(pricing.index(0, PricingModel::Provider)) & Qt::ItemIsEditable));
  QCOMPARE(priceEdited.count(), 1);
  QCOMPARE(*priceEdited.first().at(0).value<db::PriceEntry>().spot_usd_per_hour, 1.25);
}

void TestCosts::pageEditsCatalogueAndBudgets() {
  CostsPage page(m_db);
  page.resize(1200, 800);
  QSignalSpy loaded(&page, &CostsPage::loaded);
  page.reload();
  QVERIFY(loaded.wait(10000));
  QVERIFY2(page.totalText().contains(QStringLiteral("$")), qPrintable(page.totalText()));
  QCOMPARE(page.byRunModel()->rowCount(), 4);
  QVERIFY(page.dayChart()->barCount() >= 3);

  // Edit a list price: written to the store and marked edited.
  PricingModel* pricing = page.pricingModel();
  const int p5 = rowOf(pricing, QStringLiteral("aws"), QStringLiteral("p5.48xlarge"));
  QVERIFY(p5 >= 0);
  const double listPrice = db::find_price(db::Database(m_db.toStdString()), "aws", "p5.48xlarge")->on_demand_usd_per_hour;
  QSignalSpy wrote(&page, &CostsPage::writeFinished);
  QVERIFY(pricing->setData(pricing->index(p5, PricingModel::OnDemand), 1.5));
  QVERIFY(wrote.wait(10000));
  QVERIFY(wrote.last().at(0).toBool());
  {
    const db::Database db(m_db.toStdString());
    const auto p = db::find_price(db, "aws", "p5.48xlarge");
    QCOMPARE(p->on_demand_usd_per_hour, 1.5);
    QVERIFY(p->user_edited);
  }
  // Add a user entry.
  page.addPrice(QStringLiteral("lab"), QStringLiteral("a100-box"), 3.0);
  QVERIFY(wrote.wait(10000));
  QTRY_VERIFY_WITH_TIMEOUT(!page.busy() && rowOf(pricing, QStringLiteral("lab"), QStringLiteral("a100-box")) >= 0, 10000);
  // Reset: the list price comes back, the user entry stays.
  page.resetPrices();
  QVERIFY(wrote.wait(10000));
  QVERIFY2(wrote.last().at(0).toBool(), qPrintable(wrote.last().at(1).toString()));
  QCOMPARE(wrote.last().at(1).toString(), QStringLiteral("Reset 1 edited entry to its list price."));
  {
    const db::Database db(m_db.toStdString());
    const auto p = db::find_price(db, "aws", "p5.48xlarge");
    QCOMPARE(p->on_demand_usd_per_hour, listPrice);
    QVERIFY(!p->user_edited);
    QVERIFY(db::find_price(db, "lab", "a100-box").has_value());
  }
  // Delete: the user entry goes; a list entry is refused.
  QTRY_VERIFY_WITH_TIMEOUT(!page.busy(), 10000);
  const int lab = rowOf(pricing, QStringLiteral("lab"), QStringLiteral("a100-box"));
  QVERIFY(lab >= 0);
  page.pricingView()->selectRow(lab);
  page.deleteSelectedPrice();
  QVERIFY(wrote.wait(10000));
  QVERIFY(wrote.last().at(0).toBool());
  QVERIFY(!db::find_price(db::Database(m_db.toStdString()), "lab", "a100-box").has_value());
  QTRY_VERIFY_WITH_TIMEOUT(!page.busy(), 10000);
  page.pricingView()->selectRow(rowOf(pricing, QStringLiteral("aws"), QStringLiteral("p5.48xlarge")));
  page.deleteSelectedPrice();
  QVERIFY(wrote.wait(10000));
  QVERIFY(!wrote.last().at(0).toBool());
  QVERIFY(wrote.last().at(1).toString().contains(QStringLiteral("list prices stay")));

  // A budget edit reaches the run.
  QTRY_VERIFY_WITH_TIMEOUT(!page.busy(), 10000);
  BudgetModel* budgets = page.budgetModel();
  int row = -1;
  for (int r = 0; r < budgets->rowCount(); ++r)
    if (budgets->line(r).runId == m_ids[0]) row = r;
  QVERIFY(row >= 0);
  QVERIFY(budgets->setData(budgets->index(row, BudgetModel::Cap), 25.0));
  QVERIFY(wrote.wait(10000));
  const db::Run run = db::get_run(db::Database(m_db.toStdString()), m_ids[0]);
  QCOMPARE(run.budget_usd.value_or(0), 25.0);
}

QTEST_MAIN(TestCosts)
#include "test_costs.moc"
