// The Nodes page's links (issue 36), with the real store and the real link job (runs/link_job.h):
// the newest stored measurement is shown when the page opens, with the slowest link the job names
// (runs::slowest_link) above the table and the heat map, and the reachability matrix keeps its new
// title. "Measure links" for two nodes whose sshd port refuses connections returns at once with the
// view busy; the job ends within its bound, the page says why the nodes could not take part and the
// button is usable again.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <QLabel>
#include <QPushButton>
#include <QSignalSpy>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QtTest>

#include "db/database.h"
#include "db/links.h"
#include "db/nodes.h"
#include "db/run_store.h"
#include "ui/nodes/latencyview.h"
#include "ui/nodes/linksview.h"
#include "ui/nodes/machineprobe.h"
#include "ui/nodes/nodemonitor.h"
#include "ui/nodes/nodespage.h"
#include "ui/plot/linkheatmap.h"

using namespace flotilla;

namespace {

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

db::NodeLink link(int64_t from, int64_t to, double bw, double lat) {
  db::NodeLink l;
  l.from_node = from;
  l.to_node = to;
  l.bytes_per_s = bw;
  l.latency_s = lat;
  return l;
}

}  // namespace

class TestNodesLinks : public QObject {
  Q_OBJECT

 private slots:
  void newestMeasurementShown();
  void measureUnreachableNodes();
};

void TestNodesLinks::newestMeasurementShown() {
  QTemporaryDir tmp;
  const QString path = tmp.filePath(QStringLiteral("flotilla.db"));
  {
    db::Database d(path.toStdString());
    const int64_t a = addNode(d, "alpha", 2201), b = addNode(d, "beta", 2202);
    db::LinkMeasurement old;
    old.transport = "gloo/tcp";
    old.measured_at = 1000;
    old.links = {link(a, b, 1e6, 1e-3), link(b, a, 1e6, 1e-3)};
    db::store_link_measurement(d, old);
    db::LinkMeasurement m;
    m.transport = "gloo/tcp";
    m.measured_at = 2000;
    m.seconds = 2.5;
    m.links = {link(a, b, 12.5e6, 61e-6), link(b, a, 20e6, 60e-6), link(a, a, 2e9, 5e-6),
               link(b, b, 2e9, 5e-6)};
    db::store_link_measurement(d, m);
  }
  ui::MachineProbe probe;
  ui::NodesPage page(&probe);
  QSignalSpy reloaded(&page, &ui::NodesPage::nodesReloaded);
  page.setDatabasePath(path);
  QVERIFY(reloaded.wait(5000));
  page.monitor()->stop();
  ui::LinksView* v = page.linksView();
  QTableWidget* t = v->table();
  QCOMPARE(t->rowCount(), 2);
  QCOMPARE(t->item(0, 1)->text(), QStringLiteral("12.5 MB/s · 61 µs"));  // the newest, not the older one
  QCOMPARE(v->heatMap()->cellValue(1, 0), 20e6);
  QVERIFY2(v->slowestText().contains(QStringLiteral("alpha → beta, 12.5 MB/s")),
           qPrintable(v->slowestText()));
  QVERIFY(v->measureButton()->isEnabled());
  bool relabelled = false;
  for (const QLabel* l : page.latencyView()->findChildren<QLabel*>())
    relabelled |= l->text().contains(QStringLiteral("Reachability")) &&
                  l->text().contains(QStringLiteral("TCP connect to sshd"));
  QVERIFY(relabelled);
  page.resize(1200, 1400);
  page.show();
  QVERIFY(QTest::qWaitForWindowExposed(&page));
  page.monitor()->stop();
  QVERIFY(page.grab().save(QStringLiteral(FLOTILLA_TEST_TMP "/nodes-links.png")));
}

void TestNodesLinks::measureUnreachableNodes() {
  QTemporaryDir tmp;
  const QString path = tmp.filePath(QStringLiteral("flotilla.db"));
  int fd = -1;
  const int port = refusingPort(&fd);
  {
    db::Database d(path.toStdString());
    addNode(d, "down-a", port);
    addNode(d, "down-b", port);
  }
  ui::MachineProbe probe;
  ui::NodesPage page(&probe);
  page.setWorkerPath(QStringLiteral(FLOTILLA_WORKER_PATH));
  page.setLinksTimeout(20);
  QSignalSpy reloaded(&page, &ui::NodesPage::nodesReloaded);
  page.setDatabasePath(path);
  QVERIFY(reloaded.wait(5000));
  page.monitor()->stop();
  ui::LinksView* v = page.linksView();
  QVERIFY(v->measuredText().contains(QStringLiteral("No links measured yet")));
  QSignalSpy measured(page.monitor(), &ui::NodeMonitor::linksMeasured);
  QElapsedTimer clock;
  clock.start();
  QTest::mouseClick(v->measureButton(), Qt::LeftButton);
  QVERIFY(!v->measureButton()->isEnabled());  // busy at once; the job runs on the monitor's pool
  QCOMPARE(v->measureButton()->text(), QStringLiteral("Measuring…"));
  QCOMPARE(measured.count(), 0);
  QVERIFY(measured.wait(30000));
  QVERIFY(clock.elapsed() < 25000);  // within the job's bound (20 s) and a little
  const QString message = v->messageText();
  QVERIFY2(message.contains(QStringLiteral("down-a")) && message.contains(QStringLiteral("down-b")),
           qPrintable(message));
  qInfo("message: %s", qPrintable(message));
  QVERIFY(reloaded.wait(5000));
  QVERIFY(v->measureButton()->isEnabled());
  QCOMPARE(v->measureButton()->text(), QStringLiteral("Measure links"));
  ::close(fd);
}

QTEST_MAIN(TestNodesLinks)
#include "test_nodes_links.moc"
