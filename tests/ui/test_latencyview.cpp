// The Nodes page's latency matrix filled from a store file: rows "This machine" then each node,
// columns the nodes, ms with one decimal, the diagonal and never-measured pairs marked, an error
// in red with the full reason as its tooltip, the measurement time shown. Then "Measure latency"
// for a node whose sshd port is closed: the click returns at once with the page busy (the job runs
// on the monitor's pool), the page says the node is unreachable, and the stored "refused" link
// appears.
#include <QHeaderView>
#include <QPushButton>
#include <QSignalSpy>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QtTest>
#include <sys/socket.h>
#include <netinet/in.h>
#include <unistd.h>

#include "db/database.h"
#include "db/nodes.h"
#include "db/run_store.h"
#include "ui/nodes/latencyview.h"
#include "ui/nodes/machineprobe.h"
#include "ui/nodes/nodemonitor.h"
#include "ui/nodes/nodespage.h"

using namespace flotilla;

namespace {

constexpr double kWhen = 1767225600;  // 2026-01-01 00:00 UTC

int64_t addNode(db::Database& d, const std::string& name, int port) {
  db::SshNode n;
  n.name = name;
  n.host = "127.0.0.1";
  n.port = port;
  return db::add_ssh_node(d, n);
}

// A port on 127.0.0.1 that refuses connections (bound, never listening) while `fd` stays open.
int refusingPort(int* fd) {
  *fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  bind(*fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  getsockname(*fd, reinterpret_cast<sockaddr*>(&a), &len);
  return ntohs(a.sin_port);
}

}  // namespace

class TestLatencyView : public QObject {
  Q_OBJECT

 private slots:
  void matrixFromStore();
  void measureUnreachableNode();
};

void TestLatencyView::matrixFromStore() {
  QTemporaryDir tmp;
  const QString path = tmp.filePath(QStringLiteral("flotilla.db"));
  {
    db::Database d(path.toStdString());
    const int64_t here = db::ensure_node(d, "local", "local");
    const int64_t a = addNode(d, "alpha", 2201), b = addNode(d, "beta", 2202), c = addNode(d, "gamma", 2203);
    db::upsert_node_latency(d, {{here, a, 0.1234, "", kWhen},
                                {here, b, 12.345, "", kWhen},
                                {a, b, 0.4321, "", kWhen},
                                {b, a, std::nullopt, "refused", kWhen + 60},
                                {a, c, std::nullopt, "timed out", kWhen}});
  }
  ui::MachineProbe probe;
  ui::NodesPage page(&probe);
  QSignalSpy reloaded(&page, &ui::NodesPage::nodesReloaded);
  page.setDatabasePath(path);
  QVERIFY(reloaded.wait(5000));
  page.monitor()->stop();
  QTableWidget* t = page.latencyView()->table();
  QCOMPARE(t->rowCount(), 4);
  QCOMPARE(t->columnCount(), 3);
  QCOMPARE(t->verticalHeaderItem(0)->text(), QStringLiteral("This machine"));
  QCOMPARE(t->verticalHeaderItem(2)->text(), QStringLiteral("beta"));
  QCOMPARE(t->horizontalHeaderItem(2)->text(), QStringLiteral("gamma"));
  QCOMPARE(t->item(0, 0)->text(), QStringLiteral("0.1"));   // here -> alpha
  QCOMPARE(t->item(0, 1)->text(), QStringLiteral("12.3"));  // here -> beta
  QCOMPARE(t->item(1, 1)->text(), QStringLiteral("0.4"));   // alpha -> beta
  QVERIFY(t->item(1, 1)->toolTip().contains(QStringLiteral("0.432 ms")));
  QCOMPARE(t->item(1, 0)->text(), QStringLiteral("—"));     // alpha -> alpha
  QCOMPARE(t->item(2, 0)->text(), QStringLiteral("refused"));  // beta -> alpha
  QCOMPARE(t->item(2, 0)->foreground().color(), QColor(0xc6, 0x28, 0x28));
  QVERIFY(t->item(2, 0)->toolTip().contains(QStringLiteral("beta → alpha: refused")));
  QCOMPARE(t->item(1, 2)->text(), QStringLiteral("timed out"));
  QCOMPARE(t->item(3, 0)->text(), QStringLiteral("–"));  // gamma -> alpha: never measured
  QVERIFY(t->item(1, 1)->foreground().color() != QColor(0xc6, 0x28, 0x28));
  // The newest measurement time, in local time.
  const QString newest =
      QDateTime::fromSecsSinceEpoch(static_cast<qint64>(kWhen + 60)).toString(QStringLiteral("yyyy-MM-dd HH:mm:ss"));
  QCOMPARE(page.latencyView()->measuredText(), QStringLiteral("Measured ") + newest);
  QVERIFY(page.latencyView()->measureButton()->isEnabled());
}

void TestLatencyView::measureUnreachableNode() {
  QTemporaryDir tmp;
  const QString path = tmp.filePath(QStringLiteral("flotilla.db"));
  int fd = -1;
  const int port = refusingPort(&fd);
  {
    db::Database d(path.toStdString());
    addNode(d, "down", port);
  }
  ui::MachineProbe probe;
  ui::NodesPage page(&probe);
  page.setWorkerPath(QStringLiteral(FLOTILLA_WORKER_PATH));
  QSignalSpy reloaded(&page, &ui::NodesPage::nodesReloaded);
  page.setDatabasePath(path);
  QVERIFY(reloaded.wait(5000));
  page.monitor()->stop();
  QCOMPARE(page.latencyView()->measuredText(), QStringLiteral("Not measured yet: use Measure latency."));
  QSignalSpy measured(page.monitor(), &ui::NodeMonitor::latencyMeasured);
  QTest::mouseClick(page.latencyView()->measureButton(), Qt::LeftButton);
  // The click returns at once with the page busy; the result arrives later through the event loop.
  QVERIFY(!page.latencyView()->measureButton()->isEnabled());
  QCOMPARE(page.latencyView()->measureButton()->text(), QStringLiteral("Measuring…"));
  QCOMPARE(measured.count(), 0);
  QVERIFY(measured.wait(30000));
  QCOMPARE(measured.first().at(0).toInt(), 1);  // this machine -> down
  QVERIFY2(page.latencyView()->messageText().contains(QStringLiteral("Node down is unreachable")),
           qPrintable(page.latencyView()->messageText()));
  QVERIFY(reloaded.wait(5000));
  QTableWidget* t = page.latencyView()->table();
  QCOMPARE(t->rowCount(), 2);
  QCOMPARE(t->item(0, 0)->text(), QStringLiteral("refused"));
  QVERIFY(page.latencyView()->measureButton()->isEnabled());
  {
    const db::Database d(path.toStdString());
    const auto rows = db::node_latency_matrix(d);
    QCOMPARE(rows.size(), size_t{1});
    QCOMPARE(rows[0].error, std::string("refused"));
    QVERIFY(!rows[0].rtt_ms);
  }
  ::close(fd);
}

QTEST_MAIN(TestLatencyView)
#include "test_latencyview.moc"
