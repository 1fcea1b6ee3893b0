// The Live page's Communication panel (issue 36) on crafted store contents: a dp=2 run across
// node-a and node-b whose measured link carries 12.5 MB/s, with the `comm/` metrics two comm records
// leave (docs/metrics-protocol.md). The panel's table shows exactly runs::comm_report's figures (the
// one truth: bus bandwidth, link, share, hidden), its plot one point per record of each group's share
// and hidden share (comm_series), a comm record that arrives later is shown at the next poll, advice
// is listed with the change to try, and a run without communication keeps the panel hidden. On the
// Live page itself the panel appears for the stored 2-node run and stays hidden for a one-rank run.
#include <QLabel>
#include <QListWidget>
#include <QTableWidget>
#include <QtTest>

#include <cmath>

#include "db/database.h"
#include "db/links.h"
#include "db/metric_sink.h"
#include "db/nodes.h"
#include "db/run_store.h"
#include "runs/comm_advice.h"
#include "runs/comm_efficiency.h"
#include "ui/live/commpanel.h"
#include "ui/live/livepage.h"
#include "ui/plot/chartplot.h"
#include "ui/runs/servicerun.h"

using namespace flotilla;

namespace {

QString scratch(const char* name) {
  const QString dir = QStringLiteral(FLOTILLA_TEST_TMP "/ui_live_comm/") + QLatin1String(name);
  QDir(dir).removeRecursively();
  QDir().mkpath(dir);
  return dir;
}

db::NodeLink link(int64_t from, int64_t to, double bw) {
  db::NodeLink l;
  l.from_node = from;
  l.to_node = to;
  l.bytes_per_s = bw;
  l.latency_s = 1e-4;
  return l;
}

void put(db::Database& d, int64_t run, int64_t step,
         const std::vector<std::pair<std::string, double>>& values) {
  std::vector<db::MetricRow> rows;
  for (const auto& [n, v] : values) rows.push_back({run, n, step, v, 1000.0 + step});
  db::write_tx(d, [&] { db::MetricSink(d).insert(rows); });
}

// One comm record of a dp=2 all-reduce: 12 MB per step taking `ms`, `waitMs` of it blocking.
void dpRecord(db::Database& d, int64_t run, int64_t step, double ms, double waitMs) {
  put(d, run, step,
      {{"comm/step_ms", 1000},
       {"comm/dp/size", 2},
       {"comm/dp/all_reduce/count", 25},
       {"comm/dp/all_reduce/bytes", 12e6},
       {"comm/dp/all_reduce/ms", ms},
       {"comm/dp/all_reduce/wait_ms", waitMs}});
}

struct Store {
  std::string path;
  int64_t dp2 = 0, solo = 0;
};

Store makeStore(const QString& dir) {
  Store s;
  s.path = (dir + QStringLiteral("/flotilla.db")).toStdString();
  db::Database d(s.path);
  const int64_t a = db::ensure_node(d, "node-a", "ssh");
  const int64_t b = db::ensure_node(d, "node-b", "ssh");
  db::NewRun nr;
  nr.name = "dp2";
  nr.config_json = R"({"parallel":{"dp":2,"tp":1,"pp":1}})";
  s.dp2 = db::create_run(d, nr);
  db::attach_node(d, s.dp2, a, 1);
  db::attach_node(d, s.dp2, b, 1);
  nr.name = "solo";
  nr.config_json = R"({"parallel":{"dp":1}})";
  s.solo = db::create_run(d, nr);
  db::attach_node(d, s.solo, a, 1);
  db::LinkMeasurement m;
  m.transport = "gloo/tcp";
  m.measured_at = 900;
  m.links = {link(a, b, 12.5e6), link(b, a, 20e6), link(a, a, 2e9), link(b, b, 2e9)};
  db::store_link_measurement(d, m);
  dpRecord(d, s.dp2, 10, 960, 240);   // busbw 12.5 MB/s: 100% of the link, 75% hidden
  dpRecord(d, s.dp2, 20, 1200, 600);  // busbw 10 MB/s: 80%, 50% hidden
  return s;
}

// The table's cells of row `row`.
QStringList rowCells(const QTableWidget* t, int row) {
  QStringList cells;
  for (int c = 0; c < t->columnCount(); ++c) cells << (t->item(row, c) ? t->item(row, c)->text() : QString());
  return cells;
}

}  // namespace

class TestLiveComm : public QObject {
  Q_OBJECT

 private slots:
  void panelShowsTheReport();
  void livePageShowsPanelForMultiRankRuns();
};

void TestLiveComm::panelShowsTheReport() {
  const QString dir = scratch("panel");
  const Store s = makeStore(dir);
  ui::CommPanel panel;
  panel.resize(1100, 300);
  panel.setDatabasePath(QString::fromStdString(s.path));
  QSignalSpy updated(&panel, &ui::CommPanel::updated);
  panel.follow(s.dp2);
  updated.clear();
  QVERIFY(panel.poll());
  QTRY_VERIFY_WITH_TIMEOUT(updated.count() > 0 && !panel.busy(), 5000);
  QVERIFY(panel.hasData());

  // The figures are comm_report's, formatted: never recomputed.
  const runs::CommReport report = runs::comm_report(db::Database(s.path), s.dp2);
  QCOMPARE(report.groups.size(), size_t(1));
  const runs::GroupEfficiency& g = report.groups[0];
  QTableWidget* t = panel.table();
  QCOMPARE(t->rowCount(), 2);  // the group, then its one op
  QCOMPARE(rowCells(t, 0), (QStringList{"dp (2 ranks)", "all", "12.00", "1200.0",
                                        QString::fromStdString(runs::rate_text(*g.busbw)),
                                        "12.5 MB/s (node-a -> node-b)", "80%", "50%"}));
  QCOMPARE(rowCells(t, 1), (QStringList{"", "all-reduce", "12.00", "1200.0", "10.0 MB/s", "", "80%", ""}));
  QVERIFY(t->item(0, 5)->toolTip().contains(QStringLiteral("newest measurement")));
  QVERIFY2(panel.summaryText().contains(QStringLiteral("step 20")), qPrintable(panel.summaryText()));

  // The plot: one point per comm record, share and hidden in per cent.
  ui::ChartPlot* plot = panel.plot();
  plot->refresh();
  QCOMPARE(plot->drawnPointCount(0), 2);
  QCOMPARE(plot->drawnLastValue(0), 80.0);
  QCOMPARE(plot->drawnLastValue(1), 50.0);
  QVERIFY(!plot->messageVisible());
  QVERIFY(!panel.adviceList()->isVisibleTo(&panel));  // no advice source: no advice section

  // A record that arrives later (the worker keeps writing) is shown at the next poll.
  {
    db::Database d(s.path);
    dpRecord(d, s.dp2, 30, 1500, 1500);  // 8 MB/s: 64%, nothing hidden
  }
  // Advice, from the source the page sets (runs::run_advice in the app).
  panel.setAdviceSource([](const db::Database&, int64_t) {
    runs::Advice a;
    a.rule = "bucket_bdp";
    a.severity = "warning";
    a.text = "dp's all-reduce reaches 64% of the 12.5 MB/s link node-a -> node-b.";
    a.change = "parallel.bucket_mb=100";
    return std::vector<runs::Advice>{a};
  });
  updated.clear();
  QVERIFY(panel.poll());
  QTRY_VERIFY_WITH_TIMEOUT(updated.count() > 0 && !panel.busy(), 5000);
  QVERIFY(panel.summaryText().contains(QStringLiteral("step 30")));
  QCOMPARE(rowCells(t, 0)[6], QStringLiteral("64%"));
  QCOMPARE(rowCells(t, 0)[7], QStringLiteral("0%"));
  plot = panel.plot();
  plot->refresh();
  QCOMPARE(plot->drawnPointCount(0), 3);
  QCOMPARE(plot->drawnLastValue(0), 64.0);
  QVERIFY(panel.adviceList()->isVisibleTo(&panel));
  QCOMPARE(panel.adviceList()->count(), 1);
  QVERIFY(panel.adviceList()->item(0)->text().contains(QStringLiteral("Try: --set parallel.bucket_mb=100")));
  panel.show();
  QVERIFY(QTest::qWaitForWindowExposed(&panel));
  QVERIFY(panel.grab().save(dir + QStringLiteral("/comm-panel.png")));

  // A one-rank run: nothing to show, and why.
  updated.clear();
  panel.follow(s.solo);
  QVERIFY(panel.poll());
  QTRY_VERIFY_WITH_TIMEOUT(updated.count() > 1 && !panel.busy(), 5000);
  QVERIFY(!panel.hasData());
  QCOMPARE(panel.table()->rowCount(), 0);
  QVERIFY2(panel.summaryText().contains(QStringLiteral("one-rank")), qPrintable(panel.summaryText()));
}

void TestLiveComm::livePageShowsPanelForMultiRankRuns() {
  const QString dir = scratch("page");
  const Store s = makeStore(dir);
  const QString path = QString::fromStdString(s.path);
  ui::ServiceRun dp2(QStringLiteral("dp2"), runs::ServiceOptions{});
  dp2.setStoreId(s.dp2);
  dp2.review(ui::RunHandle::State::Completed, path);
  ui::ServiceRun solo(QStringLiteral("solo"), runs::ServiceOptions{});
  solo.setStoreId(s.solo);
  solo.review(ui::RunHandle::State::Completed, path);

  ui::LivePage page;
  page.resize(1400, 1000);
  page.setDatabasePath(path);
  page.show();
  QVERIFY(QTest::qWaitForWindowExposed(&page));
  ui::CommPanel* panel = page.commPanel();
  page.setRun(&solo);
  QTRY_VERIFY_WITH_TIMEOUT(panel->runId() == s.solo && !panel->busy(), 5000);
  QTest::qWait(50);
  QVERIFY(!panel->isVisible());

  page.setRun(&dp2);
  QTRY_VERIFY_WITH_TIMEOUT(panel->isVisible(), 5000);
  QCOMPARE(panel->table()->rowCount(), 2);
  QVERIFY(panel->height() >= 150);
  // The page's advice is runs::run_advice's, one entry each (or the line saying there is none).
  const std::vector<runs::Advice> advice = runs::run_advice(db::Database(s.path), s.dp2);
  QVERIFY(panel->adviceList()->isVisibleTo(panel));
  if (advice.empty()) {
    QCOMPARE(panel->adviceList()->count(), 1);
    QVERIFY(panel->adviceList()->item(0)->text().startsWith(QStringLiteral("No advice")));
  } else {
    QCOMPARE(panel->adviceList()->count(), int(advice.size()));
    for (int i = 0; i < int(advice.size()); ++i)
      QVERIFY(
          panel->adviceList()->item(i)->text().startsWith(QString::fromStdString(advice[size_t(i)].text)));
  }
  page.refresh();
  QVERIFY(page.grab().save(dir + QStringLiteral("/live-comm.png")));

  // Back to the one-rank run: the panel goes away again.
  page.setRun(&solo);
  QTRY_VERIFY_WITH_TIMEOUT(!panel->isVisible(), 5000);
}

QTEST_MAIN(TestLiveComm)
#include "test_live_comm.moc"
