// The Nodes page's link matrix (issue 36) from a measurement stored in a real store file and read
// back: the table has the bandwidth and one-way latency of every ordered pair (rows: from, columns:
// to, the diagonal the intra-node figure), an error cell in red with the whole reason as its
// tooltip, a pair not measured marked; the heat map holds the same bandwidths on a logarithmic
// colour scale labelled with the node names (an error cell blank); the slowest link is named above
// them, and the measurement's time, transport and problems below.
#include <QLabel>
#include <QTableWidget>
#include <QtTest>

#include <cmath>

#include "db/database.h"
#include "db/links.h"
#include "db/run_store.h"
#include "ui/nodes/linksview.h"
#include "ui/plot/linkheatmap.h"

using namespace flotilla;

namespace {

db::NodeLink link(int64_t from, int64_t to, double bw, double lat) {
  db::NodeLink l;
  l.from_node = from;
  l.to_node = to;
  l.bytes_per_s = bw;
  l.latency_s = lat;
  return l;
}

}  // namespace

class TestLinksView : public QObject {
  Q_OBJECT

 private slots:
  void matrixFromStore();
};

void TestLinksView::matrixFromStore() {
  const QString dir = QStringLiteral(FLOTILLA_TEST_TMP "/ui_linksview");
  QDir(dir).removeRecursively();
  QDir().mkpath(dir);
  db::Database d((dir + QStringLiteral("/flotilla.db")).toStdString());
  const int64_t a = db::ensure_node(d, "node-a", "ssh");
  const int64_t b = db::ensure_node(d, "node-b", "ssh");
  const int64_t c = db::ensure_node(d, "node-c", "ssh");
  db::LinkMeasurement m;
  m.transport = "gloo/tcp";
  m.measured_at = 1767225600;
  m.seconds = 3.14;
  m.note = "node-c: rank 4 did not join in 10 s.";
  db::NodeLink err;
  err.from_node = a;
  err.to_node = c;
  err.error = "node-c: rank 4 did not join in 10 s";
  m.links = {link(a, b, 12.5e6, 61e-6), link(b, a, 20e6, 60e-6), link(a, a, 2e9, 5e-6),
             link(b, b, 2.5e9, 4e-6), err};
  db::store_link_measurement(d, m);
  const auto stored = db::latest_link_measurement(d);
  QVERIFY(stored);

  runs::SlowestLink slowest{"node-a", "node-b", 12.5e6, 61e-6};
  const ui::LinkMatrix matrix =
      ui::makeLinkMatrix(*stored, {{a, "node-a"}, {b, "node-b"}, {c, "node-c"}}, slowest);
  QCOMPARE(matrix.nodes, (QStringList{"node-a", "node-b", "node-c"}));

  ui::LinksView view;
  view.resize(1000, 400);
  view.setMatrix(matrix);
  QTableWidget* t = view.table();
  QCOMPARE(t->rowCount(), 3);
  QCOMPARE(t->item(0, 1)->text(), QStringLiteral("12.5 MB/s · 61 µs"));
  QCOMPARE(t->item(1, 0)->text(), QStringLiteral("20.0 MB/s · 60 µs"));
  QCOMPARE(t->item(0, 0)->text(), QStringLiteral("2.00 GB/s · 5 µs"));
  QCOMPARE(t->item(0, 2)->text(), QStringLiteral("node-c"));  // the error's first part, red
  QCOMPARE(t->item(0, 2)->foreground().color(), QColor(0xc6, 0x28, 0x28));
  QVERIFY(t->item(0, 2)->toolTip().contains(QStringLiteral("rank 4 did not join in 10 s")));
  QCOMPARE(t->item(2, 0)->text(), QStringLiteral("–"));  // never measured
  QCOMPARE(t->verticalHeaderItem(2)->text(), QStringLiteral("node-c"));

  ui::LinkHeatMap* heat = view.heatMap();
  QVERIFY(heat->logScale());
  QCOMPARE(heat->xLabels(), (QStringList{"node-a", "node-b", "node-c"}));
  QCOMPARE(heat->cellValue(0, 1), 12.5e6);
  QCOMPARE(heat->cellValue(1, 1), 2.5e9);
  QVERIFY(std::isnan(heat->cellValue(0, 2)));  // the error: blank, never a colour
  QVERIFY(std::isnan(heat->cellValue(2, 0)));
  QCOMPARE(heat->scaleLow(), 12.5e6);
  QCOMPARE(heat->scaleHigh(), 2.5e9);

  QCOMPARE(view.slowestText(), QStringLiteral("Slowest link: node-a → node-b, 12.5 MB/s (61 µs latency)"));
  QVERIFY2(view.measuredText().contains(QStringLiteral("over gloo/tcp in 3.1 s")),
           qPrintable(view.measuredText()));
  QCOMPARE(view.noteText(), QStringLiteral("Problems: node-c: rank 4 did not join in 10 s."));

  view.show();
  QVERIFY(QTest::qWaitForWindowExposed(&view));
  QVERIFY(view.grab().save(dir + QStringLiteral("/links-view.png")));

  // Nothing stored: the view says how to measure.
  view.setMatrix({});
  QVERIFY(!t->isVisibleTo(&view));
  QVERIFY(view.measuredText().contains(QStringLiteral("Measure links")));
}

QTEST_MAIN(TestLinksView)
#include "test_linksview.moc"
