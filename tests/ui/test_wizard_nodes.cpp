// The wizard's Hardware page offers the store's SSH nodes as targets (issue 7 item 5): read from a
// real SQLite store on a worker thread, each node with its GPUs and price, plus one target for the
// alike nodes together. Choosing nodes sets run.device, the ranks (nodes x GPUs per node) and dp;
// the planner plans with the node's GPU's data-sheet profile; a rank count the nodes cannot split
// is refused on the page; and Finish with a node target starts nothing locally (the Runs page
// names the headless command instead).
#include <QAbstractButton>
#include <QComboBox>
#include <QLabel>
#include <QPushButton>
#include <QSignalSpy>
#include <QSpinBox>
#include <QTemporaryDir>
#include <QtTest>

#include "db/database.h"
#include "db/nodes.h"
#include "engine/plan/planner.h"
#include "ui/runs/localruns.h"
#include "ui/runs/servicerun.h"
#include "ui/runs/runspage.h"
#include "ui/runs/storeservice.h"
#include "ui/wizard/configdraft.h"
#include "ui/wizard/hardwarepage.h"
#include "ui/wizard/runwizard.h"

using flotilla::ui::HardwareTarget;
using flotilla::ui::RunWizard;

namespace {

flotilla::ProbeResult cpuMachine() {
  flotilla::ProbeResult p;
  p.cpu_model = "Test CPU";
  p.physical_cores = 8;
  p.memory_total_bytes = 32ull << 30;
  return p;
}

void addNode(flotilla::db::Database& db, const std::string& name, const std::string& gpu, int gpus,
             double usd, bool spot) {
  flotilla::db::SshNode n;
  n.name = name;
  // Loopback port 1: nothing listens, so a launch fails at once with "connection refused".
  n.host = "127.0.0.1";
  n.port = 1;
  n.usd_per_hour = usd;
  n.spot = spot;
  const int64_t id = flotilla::db::add_ssh_node(db, n);
  if (gpus > 0) flotilla::db::set_node_gpus(db, id, gpu, gpus);
}

}  // namespace

class TestWizardNodes : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase();
  void nodesAreTargetsWithTheirGpusAndPrices();
  void finishWithNodesStartsARemoteRun();

 private:
  std::unique_ptr<RunWizard> loadedWizard();
  QTemporaryDir m_tmp;
  QString m_db;
};

void TestWizardNodes::initTestCase() {
  QVERIFY(m_tmp.isValid());
  m_db = m_tmp.filePath(QStringLiteral("flotilla.db"));
  flotilla::db::Database db(m_db.toStdString());
  addNode(db, "a", "NVIDIA H100 80GB HBM3", 8, 3.6, false);
  addNode(db, "b", "NVIDIA H100 80GB HBM3", 8, 1.8, true);
  addNode(db, "c", "", 0, 0, false);
}

std::unique_ptr<RunWizard> TestWizardNodes::loadedWizard() {
  auto w = std::make_unique<RunWizard>(nullptr, m_tmp.filePath(QStringLiteral("templates")));
  w->setMachine(cpuMachine());
  QSignalSpy loaded(w.get(), &RunWizard::nodesLoaded);
  w->loadNodes(m_db);
  if (!loaded.wait(10000)) qWarning("nodes not loaded");
  return w;
}

void TestWizardNodes::nodesAreTargetsWithTheirGpusAndPrices() {
  auto w = loadedWizard();
  const QList<HardwareTarget>& targets = w->draft()->targets();
  // This machine's CPU, then a, b, c, then "a, b" together (c has no GPU: not alike).
  QCOMPARE(targets.size(), 5);
  QCOMPARE(targets[0].kind, HardwareTarget::Kind::Cpu);
  QCOMPARE(w->draft()->targetIndex(), 0);  // the machine stays chosen
  QCOMPARE(targets[1].kind, HardwareTarget::Kind::Nodes);
  QCOMPARE(targets[1].label, QStringLiteral("Node a (8 × NVIDIA H100 80GB HBM3, $3.60/h)"));
  QCOMPARE(targets[2].label, QStringLiteral("Node b (8 × NVIDIA H100 80GB HBM3, $1.80/h spot)"));
  QCOMPARE(targets[3].label, QStringLiteral("Node c (no GPU probed: 1 CPU rank)"));
  QCOMPARE(targets[4].nodes, QStringList({QStringLiteral("a"), QStringLiteral("b")}));
  QCOMPARE(targets[4].maxRanks, 16);
  QVERIFY2(targets[4].label.contains(QStringLiteral("$5.40/h spot")), qPrintable(targets[4].label));

  w->show();
  w->next();
  w->next();
  QCOMPARE(w->currentId(), int(RunWizard::Hardware));
  QWizardPage* page = w->currentPage();
  auto* combo = page->findChild<QComboBox*>(QStringLiteral("target"));
  QVERIFY(combo);
  QCOMPARE(combo->count(), 5);
  QCOMPARE(combo->itemText(1), targets[1].label);

  // Both H100 nodes: 2 x 8 ranks on CUDA, dp follows, planned as an H100 (data-sheet memory).
  combo->setCurrentIndex(4);
  QCOMPARE(w->targetNodes(), QStringList({QStringLiteral("a"), QStringLiteral("b")}));
  QCOMPARE(w->ranks(), 16);
  QCOMPARE(w->config().parallel.dp, 16);
  QCOMPARE(w->config().run.device, std::string("cuda"));
  QCOMPARE(page->findChild<QSpinBox*>(QStringLiteral("ranks"))->value(), 16);
  flotilla::DeviceProfile h100;
  QVERIFY(flotilla::find_gpu_profile("h100-sxm", w->config().train.dtype, &h100));
  const auto plan = w->draft()->plan();
  QVERIFY(plan.has_value());
  QCOMPARE(plan->device.name, h100.name);
  QCOMPARE(plan->device.mem_bytes, h100.mem_bytes);
  QCOMPARE(plan->device.flops_per_s, h100.flops_per_s);

  // Three ranks cannot be split over two nodes: the page says so.
  page->findChild<QSpinBox*>(QStringLiteral("ranks"))->setValue(3);
  QVERIFY(!page->isComplete());
  const QString problems = page->findChild<QLabel*>(QStringLiteral("fieldProblem-ranks"))->text();
  QVERIFY2(problems.contains(QStringLiteral("2 node(s) run 8 rank(s) each")), qPrintable(problems));

  // The node without GPUs: one CPU rank.
  combo->setCurrentIndex(3);
  QCOMPARE(w->targetNodes(), QStringList({QStringLiteral("c")}));
  QCOMPARE(w->ranks(), 1);
  QCOMPARE(w->config().parallel.dp, 1);
  QCOMPARE(w->config().run.device, std::string("cpu"));
  QVERIFY(w->draft()->plan().has_value());

  // Back to this machine: no nodes.
  combo->setCurrentIndex(0);
  QVERIFY(w->targetNodes().isEmpty());
  QCOMPARE(w->config().run.device, std::string("cpu"));
}

void TestWizardNodes::finishWithNodesStartsARemoteRun() {
  flotilla::ui::StoreService store(m_db);
  flotilla::ui::LocalRuns runs(m_tmp.filePath(QStringLiteral("ws")));
  runs.setStore(&store);
  flotilla::ui::RunsPage page(&runs);
  page.resize(1000, 700);
  page.show();
  QTest::mouseClick(page.newRunButton(), Qt::LeftButton);
  RunWizard* w = page.wizard();
  QVERIFY(w);
  w->setMachine(cpuMachine());
  QTRY_COMPARE_WITH_TIMEOUT(w->draft()->targets().size(), 5, 10000);
  w->next();
  w->next();
  w->hardwarePage()->findChild<QComboBox*>(QStringLiteral("target"))->setCurrentIndex(1);  // node a
  QCOMPARE(w->ranks(), 8);
  while (w->currentId() != RunWizard::Review) w->next();
  QTRY_VERIFY(w->currentPage()->isComplete());
  QSignalSpy started(&page, &flotilla::ui::RunsPage::runOpened);
  w->button(QWizard::FinishButton)->click();
  // Nothing starts on this machine; a run on node a does, on its own thread, and fails cleanly
  // because nothing answers SSH there.
  QCOMPARE(runs.count(), 1);  // one list for every place (issue 32)
  QCOMPARE(started.count(), 1);
  QCOMPARE(runs.all().size(), 1);
  flotilla::ui::RunHandle* run = runs.all().front();
  QCOMPARE(qvariant_cast<flotilla::ui::RunHandle*>(started.at(0).at(0)), run);
  QTRY_COMPARE_WITH_TIMEOUT(run->state(), flotilla::ui::RunHandle::State::Failed, 20000);
  QString log;
  for (const auto& line : run->log()) log += line.text + QLatin1Char('\n');
  QVERIFY2(log.contains(QStringLiteral("starting on node a")), qPrintable(log));
  QVERIFY2(log.contains(QStringLiteral("cannot connect to")) && log.contains(QStringLiteral("@127.0.0.1:1: ")),
           qPrintable(log));
}

QTEST_MAIN(TestWizardNodes)
#include "test_wizard_nodes.moc"
