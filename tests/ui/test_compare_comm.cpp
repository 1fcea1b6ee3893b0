// The Compare table's communication columns (issue 36) over crafted store contents: a dp=2 run
// across two nodes whose measured link carries 12.5 MB/s, its comm/ metrics giving a bus bandwidth of
// 10 MB/s (80% of the link) with half of its communication time blocking (50% hidden), beside a
// one-rank run with none. The columns show runs::comm_headline's figures in runs::share_text's words,
// what `flotilla compare` prints; the one-rank run's cells are empty.
#include <QTemporaryDir>
#include <QtTest>

#include "db/database.h"
#include "db/links.h"
#include "db/metric_sink.h"
#include "db/nodes.h"
#include "db/run_store.h"
#include "ui/compare/comparemodels.h"
#include "ui/compare/comparequery.h"

using namespace flotilla;
using namespace flotilla::ui;

class TestCompareComm : public QObject {
  Q_OBJECT

 private slots:
  void columnsShowTheReport();

 private:
  void check();
};

void TestCompareComm::columnsShowTheReport() {
  try {
    check();
  } catch (const std::exception& e) {
    QFAIL(e.what());
  }
}

void TestCompareComm::check() {
  QTemporaryDir tmp;
  const std::string path = tmp.filePath(QStringLiteral("store.db")).toStdString();
  std::vector<int64_t> ids;
  {
    db::Database d(path);
    const int64_t a = db::ensure_node(d, "node-a", "ssh");
    const int64_t b = db::ensure_node(d, "node-b", "ssh");
    db::NewRun nr;
    nr.name = "dp2";
    nr.config_json = R"({"parallel":{"dp":2,"tp":1,"pp":1}})";
    const int64_t dp2 = db::create_run(d, nr);
    db::attach_node(d, dp2, a, 1);
    db::attach_node(d, dp2, b, 1);
    nr.name = "one";
    nr.config_json = R"({"parallel":{"dp":1}})";
    const int64_t one = db::create_run(d, nr);
    std::vector<db::MetricRow> rows;
    for (const auto& [n, v] :
         std::vector<std::pair<std::string, double>>{{"comm/step_ms", 1000},
                                                     {"comm/dp/size", 2},
                                                     {"comm/dp/all_reduce/count", 4},
                                                     {"comm/dp/all_reduce/bytes", 12e6},
                                                     {"comm/dp/all_reduce/ms", 1200},
                                                     {"comm/dp/all_reduce/wait_ms", 600}})
      rows.push_back({dp2, n, 10, v, 1000.0});
    rows.push_back({one, "loss", 10, 3.0, 1000.0});
    db::write_tx(d, [&] { db::MetricSink(d).insert(rows); });
    db::LinkMeasurement m;
    m.transport = "gloo/tcp";
    m.measured_at = 900;
    db::NodeLink ab;
    ab.from_node = a;
    ab.to_node = b;
    ab.bytes_per_s = 12.5e6;
    ab.latency_s = 1e-4;
    db::NodeLink ba = ab;
    ba.from_node = b;
    ba.to_node = a;
    m.links = {ab, ba};
    db::store_link_measurement(d, m);
    ids = {dp2, one};
  }
  CompareRequest req;
  req.databasePath = QString::fromStdString(path);
  req.runIds = ids;
  const CompareResult result = loadComparison(req);
  QCOMPARE(result.comm.size(), size_t(2));
  SummaryModel model;
  model.setResult(result);
  QCOMPARE(model.columnCount(), int(SummaryModel::ColumnCount));
  QCOMPARE(model.headerData(SummaryModel::DpLinkShare, Qt::Horizontal).toString(),
           QStringLiteral("DP link share"));
  QCOMPARE(model.headerData(SummaryModel::CommHidden, Qt::Horizontal).toString(),
           QStringLiteral("Comm hidden"));
  QVERIFY(!model.headerData(SummaryModel::DpLinkShare, Qt::Horizontal, Qt::ToolTipRole).toString().isEmpty());
  // busbw 12e6 x 1 / 1.2 s = 10 MB/s of 12.5 MB/s; 1 - 600 / 1200 hidden.
  QCOMPARE(model.index(0, SummaryModel::DpLinkShare).data().toString(), QStringLiteral("80%"));
  QCOMPARE(model.index(0, SummaryModel::CommHidden).data().toString(), QStringLiteral("50%"));
  QCOMPARE(model.index(1, SummaryModel::DpLinkShare).data().toString(), QString());
  QCOMPARE(model.index(1, SummaryModel::CommHidden).data().toString(), QString());
  // A result without the figures (an older caller) shows nothing rather than failing.
  CompareResult bare = result;
  bare.comm.clear();
  model.setResult(bare);
  QCOMPARE(model.index(0, SummaryModel::CommHidden).data().toString(), QString());
}

QTEST_MAIN(TestCompareComm)
#include "test_compare_comm.moc"
