// Compare by quality (issue 35) over a real store: two runs on the $8/h node of store_workspace.h,
// evaluated every 50 steps (scores stored through runs::store_eval, as "Evaluate…" stores them).
// "wide-lr" reaches acc_norm 0.4 at step 150, "baseline" at step 250: the page lists the task
// scores as metrics, plots acc_norm against dollars (a marker per evaluation, x = the spend at each
// evaluated step), and its "Cost to reach a score" table gives each run's first step at or above
// the target with the dollars spent by then (wide-lr the cheaper). Switching the score to bits per
// byte measures downward. Saves the page as compare-quality.png in the screenshot folder.
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QLabel>
#include <QSettings>
#include <QSignalSpy>
#include <QStandardPaths>
#include <QTabWidget>
#include <QTemporaryDir>
#include <QtTest>

#include "runs/quality.h"
#include "store_workspace.h"
#include "ui/compare/comparemodels.h"
#include "ui/compare/comparepage.h"
#include "ui/compare/comparequery.h"
#include "ui/compare/runpickermodel.h"
#include "ui/plot/compareplot.h"

using namespace flotilla;
using namespace flotilla::ui;

class TestCompareQuality : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase();
  void costToReachAScore();
  void pagePlotsScoresByDollars();

 private:
  QTemporaryDir m_tmp;
  QString m_db;
  double m_now = 0;
  std::vector<int64_t> m_ids;
};

namespace {

// acc_norm at `step` (k = step / 50): baseline 0.26 + 0.03 k (0.41 at 250), wide-lr 0.25 + 0.055 k
// (0.415 at 150); bits per byte is 2 - acc_norm.
double accNorm(int run, int step) {
  const int k = step / 50;
  return run == 0 ? 0.26 + 0.03 * k : 0.25 + 0.055 * k;
}

}  // namespace

void TestCompareQuality::initTestCase() {
  QStandardPaths::setTestModeEnabled(true);
  QSettings::setPath(QSettings::NativeFormat, QSettings::UserScope, m_tmp.filePath(QStringLiteral("config")));
  m_db = m_tmp.filePath(QStringLiteral("flotilla.db"));
  m_now = db::now_seconds();
  const auto specs = store_workspace::defaultRuns();
  m_ids = store_workspace::build(m_db.toStdString(), m_now, {specs[0], specs[1]});
  db::Database d(m_db.toStdString());
  for (int run = 0; run < 2; ++run) {
    for (int step = 50; step <= 400; step += 50) {
      runs::EvalOutcome o;
      o.task = "arc-mini";
      o.kind = "multiple_choice";
      o.step = step;
      const double a = accNorm(run, step);
      o.scores = {
          {"acc", a - 0.02}, {"acc_norm", a}, {"acc_stderr", 0.03}, {"acc_norm_stderr", 0.03}, {"n", 200}};
      runs::store_eval(d, m_ids[static_cast<size_t>(run)], step, o);
      runs::EvalOutcome w;
      w.task = "wiki";
      w.kind = "perplexity";
      w.scores = {{"bits_per_byte", 2.0 - a}, {"n", 12}};
      runs::store_eval(d, m_ids[static_cast<size_t>(run)], step, w);
    }
  }
}

void TestCompareQuality::costToReachAScore() {
  QVERIFY(accNorm(0, 200) < 0.4 && accNorm(0, 250) >= 0.4);
  QVERIFY(accNorm(1, 100) < 0.4 && accNorm(1, 150) >= 0.4);
  CompareRequest req;
  req.databasePath = m_db;
  req.runIds = {m_ids[0], m_ids[1]};
  req.metric = "task/arc-mini/acc_norm";
  req.x = db::XAxis::kDollars;
  req.targetScore = 0.4;
  req.now = m_now;
  const CompareResult r = loadComparison(req);
  // The y metric is the score measured; the scores a target can be set on leave out stderr and n.
  QCOMPARE(r.scoreMetric, std::string("task/arc-mini/acc_norm"));
  QVERIFY(r.scoreHigherIsBetter);
  QCOMPARE(r.scoreMetrics, (std::vector<std::string>{"task/arc-mini/acc", "task/arc-mini/acc_norm",
                                                     "task/wiki/bits_per_byte"}));
  QCOMPARE(r.scoreHits.size(), size_t(2));
  const TargetHit& base = r.scoreHits[0];
  const TargetHit& wide = r.scoreHits[1];
  QVERIFY(base.reached && wide.reached);
  QCOMPARE(base.step, int64_t(250));
  QCOMPARE(wide.step, int64_t(150));
  // One step every 2 s from the accrual's start, $8/h for the 8-GPU node.
  QVERIFY(base.usd && wide.usd);
  QVERIFY(std::abs(*base.usd - 250 * 2.0 * 8 / 3600) < 1e-6);
  QVERIFY(std::abs(*wide.usd - 150 * 2.0 * 8 / 3600) < 1e-6);
  QVERIFY(*wide.usd < *base.usd);
  // The scores on the Dollars axis: one point per evaluation, x = the spend at its step.
  QCOMPARE(r.series.size(), size_t(2));
  QCOMPARE(r.series[1].points.size(), size_t(8));
  QVERIFY(std::abs(r.series[1].points[2].x - *wide.usd) < 1e-6);
  QVERIFY(std::abs(r.series[1].points[2].last - accNorm(1, 150)) < 1e-12);

  // Against tokens and hours too: a point per evaluation, at the step's tokens (65536 a step here).
  for (auto x : {db::XAxis::kTokens, db::XAxis::kWallTime, db::XAxis::kGpuHours, db::XAxis::kStep}) {
    CompareRequest byX = req;
    byX.x = x;
    const CompareResult s = loadComparison(byX);
    QCOMPARE(s.series.size(), size_t(2));
    QCOMPARE(s.series[1].points.size(), size_t(8));
    if (x == db::XAxis::kTokens) QCOMPARE(s.series[1].points[2].x, 150 * 65536.0);
    if (x == db::XAxis::kStep) QCOMPARE(s.series[1].points[2].step, int64_t(150));
  }

  // Bits per byte: reached downward (2 - acc_norm <= 1.6 where acc_norm >= 0.4).
  req.scoreMetric = "task/wiki/bits_per_byte";
  req.targetScore = 1.6;
  const CompareResult b = loadComparison(req);
  QVERIFY(!b.scoreHigherIsBetter);
  QCOMPARE(b.scoreHits[0].step, int64_t(250));
  QCOMPARE(b.scoreHits[1].step, int64_t(150));
  // Out of reach.
  req.scoreMetric = "task/arc-mini/acc_norm";
  req.targetScore = 0.99;
  QVERIFY(!loadComparison(req).scoreHits[0].reached);

  TargetModel model(nullptr, TargetModel::Of::Score);
  model.setResult(r);
  QCOMPARE(model.rowCount(), 2);
  QCOMPARE(model.headerData(TargetModel::Loss, Qt::Horizontal).toString(), QStringLiteral("Score there"));
  QCOMPARE(model.index(1, TargetModel::Step).data().toLongLong(), 150);
  QCOMPARE(model.index(1, TargetModel::Cost).data().toString(), QStringLiteral("$0.6667"));
}

void TestCompareQuality::pagePlotsScoresByDollars() {
  ComparePage page(m_db);
  page.resize(1280, 860);
  page.show();
  QSignalSpy runs(&page, &ComparePage::runsLoaded);
  page.refresh();
  QVERIFY(runs.wait(10000));
  page.runModel()->setChecked(m_ids[0], true);
  page.runModel()->setChecked(m_ids[1], true);
  QTRY_VERIFY_WITH_TIMEOUT(!page.busy() && page.plot()->curveCount() == 2, 10000);
  // Task scores are metrics like any other: on the list, plotted against dollars.
  const int at = page.metricBox()->findText(QStringLiteral("task/arc-mini/acc_norm"));
  QVERIFY(at >= 0);
  page.metricBox()->setCurrentIndex(at);
  page.xAxisBox()->setCurrentIndex(page.xAxisBox()->findData(static_cast<int>(db::XAxis::kDollars)));
  page.targetScoreBox()->setValue(0.4);
  // The page lists the checked runs in its own order: rows are found by run.
  const auto hitOf = [&page](int64_t id) -> const TargetHit* {
    for (const auto& h : page.result().scoreHits)
      if (h.runId == id) return &h;
    return nullptr;
  };
  const auto rowOf = [&page](const QString& name) {
    for (int r = 0; r < page.scoreTargetModel()->rowCount(); ++r)
      if (page.scoreTargetModel()->index(r, TargetModel::Run).data().toString() == name) return r;
    return -1;
  };
  QTRY_VERIFY_WITH_TIMEOUT(
      !page.busy() && page.result().series.size() == 2 && hitOf(m_ids[1]) && hitOf(m_ids[1])->step == 150,
      10000);
  QCOMPARE(page.plot()->pointCount(0), 8);  // one point per evaluation
  QCOMPARE(page.plot()->target(), std::optional<double>(0.4));  // the target drawn
  QCOMPARE(page.plot()->pointCount(1), 8);
  QCOMPARE(page.scoreMetricBox()->currentText(), QStringLiteral("task/arc-mini/acc_norm"));
  QCOMPARE(page.scoreMetricBox()->count(), 3);
  QVERIFY(page.scoreDirectionLabel()->text().contains(QStringLiteral("at or above")));
  QCOMPARE(page.scoreTargetModel()->rowCount(), 2);
  QCOMPARE(page.scoreTargetModel()
               ->index(rowOf(QStringLiteral("baseline")), TargetModel::Step)
               .data()
               .toLongLong(),
           250);
  QCOMPARE(
      page.scoreTargetModel()->index(rowOf(QStringLiteral("wide-lr")), TargetModel::Cost).data().toString(),
      QStringLiteral("$0.6667"));
  QCOMPARE(
      page.scoreTargetModel()->index(rowOf(QStringLiteral("baseline")), TargetModel::Cost).data().toString(),
      QStringLiteral("$1.11"));
  // The loss table stays beside it.
  QCOMPARE(page.targetModel()->rowCount(), 2);

  // The screenshot for the notes: the score against dollars, the cost-to-reach-a-score tab open.
  if (auto* tabs = page.findChild<QTabWidget*>(QStringLiteral("compareTabs"))) {
    for (int i = 0; i < tabs->count(); ++i)
      if (tabs->tabText(i) == QStringLiteral("Cost to reach a score")) tabs->setCurrentIndex(i);
  }
  QTest::qWait(200);
  const QString path = QStringLiteral(FLOTILLA_SCREENSHOT_DIR) + QStringLiteral("/compare-quality.png");
  QVERIFY(page.grab().toImage().save(path));
  qInfo("screenshot: %s", qPrintable(path));

  // Choosing bits per byte measures downward.
  page.scoreMetricBox()->setCurrentIndex(
      page.scoreMetricBox()->findText(QStringLiteral("task/wiki/bits_per_byte")));
  page.targetScoreBox()->setValue(1.6);
  QTRY_VERIFY_WITH_TIMEOUT(!page.busy() && page.result().scoreMetric == "task/wiki/bits_per_byte" &&
                               hitOf(m_ids[0]) && hitOf(m_ids[0])->step == 250,
                           10000);
  QVERIFY(page.scoreDirectionLabel()->text().contains(QStringLiteral("at or below")));
  QVERIFY(!page.plot()->target());  // the plot shows acc_norm, the target is on bits per byte
}

QTEST_MAIN(TestCompareQuality)
#include "test_compare_quality.moc"
