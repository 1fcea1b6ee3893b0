// The wizard's "Slurm cluster" target (issue 20): a stored cluster, read with its last probe and
// its partition prices from a real SQLite store on a worker thread, is offered after the nodes.
// Choosing it shows the job's rows (partition, nodes, GPUs per node, time limit, time-limit
// checkpoint, auto-resume) and hides them for other targets; a GPU job sets the ranks to nodes x
// GPUs per node, dp and run.device; the partition's facts and the job's $/h are shown; a hostile
// partition, a bad time limit, more GPUs than the partition has, ranks that do not split over the
// nodes and a budget on an unpriced partition are refused beside their fields (the runs layer's
// own checks); the Review page shows the batch script the launch submits; and Finish submits
// through a ServiceRun (here to a login node nothing answers, so it fails cleanly, storing nothing).
#include <QAbstractButton>
#include <QCheckBox>
#include <QComboBox>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSignalSpy>
#include <QSpinBox>
#include <QTemporaryDir>
#include <QtTest>

#include "db/clusters.h"
#include "db/database.h"
#include "db/queries.h"
#include "remote/slurm_cluster.h"
#include "ui/runs/localruns.h"
#include "ui/runs/servicerun.h"
#include "ui/runs/runspage.h"
#include "ui/runs/storeservice.h"
#include "ui/wizard/budgetpage.h"
#include "ui/wizard/configdraft.h"
#include "ui/wizard/hardwarepage.h"
#include "ui/wizard/reviewpage.h"
#include "ui/wizard/runwizard.h"
#include "wizard_helpers.h"

using flotilla::ui::HardwareTarget;
using flotilla::ui::RunWizard;
using wizard_helpers::child;
using wizard_helpers::cpuMachine;
using wizard_helpers::shownProblems;

namespace {

flotilla::remote::SlurmNode node(const std::string& name, int cpus, int gpus, const std::string& partition) {
  flotilla::remote::SlurmNode n;
  n.name = name;
  n.state = "idle";
  n.cpus = cpus;
  n.memory_mb = 16384;
  n.gpus = gpus;
  n.gpu_type = gpus > 0 ? "a100" : "";
  n.partitions = {partition};
  return n;
}

flotilla::remote::SlurmPartition partition(const std::string& name, bool isDefault) {
  flotilla::remote::SlurmPartition p;
  p.name = name;
  p.is_default = isDefault;
  p.state = "UP";
  p.max_time = "1-00:00:00";
  return p;
}

// Stores cluster "hpc": partition cpu (default; 2 nodes x 8 CPUs, unpriced) and gpu (2 nodes x
// 4 a100, $2 per GPU-hour). Its login node is loopback port 1, where nothing answers.
void storeCluster(const QString& path) {
  flotilla::db::Database db(path.toStdString());
  flotilla::db::SlurmCluster c;
  c.name = "hpc";
  c.login_host = "127.0.0.1";
  c.port = 1;
  const int64_t id = flotilla::db::add_cluster(db, c);
  flotilla::remote::ClusterProbe probe;
  probe.config.version = "23.02.7";
  probe.nodes = {node("c1", 8, 0, "cpu"), node("c2", 8, 0, "cpu"), node("g1", 32, 4, "gpu"),
                 node("g2", 32, 4, "gpu")};
  probe.partitions = {partition("cpu", true), partition("gpu", false)};
  flotilla::db::set_cluster_probe(db, id, flotilla::remote::cluster_probe_json(probe), 1.0);
  flotilla::db::PartitionPrice price;
  price.partition = "gpu";
  price.usd_per_gpu_hour = 2.0;
  flotilla::db::set_partition_price(db, id, price);
}

}  // namespace

class TestWizardCluster : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase();
  void clusterIsATargetWithItsJobRows();
  void slurmRefusalsShowBesideTheirFields();
  void reviewShowsTheBatchScript();
  void finishSubmitsThroughARemoteRun();

 private:
  std::unique_ptr<RunWizard> loadedWizard();
  // Shows the wizard on the Hardware page with the cluster chosen.
  QWizardPage* chooseCluster(RunWizard* w);
  QTemporaryDir m_tmp;
  QString m_db;
};

void TestWizardCluster::initTestCase() {
  QVERIFY(m_tmp.isValid());
  m_db = m_tmp.filePath(QStringLiteral("flotilla.db"));
  storeCluster(m_db);
}

std::unique_ptr<RunWizard> TestWizardCluster::loadedWizard() {
  auto w = std::make_unique<RunWizard>(nullptr, m_tmp.filePath(QStringLiteral("templates")));
  w->setMachine(cpuMachine());
  QSignalSpy loaded(w.get(), &RunWizard::nodesLoaded);
  w->loadNodes(m_db);
  if (!loaded.wait(10000)) qWarning("store targets not loaded");
  return w;
}

QWizardPage* TestWizardCluster::chooseCluster(RunWizard* w) {
  w->show();
  while (w->currentId() != RunWizard::Hardware) w->next();
  QWizardPage* page = w->currentPage();
  auto* combo = child<QComboBox>(page, "target");
  combo->setCurrentIndex(combo->count() - 1);
  return page;
}

void TestWizardCluster::clusterIsATargetWithItsJobRows() {
  auto w = loadedWizard();
  const QList<HardwareTarget>& targets = w->draft()->targets();
  QCOMPARE(targets.size(), 2);  // this machine's CPU, then the cluster
  QCOMPARE(targets[1].kind, HardwareTarget::Kind::Cluster);
  QCOMPARE(targets[1].label,
           QStringLiteral("Slurm cluster hpc (2 partition(s), 4 node(s), up to 4 GPU(s) per node)"));
  QVERIFY(!w->clusterLaunch());

  w->show();
  while (w->currentId() != RunWizard::Hardware) w->next();
  QWizardPage* page = w->currentPage();
  auto* partitionBox = child<QComboBox>(page, "slurmPartition");
  QVERIFY(!partitionBox->isVisible());  // only for a cluster target
  child<QComboBox>(page, "target")->setCurrentIndex(1);
  QVERIFY(partitionBox->isVisible());
  QVERIFY(child<QLineEdit>(page, "slurmTime")->isVisible());
  QVERIFY(child<QCheckBox>(page, "slurmAutoResume")->isVisible());
  QVERIFY(!child<QCheckBox>(page, "autoRecover")->isVisible());  // the nodes' rows stay hidden

  // The default partition (cpu): a CPU job on one node, unpriced.
  QVERIFY(w->clusterLaunch().has_value());
  QCOMPARE(w->clusterLaunch()->cluster, QStringLiteral("hpc"));
  QCOMPARE(w->clusterLaunch()->gpusPerNode, 0);
  QCOMPARE(w->config().run.device, std::string("cpu"));
  const QString cpuFacts = child<QLabel>(page, "slurmFacts")->text();
  QVERIFY2(cpuFacts.contains(QStringLiteral("cpu: 2 node(s)")) && cpuFacts.contains(QStringLiteral("8 CPUs per node")) &&
               cpuFacts.contains(QStringLiteral("unpriced")),
           qPrintable(cpuFacts));

  // The gpu partition, 2 nodes x 4 GPUs: 8 ranks on CUDA, dp 8, $16/h, planned as an A100.
  partitionBox->setCurrentText(QStringLiteral("gpu"));
  child<QSpinBox>(page, "slurmGpus")->setValue(4);
  child<QSpinBox>(page, "slurmNodes")->setValue(2);
  QCOMPARE(w->clusterLaunch()->partition, QStringLiteral("gpu"));
  QCOMPARE(w->ranks(), 8);
  QCOMPARE(w->config().parallel.dp, 8);
  QCOMPARE(w->config().run.device, std::string("cuda"));
  QCOMPARE(child<QSpinBox>(page, "ranks")->value(), 8);
  const QString gpuFacts = child<QLabel>(page, "slurmFacts")->text();
  QVERIFY2(gpuFacts.contains(QStringLiteral("4 × a100 GPU per node")) && gpuFacts.contains(QStringLiteral("$16.00/h")),
           qPrintable(gpuFacts));
  const auto plan = w->draft()->plan();
  QVERIFY2(plan.has_value(), qPrintable(shownProblems(page)));
  QVERIFY2(plan->device.name.find("A100") != std::string::npos, plan->device.name.c_str());
  QVERIFY2(page->isComplete(), qPrintable(shownProblems(page)));

  // Back to this machine: no Slurm launch, rows hidden.
  child<QComboBox>(page, "target")->setCurrentIndex(0);
  QVERIFY(!w->clusterLaunch());
  QVERIFY(!partitionBox->isVisible());
  QCOMPARE(w->config().run.device, std::string("cpu"));
}

void TestWizardCluster::slurmRefusalsShowBesideTheirFields() {
  auto w = loadedWizard();
  QWizardPage* page = chooseCluster(w.get());
  const auto beside = [page](const char* path) {
    QLabel* l = page->findChild<QLabel*>(QStringLiteral("fieldProblem-") + QLatin1String(path));
    return l && !l->isHidden() ? l->text() : QString();
  };
  auto* partitionBox = child<QComboBox>(page, "slurmPartition");
  partitionBox->setCurrentText(QStringLiteral("cpu;rm -rf ~"));
  QVERIFY(!page->isComplete());
  QVERIFY2(beside("slurm.partition").contains(QStringLiteral("partition")), qPrintable(shownProblems(page)));
  partitionBox->setCurrentText(QStringLiteral("gpu"));
  QVERIFY2(beside("slurm.partition").isEmpty(), qPrintable(shownProblems(page)));

  auto* time = child<QLineEdit>(page, "slurmTime");
  time->setText(QStringLiteral("forever"));
  emit time->textEdited(time->text());
  QVERIFY2(beside("slurm.time").contains(QStringLiteral("[D-]HH:MM:SS")), qPrintable(shownProblems(page)));
  time->setText(QStringLiteral("00:04:00"));
  emit time->textEdited(time->text());
  QVERIFY2(beside("slurm.lead").contains(QStringLiteral("shorter than the time limit")),
           qPrintable(shownProblems(page)));  // the 300 s lead does not fit in 4 minutes
  time->setText(QStringLiteral("02:00:00"));
  emit time->textEdited(time->text());

  child<QSpinBox>(page, "slurmGpus")->setValue(8);
  QVERIFY2(beside("slurm.gpus").contains(QStringLiteral("partition gpu has 4 GPU(s) per node")),
           qPrintable(shownProblems(page)));
  child<QSpinBox>(page, "slurmGpus")->setValue(4);
  child<QSpinBox>(page, "slurmNodes")->setValue(3);
  QVERIFY2(beside("slurm.nodes").contains(QStringLiteral("partition gpu has 2 node(s)")),
           qPrintable(shownProblems(page)));
  child<QSpinBox>(page, "slurmNodes")->setValue(1);
  QVERIFY2(page->isComplete(), qPrintable(shownProblems(page)));

  // A CPU job whose ranks do not split over the nodes.
  partitionBox->setCurrentText(QStringLiteral("cpu"));
  child<QSpinBox>(page, "slurmGpus")->setValue(0);
  child<QSpinBox>(page, "slurmNodes")->setValue(2);
  child<QSpinBox>(page, "dp")->setValue(3);
  QVERIFY2(beside("slurm.nodes").contains(QStringLiteral("3 rank(s) cannot be split evenly over 2 node(s)")),
           qPrintable(shownProblems(page)));
  child<QSpinBox>(page, "dp")->setValue(2);
  QVERIFY2(page->isComplete(), qPrintable(shownProblems(page)));

  // A budget on the unpriced cpu partition: the Budget page says how to price it.
  w->draft()->edit([](flotilla::RunConfig& c) { c.budget.max_usd = 5; });
  while (w->currentId() != RunWizard::Budget) w->next();
  QWizardPage* budget = w->currentPage();
  QVERIFY(!budget->isComplete());
  QVERIFY2(shownProblems(budget).contains(QStringLiteral("flotilla clusters price hpc cpu")),
           qPrintable(shownProblems(budget)));
}

void TestWizardCluster::reviewShowsTheBatchScript() {
  auto w = loadedWizard();
  QWizardPage* page = chooseCluster(w.get());
  child<QComboBox>(page, "slurmPartition")->setCurrentText(QStringLiteral("gpu"));
  child<QSpinBox>(page, "slurmGpus")->setValue(4);
  child<QSpinBox>(page, "slurmNodes")->setValue(2);
  child<QSpinBox>(page, "slurmLead")->setValue(120);
  child<QCheckBox>(page, "slurmAutoResume")->setChecked(true);
  auto* time = child<QLineEdit>(page, "slurmTime");
  time->setText(QStringLiteral("02:00:00"));
  emit time->textEdited(time->text());
  QVERIFY2(page->isComplete(), qPrintable(shownProblems(page)));
  while (w->currentId() != RunWizard::Review) w->next();
  auto* script = child<QPlainTextEdit>(w->currentPage(), "batchScript");
  QVERIFY(script->isVisible());
  const QString s = script->toPlainText();
  for (const char* line : {"#SBATCH --time=02:00:00\n", "#SBATCH --signal=B:USR1@120\n", "#SBATCH --requeue\n",
                           "#SBATCH --partition=gpu\n", "#SBATCH --nodes=2\n", "#SBATCH --gpus-per-node=4\n",
                           "#SBATCH --ntasks-per-node=4\n"})
    QVERIFY2(s.contains(QLatin1String(line)), qPrintable(QStringLiteral("missing %1 in:\n%2").arg(line, s)));
  const QString title = child<QLabel>(w->currentPage(), "batchScriptTitle")->text();
  QVERIFY2(title.contains(QStringLiteral("cluster hpc")) && title.contains(QStringLiteral("$16.00/h")), qPrintable(title));
  QCOMPARE(w->clusterLaunch()->autoResume, true);
  QCOMPARE(w->clusterLaunch()->signalLeadSeconds, 120);
}

void TestWizardCluster::finishSubmitsThroughARemoteRun() {
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
  QTRY_COMPARE_WITH_TIMEOUT(w->draft()->targets().size(), 2, 10000);
  while (w->currentId() != RunWizard::Hardware) w->next();
  w->hardwarePage()->findChild<QComboBox*>(QStringLiteral("target"))->setCurrentIndex(1);
  while (w->currentId() != RunWizard::Review) w->next();
  QTRY_VERIFY(w->currentPage()->isComplete());
  QSignalSpy started(&page, &flotilla::ui::RunsPage::runOpened);
  w->button(QWizard::FinishButton)->click();
  QCOMPARE(runs.count(), 1);  // one list for every place (issue 32)  // nothing on this machine
  QCOMPARE(started.count(), 1);
  flotilla::ui::ServiceRun* run = runs.all().front();
  QCOMPARE(run->cluster(), QStringLiteral("hpc"));
  QVERIFY(!run->canCheckpoint());
  QVERIFY(run->checkpointUnsupportedReason().contains(QStringLiteral("time limit")));
  QTRY_COMPARE_WITH_TIMEOUT(run->state(), flotilla::ui::RunHandle::State::Failed, 20000);
  QString log;
  for (const auto& line : run->log()) log += line.text + QLatin1Char('\n');
  QVERIFY2(log.contains(QStringLiteral("starting on slurm cluster hpc")), qPrintable(log));
  QVERIFY2(log.contains(QStringLiteral("127.0.0.1:1")), qPrintable(log));
  // The login node never answered: no run was stored.
  flotilla::db::Database db(m_db.toStdString());
  QVERIFY(flotilla::db::list_runs(db).empty());
}

QTEST_MAIN(TestWizardCluster)
#include "test_wizard_cluster.moc"
