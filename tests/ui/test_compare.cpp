// The Compare page over a real store: the run picker, summary, config and cost-to-target models
// pass QAbstractItemModelTester; the cost to reach a loss matches the closed form of the fixture's
// curves; aligned series come back for two runs on every x axis; the config diff hides equal keys
// until "show all"; the page fills its plot and tables from a background query; the Sweep list
// (and openGroup) checks exactly the runs a sweep started.
#include <QAbstractItemModelTester>
#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QSettings>
#include <QSignalSpy>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QtTest>

#include <algorithm>
#include <cmath>

#include "db/queue.h"
#include "db/sql.h"
#include "store_workspace.h"
#include "ui/compare/comparemodels.h"
#include "ui/compare/comparepage.h"
#include "ui/compare/comparequery.h"
#include "ui/compare/runpickermodel.h"
#include "ui/plot/compareplot.h"

using namespace flotilla;
using namespace flotilla::ui;

class TestCompare : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase();
  void costToReachMatchesClosedForm();
  void modelsPassTheTester();
  void pageComparesTwoRuns();
  void pageOpensASweep();

 private:
  QTemporaryDir m_tmp;
  QString m_db;
  double m_now = 0;
  std::vector<int64_t> m_ids;
};

void TestCompare::initTestCase() {
  QStandardPaths::setTestModeEnabled(true);
  QSettings::setPath(QSettings::NativeFormat, QSettings::UserScope, m_tmp.filePath(QStringLiteral("config")));
  m_db = m_tmp.filePath(QStringLiteral("flotilla.db"));
  m_now = db::now_seconds();
  m_ids = store_workspace::build(m_db.toStdString(), m_now);
}

void TestCompare::costToReachMatchesClosedForm() {
  CompareRequest req;
  req.databasePath = m_db;
  req.runIds = {m_ids[0], m_ids[1]};
  req.targetLoss = 3.0;
  req.smoothing = 0;  // raw loss
  req.now = m_now;
  const CompareResult r = loadComparison(req);
  QCOMPARE(r.hits.size(), size_t(2));
  const auto specs = store_workspace::defaultRuns();
  for (int i = 0; i < 2; ++i) {
    // First s with 2 + 8 exp(-s/tau) + 0.02 sin(0.7 s) <= 3.
    int expect = 0;
    for (int s = 1; s <= specs[i].steps && !expect; ++s)
      if (store_workspace::lossAt(specs[i], s) + 0.02 * std::sin(s * 0.7) <= 3.0) expect = s;
    const TargetHit& h = r.hits[static_cast<size_t>(i)];
    QVERIFY(h.reached);
    QCOMPARE(h.step, int64_t(expect));
    // Accrual opened at t0, one step every 2 s, $8/h for the whole 8-GPU node.
    const double seconds = expect * store_workspace::kStepSeconds;
    QVERIFY2(h.usd && std::abs(*h.usd - seconds * 8.0 / 3600.0) < 1e-6, qPrintable(QString::number(h.usd.value_or(-1))));
    QVERIFY(std::abs(h.gpuHours - seconds * 8.0 / 3600.0) < 1e-6);
    QVERIFY(std::abs(h.trainingSeconds - (expect - 1) * store_workspace::kStepSeconds) < 1e-6);
    QVERIFY(std::abs(h.runningSeconds - seconds) < 1e-6);  // charged time: $8/h x it is the cost
  }
  QVERIFY(r.hits[1].step < r.hits[0].step);  // the faster-decaying run gets there first
  // Smoothing lags the raw curve: the smoothed series crosses later.
  req.smoothing = 0.9;
  const CompareResult smoothed = loadComparison(req);
  QVERIFY(smoothed.hits[0].step > r.hits[0].step);
  // Unreachable target.
  req.targetLoss = 1.0;
  QVERIFY(!loadComparison(req).hits[0].reached);

  // Config: lr differs, model does not.
  QCOMPARE(r.differences.size(), size_t(1));
  QCOMPARE(QString::fromStdString(r.differences[0].key), QStringLiteral("optimizer.lr"));
  QVERIFY(r.allConfig.size() >= 5);
  // Aligned series on every x axis, increasing x, bounded by min/max.
  for (auto x : {db::XAxis::kStep, db::XAxis::kTokens, db::XAxis::kWallTime, db::XAxis::kGpuHours,
                 db::XAxis::kDollars}) {
    req.x = x;
    req.buckets = 50;
    const CompareResult a = loadComparison(req);
    QCOMPARE(a.series.size(), size_t(2));
    for (const auto& s : a.series) {
      QVERIFY2(s.points.size() >= 40 && s.points.size() <= 50, db::to_string(x));
      for (size_t i = 1; i < s.points.size(); ++i) QVERIFY(s.points[i].x >= s.points[i - 1].x);
      for (const auto& p : s.points) QVERIFY(p.min <= p.last && p.last <= p.max);
    }
  }
}

void TestCompare::modelsPassTheTester() {
  RunPickerModel picker;
  QAbstractItemModelTester t1(&picker, QAbstractItemModelTester::FailureReportingMode::QtTest);
  picker.setRuns(loadRunList({m_db, {}}));
  QCOMPARE(picker.rowCount(), 4);
  QSignalSpy checked(&picker, &RunPickerModel::checkedChanged);
  picker.setChecked(m_ids[0], true);
  picker.setChecked(m_ids[2], true);
  QCOMPARE(checked.count(), 2);
  auto ids = picker.checkedIds();
  QCOMPARE(ids.size(), size_t(2));
  // Checks survive a reload that returns the runs in another order.
  auto reversed = loadRunList({m_db, {}});
  std::reverse(reversed.begin(), reversed.end());
  picker.setRuns(reversed);
  ids = picker.checkedIds();
  std::sort(ids.begin(), ids.end());
  QCOMPARE(ids, (std::vector<int64_t>{m_ids[0], m_ids[2]}));
  QCOMPARE(loadRunList({m_db, QStringLiteral("wide")}).size(), size_t(1));

  CompareRequest req;
  req.databasePath = m_db;
  req.runIds = {m_ids[0], m_ids[1], m_ids[3]};
  req.targetLoss = 3.0;
  req.now = m_now;
  const CompareResult r = loadComparison(req);
  SummaryModel summary;
  ConfigDiffModel config;
  TargetModel target;
  QAbstractItemModelTester t2(&summary, QAbstractItemModelTester::FailureReportingMode::QtTest);
  QAbstractItemModelTester t3(&config, QAbstractItemModelTester::FailureReportingMode::QtTest);
  QAbstractItemModelTester t4(&target, QAbstractItemModelTester::FailureReportingMode::QtTest);
  summary.setResult(r);
  config.setResult(r);
  target.setResult(r);
  QCOMPARE(summary.rowCount(), 3);
  QCOMPARE(summary.index(0, SummaryModel::Run).data().toString(), QStringLiteral("baseline"));
  QCOMPARE(summary.index(0, SummaryModel::Steps).data().toLongLong(), 400);
  // 400 steps × 2 s at $8/h = $1.78
  QCOMPARE(summary.index(0, SummaryModel::Cost).data().toString(), QStringLiteral("$1.78"));
  QCOMPARE(summary.index(2, SummaryModel::Status).data().toString(), QStringLiteral("running"));
  QVERIFY(!summary.index(0, SummaryModel::CostPerMTokens).data().toString().isEmpty());
  // Differing keys only (lr and train.steps), then every key.
  QCOMPARE(config.rowCount(), 2);
  QCOMPARE(config.columnCount(), 4);
  config.setShowAll(true);
  QVERIFY(config.rowCount() >= 5);
  config.setShowAll(false);
  QCOMPARE(config.rowCount(), 2);
  QCOMPARE(target.rowCount(), 3);
  QVERIFY(target.index(0, TargetModel::Step).data().toLongLong() > 0);
  CompareRequest unreachable = req;
  unreachable.targetLoss = 0.5;
  target.setResult(loadComparison(unreachable));
  QCOMPARE(target.index(1, TargetModel::Step).data().toString(), QStringLiteral("not reached"));
}

void TestCompare::pageComparesTwoRuns() {
  ComparePage page(m_db);
  page.resize(1200, 800);
  QSignalSpy runs(&page, &ComparePage::runsLoaded);
  page.refresh();
  QVERIFY(runs.wait(10000));
  QCOMPARE(page.runModel()->rowCount(), 4);
  QSignalSpy ready(&page, &ComparePage::comparisonReady);
  page.runModel()->setChecked(m_ids[0], true);
  page.runModel()->setChecked(m_ids[1], true);
  QTRY_VERIFY_WITH_TIMEOUT(!page.busy() && page.plot()->curveCount() == 2, 10000);
  QVERIFY(page.plot()->pointCount(0) > 100);
  QCOMPARE(page.summaryModel()->rowCount(), 2);
  // The metric list offers what the runs stored.
  QVERIFY(page.metricBox()->findText(QStringLiteral("val_loss")) >= 0);
  // Switching the x axis to dollars re-queries.
  ready.clear();
  page.xAxisBox()->setCurrentIndex(4);
  QTRY_VERIFY_WITH_TIMEOUT(ready.count() >= 1 && !page.busy(), 10000);
  QCOMPARE(page.plot()->curveCount(), 2);
  QVERIFY(!page.result().series[0].points.empty());
  QVERIFY(page.result().series[0].points.back().x < 2.0);  // dollars: a $1.78 run
}

void TestCompare::pageOpensASweep() {
  {
    // A sweep of three points, two of them started (as the scheduler writes them back).
    db::Database d(m_db.toStdString());
    db::Sweep sweep;
    sweep.name = "grp";
    db::add_sweep(d, sweep);
    for (int i = 0; i < 3; ++i) {
      db::NewQueueEntry e;
      e.name = "grp-" + std::to_string(i + 1);
      e.config_toml = "x";
      e.group = "grp";
      const int64_t id = db::add_queue_entry(d, e, m_now);
      if (i < 2) {
        QVERIFY(db::claim_queue_entry(d, id, "t", "local", "", "{}", m_now));
        QVERIFY(db::set_queue_entry_run(d, id, "t", m_ids[static_cast<size_t>(i) + 1], m_now));
      }
    }
  }
  ComparePage page(m_db);
  page.openGroup(QStringLiteral("grp"));  // before the list has loaded: applied when it arrives
  QSignalSpy runs(&page, &ComparePage::runsLoaded);
  page.refresh();
  QVERIFY(runs.wait(10000));
  QTRY_VERIFY_WITH_TIMEOUT(!page.busy(), 10000);
  const auto sorted = [&page] {
    auto ids = page.runModel()->checkedIds();
    std::sort(ids.begin(), ids.end());
    return ids;
  };
  std::vector<int64_t> want{m_ids[1], m_ids[2]};
  std::sort(want.begin(), want.end());
  QCOMPARE(sorted(), want);
  QCOMPARE(page.sweepBox()->currentText(), QStringLiteral("grp"));
  QTRY_VERIFY_WITH_TIMEOUT(page.summaryModel()->rowCount() == 2, 10000);
  // The list: picking the sweep again after other checks restores exactly its runs.
  page.runModel()->setChecked(m_ids[0], true);
  page.sweepBox()->setCurrentIndex(0);
  emit page.sweepBox()->activated(page.sweepBox()->findText(QStringLiteral("grp")));
  QCOMPARE(sorted(), want);
}

QTEST_MAIN(TestCompare)
#include "test_compare.moc"
