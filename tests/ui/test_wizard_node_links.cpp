// The wizard plans a Nodes target over the links measured between its nodes (issue 36): with none
// measured it keeps the GPU profile's link and says which command measures it; once `flotilla nodes
// links` stored a 1.25 GB/s link between a and b (the wizard reads it with the nodes, off the UI
// thread), the plan's link is that one, its communication time grows, and the Hardware page names
// the link and when it was measured.
#include <QComboBox>
#include <QLabel>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QtTest>

#include "db/database.h"
#include "db/links.h"
#include "db/nodes.h"
#include "ui/wizard/configdraft.h"
#include "ui/wizard/runwizard.h"

using flotilla::ui::RunWizard;

namespace {

flotilla::ProbeResult cpuMachine() {
  flotilla::ProbeResult p;
  p.cpu_model = "Test CPU";
  p.physical_cores = 8;
  p.memory_total_bytes = 32ull << 30;
  return p;
}

int64_t addNode(flotilla::db::Database& db, const std::string& name) {
  flotilla::db::SshNode n;
  n.name = name;
  n.host = "127.0.0.1";
  n.port = 1;
  const int64_t id = flotilla::db::add_ssh_node(db, n);
  flotilla::db::set_node_gpus(db, id, "NVIDIA H100 80GB HBM3", 8);
  return id;
}

}  // namespace

class TestWizardNodeLinks : public QObject {
  Q_OBJECT

 private slots:
  void nodesTargetPlansOverTheMeasuredLink();

 private:
  std::unique_ptr<RunWizard> loadedWizard(const QString& db);
  QTemporaryDir m_tmp;
};

std::unique_ptr<RunWizard> TestWizardNodeLinks::loadedWizard(const QString& db) {
  auto w = std::make_unique<RunWizard>(nullptr, m_tmp.filePath(QStringLiteral("templates")));
  w->setMachine(cpuMachine());
  QSignalSpy loaded(w.get(), &RunWizard::nodesLoaded);
  w->loadNodes(db);
  if (!loaded.wait(10000)) qWarning("nodes not loaded");
  // The target "a, b" together (after this machine's CPU, a and b).
  const auto& targets = w->draft()->targets();
  for (int i = 0; i < targets.size(); ++i)
    if (targets[i].nodes.size() == 2) w->draft()->setTargetIndex(i);
  return w;
}

void TestWizardNodeLinks::nodesTargetPlansOverTheMeasuredLink() {
  QVERIFY(m_tmp.isValid());
  const QString path = m_tmp.filePath(QStringLiteral("flotilla.db"));
  int64_t a = 0, b = 0;
  {
    flotilla::db::Database db(path.toStdString());
    a = addNode(db, "a");
    b = addNode(db, "b");
  }
  auto before = loadedWizard(path);
  QCOMPARE(before->targetNodes(), QStringList({QStringLiteral("a"), QStringLiteral("b")}));
  const auto unmeasured = before->draft()->calibratedPlan();
  QVERIFY(unmeasured.has_value());
  QVERIFY(unmeasured->plan.device.link_bytes_per_s > 1.25e9);  // the H100 profile's NVLink figure
  const QString none = before->draft()->planLinkLine();
  QVERIFY2(none.contains(QStringLiteral("no link measured a -> b: flotilla nodes links a,b")),
           qPrintable(none));

  {
    flotilla::db::Database db(path.toStdString());
    flotilla::db::LinkMeasurement m;
    m.transport = "nccl";
    m.measured_at = 1.8e9;
    for (auto [f, t] : {std::pair{a, b}, std::pair{b, a}}) {
      flotilla::db::NodeLink l;
      l.from_node = f;
      l.to_node = t;
      l.bytes_per_s = 1.25e9;
      l.latency_s = 20e-6;
      m.links.push_back(l);
    }
    flotilla::db::store_link_measurement(db, m);
  }
  auto after = loadedWizard(path);
  const auto measured = after->draft()->calibratedPlan();
  QVERIFY(measured.has_value());
  QCOMPARE(measured->plan.device.link_bytes_per_s, 1.25e9);
  QCOMPARE(measured->plan.device.link_latency_s, unmeasured->plan.device.link_latency_s + 2 * 20e-6);
  QVERIFY(measured->plan.comm_s > unmeasured->plan.comm_s);
  const QString line = after->draft()->planLinkLine();
  QVERIFY2(line.contains(QStringLiteral("measured a -> b at 2027-01-15 08:00 UTC")), qPrintable(line));
  QVERIFY2(line.contains(QStringLiteral("1.25 GB/s")), qPrintable(line));
}

QTEST_MAIN(TestWizardNodeLinks)
#include "test_wizard_node_links.moc"
