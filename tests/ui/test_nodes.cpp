// The Nodes view without SSH: the table model over a real store with two nodes and their GPU
// samples (QAbstractItemModelTester, values of every column), the Add dialog's inline field
// problems for hostile input (nothing accepted, nothing stored, a canary never created), adding
// a valid node through the page, and a 1280x800 screenshot of the page with two nodes.
#include <QAbstractItemModelTester>
#include <QLabel>
#include <QLayout>
#include <QLineEdit>
#include <QTableView>
#include <QTemporaryDir>
#include <QtTest>

#include "db/database.h"
#include "db/nodes.h"
#include "ui/nodes/machineprobe.h"
#include "ui/nodes/nodedialog.h"
#include "ui/nodes/nodemonitor.h"
#include "ui/nodes/nodesmodel.h"
#include "ui/nodes/nodespage.h"
#include "ui/nodes/nodestore.h"

using namespace flotilla;
using flotilla::ui::NodesModel;

namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

// A store with nodes "lab" (2 GPUs at 40 % and 60 %, 8 + 24 of 2 x 80 GiB) and "spot-1" (no samples).
QString makeStore(const QString& dir) {
  const QString path = dir + QStringLiteral("/flotilla.db");
  db::Database d(path.toStdString());
  db::SshNode a;
  a.name = "lab";
  a.host = "10.0.0.5";
  a.port = 2222;
  a.user = "ana";
  a.usd_per_hour = 3.6;
  a.labels = {"zone:eu", "a100"};
  const int64_t id = db::add_ssh_node(d, a);
  db::set_node_gpus(d, id, "NVIDIA A100-SXM4-80GB", 2);
  db::SshNode b;
  b.name = "spot-1";
  b.host = "gpu.example.com";
  b.usd_per_hour = 1.8;
  b.spot = true;
  db::add_ssh_node(d, b);
  std::vector<db::SystemSample> samples;
  for (int dev = 0; dev < 2; ++dev) {
    db::SystemSample old{id, dev, 100.0, 99.0, 1 * kGiB, 80 * kGiB, 300.0, 70.0};
    db::SystemSample now{id, dev, 200.0, dev == 0 ? 40.0 : 60.0, (dev == 0 ? 8 : 24) * kGiB, 80 * kGiB, 250.0, 60.0};
    samples.push_back(old);
    samples.push_back(now);
  }
  db::insert_system_samples(d, samples);
  return path;
}

}  // namespace

class TestNodes : public QObject {
  Q_OBJECT

 private slots:
  void modelOverStore();
  void dialogRefusesHostileInput();
  void pageAddsNodeAndScreenshot();
  void aBogusHostSaysWhyOnThePage();
};

void TestNodes::modelOverStore() {
  QTemporaryDir tmp;
  const QString path = makeStore(tmp.path());
  NodesModel model;
  QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
  QCOMPARE(model.rowCount(), 1);  // this machine only
  QVERIFY(model.index(0, NodesModel::Name).data().toString().startsWith(QStringLiteral("This machine")));
  model.setEntries(ui::loadNodeEntries(path));
  QCOMPARE(model.rowCount(), 3);
  QCOMPARE(model.columnCount(), int(NodesModel::ColumnCount));
  QVERIFY(model.index(0, NodesModel::Name).data().toString().startsWith(QStringLiteral("This machine")));
  const int lab = model.rowOf(QStringLiteral("lab"));
  QCOMPARE(lab, 1);
  QCOMPARE(model.rowOf(QStringLiteral("spot-1")), 2);
  const auto cell = [&](int row, int col, int role = Qt::DisplayRole) { return model.index(row, col).data(role); };
  QCOMPARE(cell(lab, NodesModel::Address).toString(), QStringLiteral("ana@10.0.0.5:2222"));
  QCOMPARE(cell(2, NodesModel::Address).toString(), QStringLiteral("gpu.example.com"));
  QCOMPARE(cell(lab, NodesModel::Status).toString(), QStringLiteral("not probed"));
  QCOMPARE(cell(lab, NodesModel::Gpus).toString(), QStringLiteral("2 × NVIDIA A100-SXM4-80GB"));
  // The newest readings (time 200), not the older ones: mean 50 %, 32 of 160 GiB.
  QCOMPARE(cell(lab, NodesModel::GpuUse).toString(), QStringLiteral("50 %"));
  QCOMPARE(cell(lab, NodesModel::GpuUse, NodesModel::BarRole).toDouble(), 0.5);
  QCOMPARE(cell(lab, NodesModel::GpuMemory, NodesModel::BarRole).toDouble(), 0.2);
  QVERIFY2(cell(lab, NodesModel::GpuMemory).toString().contains(QStringLiteral("160")),
           qPrintable(cell(lab, NodesModel::GpuMemory).toString()));
  QCOMPARE(cell(lab, NodesModel::Price).toString(), QStringLiteral("$3.60/h"));
  QCOMPARE(cell(2, NodesModel::Price).toString(), QStringLiteral("$1.80/h spot"));
  QVERIFY(!cell(2, NodesModel::GpuUse, NodesModel::BarRole).isValid());
  QVERIFY(cell(lab, NodesModel::Name, Qt::ToolTipRole).toString().contains(QStringLiteral("zone:eu,a100")));

  // A live probe replaces the stored readings and shows the latency.
  ui::NodeStatus st;
  st.state = ui::NodeState::Reachable;
  st.latencyMs = 4.3;
  st.probed = true;
  remote::GpuInfo g;
  g.index = 0;
  g.name = "NVIDIA H100";
  g.utilization_pct = 90;
  g.memory_used_bytes = 40 * kGiB;
  g.memory_total_bytes = 80 * kGiB;
  st.gpus = {g};
  QSignalSpy changed(&model, &QAbstractItemModel::dataChanged);
  model.setStatus(QStringLiteral("lab"), st);
  QCOMPARE(changed.count(), 1);
  QCOMPARE(cell(lab, NodesModel::Status).toString(), QStringLiteral("reachable"));
  QCOMPARE(cell(lab, NodesModel::Latency).toString(), QStringLiteral("4.3 ms"));
  QCOMPARE(cell(lab, NodesModel::GpuUse).toString(), QStringLiteral("90 %"));
  QCOMPARE(cell(lab, NodesModel::GpuMemory, NodesModel::BarRole).toDouble(), 0.5);
  QCOMPARE(cell(lab, NodesModel::Status, NodesModel::StateRole).toInt(), int(ui::NodeState::Reachable));
  st.state = ui::NodeState::HostKeyChanged;
  model.setStatus(QStringLiteral("lab"), st);
  QCOMPARE(cell(lab, NodesModel::Status).toString(), QStringLiteral("host key changed"));
  QVERIFY(!cell(lab, NodesModel::Latency).isValid());
  model.setStatus(QStringLiteral("no-such-node"), st);  // ignored
  // Reloading keeps the status of nodes that remain.
  model.setEntries(ui::loadNodeEntries(path));
  QCOMPARE(cell(lab, NodesModel::Status).toString(), QStringLiteral("host key changed"));
}

void TestNodes::dialogRefusesHostileInput() {
  QTemporaryDir tmp;
  const QString canary = tmp.path() + QStringLiteral("/CANARY");
  struct Case {
    const char* field;
    QString value;
  };
  const QList<Case> cases = {
      {"host", QStringLiteral("-oProxyCommand=touch ") + canary},
      {"host", QStringLiteral("a;touch ") + canary},
      {"host", QStringLiteral("$(touch ") + canary + QLatin1Char(')')},
      {"host", QStringLiteral("`touch ") + canary + QLatin1Char('`')},
      {"host", QStringLiteral("host name")},
      {"user", QStringLiteral("$(touch ") + canary + QLatin1Char(')')},
      {"user", QStringLiteral("-oProxyCommand=x")},
      {"port", QStringLiteral("22abc")},
      {"port", QStringLiteral("0")},
      {"name", QStringLiteral("../x")},
      {"name", QStringLiteral("taken")},
      {"key", QStringLiteral("-oProxyCommand=touch ") + canary},
      {"price", QStringLiteral("-1")},
      {"labels", QStringLiteral("ok, bad label")},
  };
  for (const Case& c : cases) {
    ui::NodeDialog dialog({QStringLiteral("taken")});
    dialog.editor(QStringLiteral("name"))->setText(QStringLiteral("n1"));
    dialog.editor(QStringLiteral("host"))->setText(QStringLiteral("127.0.0.1"));
    dialog.editor(QLatin1String(c.field))->setText(c.value);
    dialog.show();
    dialog.accept();
    QVERIFY2(dialog.result() != QDialog::Accepted && dialog.isVisible(), c.field);
    QLabel* problem = dialog.problemLabel(QLatin1String(c.field));
    QVERIFY2(problem->isVisible() && !problem->text().isEmpty(), qPrintable(c.value));
    // Only the bad field complains.
    for (const char* other : {"name", "host", "port", "user", "key", "price", "labels"})
      if (QLatin1String(other) != QLatin1String(c.field))
        QVERIFY2(!dialog.problemLabel(QLatin1String(other))->isVisible(), other);
  }
  QVERIFY(!QFile::exists(canary));

  // Live feedback once a field is edited, gone when fixed; then a valid node is accepted as typed.
  ui::NodeDialog dialog({});
  dialog.show();
  QLineEdit* port = dialog.editor(QStringLiteral("port"));
  port->selectAll();
  QTest::keyClicks(port, QStringLiteral("x"));
  QVERIFY(dialog.problemLabel(QStringLiteral("port"))->isVisible());
  QVERIFY(!dialog.problemLabel(QStringLiteral("name"))->isVisible());  // untouched: not yet
  port->selectAll();
  QTest::keyClicks(port, QStringLiteral("2200"));
  QVERIFY(!dialog.problemLabel(QStringLiteral("port"))->isVisible());
  dialog.editor(QStringLiteral("name"))->setText(QStringLiteral("lab-2"));
  dialog.editor(QStringLiteral("host"))->setText(QStringLiteral("gpu.example.com"));
  dialog.editor(QStringLiteral("price"))->setText(QStringLiteral("2.5"));
  dialog.editor(QStringLiteral("labels"))->setText(QStringLiteral("zone:eu, a100"));
  dialog.accept();
  QCOMPARE(dialog.result(), int(QDialog::Accepted));
  const remote::NodeFields f = dialog.fields();
  QCOMPARE(f.port, std::string("2200"));
  QCOMPARE(f.labels.size(), size_t{2});
  QCOMPARE(f.labels[1], std::string("a100"));
}

void TestNodes::pageAddsNodeAndScreenshot() {
  QTemporaryDir tmp;
  const QString path = makeStore(tmp.path());
  const QString canary = tmp.path() + QStringLiteral("/CANARY");
  ui::MachineProbe probe;
  probe.start();
  ui::NodesPage page(&probe);  // never shown: the monitor stays off (no SSH to these addresses)
  page.resize(1280, 800);
  QSignalSpy reloaded(&page, &ui::NodesPage::nodesReloaded);
  page.setDatabasePath(path);
  QTRY_COMPARE(reloaded.count(), 1);
  QCOMPARE(page.model()->nodeCount(), 2);

  page.addNode();
  auto* dialog = page.findChild<ui::NodeDialog*>();
  QVERIFY(dialog);
  dialog->editor(QStringLiteral("name"))->setText(QStringLiteral("lab"));  // taken
  dialog->editor(QStringLiteral("host"))->setText(QStringLiteral("$(touch ") + canary + QLatin1Char(')'));
  dialog->accept();
  QVERIFY(dialog->isVisible());
  QVERIFY(dialog->problemLabel(QStringLiteral("name"))->text().contains(QStringLiteral("taken")));
  QVERIFY(dialog->problemLabel(QStringLiteral("host"))->isVisible());
  dialog->reject();
  QTest::qWait(50);
  QCOMPARE(reloaded.count(), 1);  // nothing was written
  QVERIFY(!QFile::exists(canary));

  page.addNode();
  dialog = page.findChild<ui::NodeDialog*>();
  QVERIFY(dialog);
  dialog->editor(QStringLiteral("name"))->setText(QStringLiteral("new-node"));
  dialog->editor(QStringLiteral("host"))->setText(QStringLiteral("192.0.2.7"));
  dialog->accept();
  QTRY_COMPARE(reloaded.count(), 2);
  QCOMPARE(page.model()->nodeCount(), 3);
  QVERIFY(page.messageText().contains(QStringLiteral("Added node new-node")));
  {
    const db::Database d(path.toStdString());
    QCOMPARE(db::get_ssh_node(d, "new-node").host, std::string("192.0.2.7"));
  }
  page.monitor()->stop();

  // The screenshot: two nodes, one live and reachable, one waiting for its host key.
  {
    db::Database d(path.toStdString());
    db::remove_node(d, "new-node");
  }
  page.reload();
  QTRY_COMPARE(reloaded.count(), 3);
  ui::NodeStatus live;
  live.state = ui::NodeState::Reachable;
  live.latencyMs = 3.4;
  page.model()->setStatus(QStringLiteral("lab"), live);
  ui::NodeStatus unknown;
  unknown.state = ui::NodeState::UnknownHostKey;
  unknown.fingerprint = QStringLiteral("SHA256:abc");
  page.model()->setStatus(QStringLiteral("spot-1"), unknown);
  page.table()->resizeColumnsToContents();
  QTRY_VERIFY_WITH_TIMEOUT(!probe.isRunning(), 20000);
  QVERIFY(!page.monitor()->isActive());
  page.monitor()->setDatabasePath(QString());  // shown for a real layout, but probing nothing
  page.show();
  QTest::qWait(100);
  const QString dir = qEnvironmentVariable("FLOTILLA_SCREENSHOT_DIR", QStringLiteral(FLOTILLA_SCREENSHOT_DIR));
  QVERIFY(page.grab().save(dir + QStringLiteral("/nodes.png")));
}

// Issue 34 #20: a node that cannot be reached says why on the page, not only in the Status cell's
// tooltip. The real monitor probes a host whose name cannot resolve (.invalid never does).
void TestNodes::aBogusHostSaysWhyOnThePage() {
  QTemporaryDir tmp;
  const QString path = tmp.path() + QStringLiteral("/flotilla.db");
  {
    db::Database d(path.toStdString());
    db::SshNode n;
    n.name = "bogus";
    n.host = "no-such-host.invalid";
    db::add_ssh_node(d, n);
  }
  ui::MachineProbe probe;
  ui::NodesPage page(&probe);
  page.resize(1280, 800);
  QSignalSpy reloaded(&page, &ui::NodesPage::nodesReloaded);
  page.setDatabasePath(path);
  QTRY_COMPARE(reloaded.count(), 1);
  QVERIFY(page.problemsText().isEmpty());  // not probed yet: nothing to say
  page.show();  // the monitor probes while the page is shown
  QTRY_VERIFY_WITH_TIMEOUT(page.problemsText().contains(QStringLiteral("bogus is unreachable: ")), 30000);
  QVERIFY2(page.problemsText().contains(QStringLiteral("no-such-host.invalid")), qPrintable(page.problemsText()));
  auto* label = page.findChild<QLabel*>(QStringLiteral("nodesProblems"));
  QVERIFY(label && label->isVisible());
  QTRY_VERIFY_WITH_TIMEOUT(!probe.isRunning(), 20000);
  page.monitor()->stop();
  const QString dir = qEnvironmentVariable("FLOTILLA_SCREENSHOT_DIR", QStringLiteral(FLOTILLA_SCREENSHOT_DIR));
  QVERIFY(page.grab().save(dir + QStringLiteral("/nodes-unreachable.png")));
}

QTEST_MAIN(TestNodes)
#include "test_nodes.moc"
