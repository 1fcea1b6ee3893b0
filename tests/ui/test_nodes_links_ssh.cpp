// The Nodes page's "Measure links" end to end (issue 36, label ssh): two real sshd "nodes" on
// 127.0.0.1 (sshd_fixture.h) with the workspace's known_hosts trusting them. The click returns at
// once with the view busy; the real link job (runs/link_job.h) deploys the real worker, starts its
// `links` command on both nodes as one Gloo process group and stores the matrix; the page then
// shows it: every ordered pair and both within-node figures measured, the heat map holding the same
// bandwidths, the slowest link named (a → b or b → a), no problems.
#include <QLabel>
#include <QPushButton>
#include <QSignalSpy>
#include <QTableWidget>
#include <QtTest>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "../remote/sshd_fixture.h"
#include "db/database.h"
#include "db/nodes.h"
#include "remote/node_fields.h"
#include "ui/nodes/linksview.h"
#include "ui/nodes/machineprobe.h"
#include "ui/nodes/nodemonitor.h"
#include "ui/nodes/nodespage.h"
#include "ui/plot/linkheatmap.h"

using namespace flotilla;

class TestNodesLinksSsh : public QObject {
  Q_OBJECT

 private slots:
  void measureTwoNodes();
};

void TestNodesLinksSsh::measureTwoNodes() {
  using flotilla_test::SshdFixture;
  if (const std::string why = SshdFixture::unavailable(); !why.empty()) {
    std::printf("SKIP: %s\n", why.c_str());
    return;
  }
  SshdFixture fx("ui_nodes_links_ssh");
  for (int i = 0; i < 2; ++i) QVERIFY2(fx.start(i), fx.last_error().c_str());
  for (int i = 0; i < 2; ++i) {
    remote::Session s(fx.options(i));
    flotilla_test::trust_and_connect(s);
  }
  const std::string clientHome = fx.root() + "/client-home";
  std::filesystem::create_directories(clientHome);
  qputenv("HOME", QByteArray::fromStdString(clientHome));
  qunsetenv("SSH_AUTH_SOCK");
  const std::string ws = fx.root() + "/ws";
  std::filesystem::create_directories(ws);
  const std::string dbPath = ws + "/flotilla.db";
  {
    db::Database d(dbPath);
    for (int i = 0; i < 2; ++i) {
      db::SshNode n;
      n.name = std::string(1, static_cast<char>('a' + i));
      n.host = "127.0.0.1";
      n.port = fx.node(i).port;
      n.user = flotilla_test::local_user_name();
      n.key_path = fx.client_key();
      db::add_ssh_node(d, n);
    }
  }
  std::filesystem::copy_file(fx.known_hosts(), remote::workspace_known_hosts_path(dbPath),
                             std::filesystem::copy_options::overwrite_existing);

  ui::MachineProbe probe;  // never started: this machine is not under test
  ui::NodesPage page(&probe);
  page.resize(1100, 1300);
  page.setWorkerPath(QStringLiteral(FLOTILLA_WORKER_PATH));
  QSignalSpy reloaded(&page, &ui::NodesPage::nodesReloaded);
  page.setDatabasePath(QString::fromStdString(dbPath));
  QVERIFY(reloaded.wait(5000));
  ui::LinksView* v = page.linksView();
  QVERIFY(v->measuredText().contains(QStringLiteral("No links measured yet")));
  QSignalSpy measured(page.monitor(), &ui::NodeMonitor::linksMeasured);
  QTest::mouseClick(v->measureButton(), Qt::LeftButton);
  QVERIFY(!v->measureButton()->isEnabled());
  QVERIFY(measured.wait(90000));
  QVERIFY2(measured.first().at(0).toLongLong() > 0, qPrintable(v->messageText()));
  QVERIFY2(v->messageText().isEmpty(), qPrintable(v->messageText()));
  QVERIFY(reloaded.wait(5000));

  QTableWidget* t = v->table();
  QCOMPARE(t->rowCount(), 2);
  QCOMPARE(t->verticalHeaderItem(0)->text(), QStringLiteral("a"));
  for (int r = 0; r < 2; ++r)
    for (int c = 0; c < 2; ++c) {
      const QString cell = t->item(r, c)->text();
      QVERIFY2(cell.contains(QStringLiteral("B/s · ")), qPrintable(cell));
      const double bw = v->heatMap()->cellValue(r, c);
      QVERIFY2(std::isfinite(bw) && bw > 1e6, qPrintable(QString::number(bw)));
    }
  const QString slowest = v->slowestText();
  QVERIFY2(slowest.startsWith(QStringLiteral("Slowest link: a → b")) ||
               slowest.startsWith(QStringLiteral("Slowest link: b → a")),
           qPrintable(slowest));
  QVERIFY(v->measuredText().contains(QStringLiteral("over gloo/tcp")));
  QVERIFY(v->measureButton()->isEnabled());
  std::printf("%s\n%s | %s\n%s | %s\n", qPrintable(slowest), qPrintable(t->item(0, 0)->text()),
              qPrintable(t->item(0, 1)->text()), qPrintable(t->item(1, 0)->text()),
              qPrintable(t->item(1, 1)->text()));
  page.show();
  QVERIFY(QTest::qWaitForWindowExposed(&page));
  page.monitor()->stop();
  QVERIFY(page.grab().save(QString::fromStdString(fx.root() + "/nodes-links-ssh.png")));
}

QTEST_MAIN(TestNodesLinksSsh)
#include "test_nodes_links_ssh.moc"
