// The Resume / Fork dialog (ui/runs/relaunchdialog.h) offscreen: the places it offers (this
// machine, stored SSH nodes, stored Slurm clusters from a real SQLite store), the layout it edits
// (dp, tp, pp, ZeRO; the ranks follow), the planner's fit it shows for that layout (the same
// checkFit the wizard shows, so the figures are compared with it), the global batch it keeps, and
// the engine's refusal of a layout that cannot train (tp that does not divide the heads), which
// disables OK.
#include <QComboBox>
#include <QLabel>
#include <QPushButton>
#include <QSpinBox>
#include <QTemporaryDir>
#include <QtTest>

#include "db/clusters.h"
#include "db/database.h"
#include "db/nodes.h"
#include "engine/config/config_validate.h"
#include "ui/runs/relaunchdialog.h"
#include "ui/runs/storerunsview.h"
#include "ui/wizard/memorybar.h"
#include "ui/wizard/modelfit.h"

using flotilla::ui::HardwareTarget;
using flotilla::ui::RelaunchDialog;

class TestRelaunchDialog : public QObject {
  Q_OBJECT

 private slots:
  void offersEveryStoredPlaceAndPreselectsTheRunsOwn();
  void changingTheLayoutKeepsTheBatchAndShowsThePlannersFit();
  void aLayoutTheEngineRefusesDisablesOk();
  void forkChoosesACheckpoint();
};

namespace {

flotilla::ProbeResult cpuMachine() {
  flotilla::ProbeResult p;
  p.cpu_model = "Test CPU";
  p.physical_cores = 8;
  p.logical_cpus = 8;
  p.memory_total_bytes = 32ull << 30;
  return p;
}

flotilla::RunConfig tinyConfig() {
  flotilla::RunConfig c;
  c.run.name = "tiny";
  c.model.preset = "custom";
  c.model.n_layer = 4;
  c.model.n_head = 4;
  c.model.n_embd = 64;
  c.model.vocab_size = 512;
  c.model.max_seq_len = 64;
  c.train.seq_len = 32;
  c.train.micro_batch = 4;
  c.parallel.dp = 2;
  c.parallel.zero = 1;
  return c;
}

}  // namespace

void TestRelaunchDialog::offersEveryStoredPlaceAndPreselectsTheRunsOwn() {
  QTemporaryDir dir;
  QVERIFY(dir.isValid());
  const QString path = dir.filePath(QStringLiteral("runs.db"));
  {
    flotilla::db::Database db(path.toStdString());
    for (const char* name : {"n1", "n2"}) {
      flotilla::db::SshNode n;
      n.name = name;
      n.host = "127.0.0.1";
      n.port = 22;
      n.user = "me";
      flotilla::db::add_ssh_node(db, n);
    }
    flotilla::db::SlurmCluster c;
    c.name = "hpc";
    c.login_host = "login.example";
    c.user = "me";
    flotilla::db::add_cluster(db, c);
  }
  const QList<HardwareTarget> targets = flotilla::ui::relaunchTargets(cpuMachine(), path);
  // This machine's CPU, n1, n2, "all 2 nodes", the cluster.
  int cpu = -1, both = -1, cluster = -1;
  for (int i = 0; i < targets.size(); ++i) {
    if (targets[i].kind == HardwareTarget::Kind::Cpu) cpu = i;
    if (targets[i].kind == HardwareTarget::Kind::Nodes && targets[i].nodes == QStringList{"n1", "n2"})
      both = i;
    if (targets[i].kind == HardwareTarget::Kind::Cluster && targets[i].cluster == QLatin1String("hpc"))
      cluster = i;
  }
  QVERIFY(cpu >= 0);
  QVERIFY2(both >= 0, "both stored nodes are offered together");
  QVERIFY(cluster >= 0);
  using flotilla::runs::Placement;
  const flotilla::RunConfig config = tinyConfig();
  QCOMPARE(flotilla::ui::relaunchTargetIndex(targets, Placement::here(), config), cpu);
  QCOMPARE(flotilla::ui::relaunchTargetIndex(targets, Placement::on_nodes({"n1", "n2"}), config), both);
  QCOMPARE(flotilla::ui::relaunchTargetIndex(targets, Placement::on_cluster("hpc"), config), cluster);
  QCOMPARE(flotilla::ui::relaunchTargetIndex(targets, Placement::on_nodes({"n9"}), config), -1);
  // The placement each target stands for is what the runs service is asked for.
  QCOMPARE(flotilla::ui::placementOf(targets[both], config).text(), Placement::on_nodes({"n1", "n2"}).text());
  QCOMPARE(flotilla::ui::placementOf(targets[cluster], config).cluster, std::string("hpc"));

  RelaunchDialog dialog(RelaunchDialog::Mode::Resume, QStringLiteral("tiny"), tinyConfig(), targets, both);
  QCOMPARE(dialog.targetBox()->count(), targets.size());
  QCOMPARE(dialog.targetBox()->currentIndex(), both);
  QVERIFY(dialog.targetBox()->currentText().contains(QStringLiteral("where it ran")));
  QVERIFY(!dialog.checkpointBox()->isVisibleTo(&dialog));
  QCOMPARE(dialog.choice().targetChanged, false);
  dialog.targetBox()->setCurrentIndex(cpu);
  const flotilla::ui::RelaunchChoice moved = dialog.choice();
  QVERIFY(moved.targetChanged);
  QCOMPARE(moved.target.kind, HardwareTarget::Kind::Cpu);
  QCOMPARE(moved.config.run.device, std::string("cpu"));
  QCOMPARE(moved.layoutChanged, false);
}

void TestRelaunchDialog::changingTheLayoutKeepsTheBatchAndShowsThePlannersFit() {
  const QList<HardwareTarget> targets = flotilla::ui::hardwareTargets(cpuMachine());
  const flotilla::RunConfig original = tinyConfig();
  RelaunchDialog dialog(RelaunchDialog::Mode::Resume, QStringLiteral("tiny"), original, targets, 0);
  QCOMPARE(dialog.dpBox()->value(), 2);
  QCOMPARE(dialog.zeroBox()->value(), 1);
  QVERIFY(dialog.okButton()->isEnabled());
  QVERIFY2(dialog.fitLabel()->text().startsWith(QStringLiteral("Fits:")),
           qPrintable(dialog.fitLabel()->text()));

  // dp 2 -> 1, ZeRO 1 -> 0: one rank, the same tokens per step, more memory per rank.
  const quint64 usedAtTwo = dialog.memoryBar()->used();
  dialog.dpBox()->setValue(1);
  dialog.zeroBox()->setValue(0);
  const flotilla::ui::RelaunchChoice c = dialog.choice();
  QVERIFY(c.layoutChanged);
  QCOMPARE(c.ranks, 1);
  QCOMPARE(c.config.parallel.dp, 1);
  QCOMPARE(c.config.parallel.zero, 0);
  QCOMPARE(flotilla::tokens_per_step(c.config), flotilla::tokens_per_step(original));
  QVERIFY(dialog.ranksLabel()->text().startsWith(QStringLiteral("1 ")));
  QVERIFY2(dialog.problem().isEmpty(), qPrintable(dialog.problem()));
  // The figure is the wizard's: checkFit of the chosen config on the chosen place.
  const flotilla::ui::FitCheck wizard = flotilla::ui::checkFit(c.config, targets[0], 1);
  QVERIFY(wizard.planned);
  QCOMPARE(dialog.memoryBar()->used(), wizard.used);
  QCOMPARE(dialog.fitLabel()->text(), wizard.text);
  QVERIFY2(dialog.memoryBar()->used() > usedAtTwo, "one rank holds what ZeRO-1 over two shared");
  QVERIFY2(dialog.batchLabel()->text().contains(QStringLiteral("accumulation 1 → 2")),
           qPrintable(dialog.batchLabel()->text()));
  QVERIFY(c.layout.dp == 1 && c.layout.zero == 0 && !c.layout.tp && !c.layout.pp);  // only what changed
  QVERIFY(dialog.okButton()->isEnabled());
  // What a user sees (docs and review): the dialog as it stands now.
  dialog.show();
  QVERIFY(QTest::qWaitForWindowExposed(&dialog));
  QVERIFY(dialog.grab().save(QStringLiteral(FLOTILLA_SCREENSHOT_DIR "/relaunch-dialog.png")));
}

void TestRelaunchDialog::aLayoutTheEngineRefusesDisablesOk() {
  const QList<HardwareTarget> targets = flotilla::ui::hardwareTargets(cpuMachine());
  RelaunchDialog dialog(RelaunchDialog::Mode::Resume, QStringLiteral("tiny"), tinyConfig(), targets, 0);
  dialog.dpBox()->setValue(1);
  dialog.tpBox()->setValue(3);  // 4 heads do not split over 3 ranks
  QVERIFY(!dialog.okButton()->isEnabled());
  QVERIFY(!dialog.canAccept());
  QVERIFY2(dialog.problem().contains(QStringLiteral("tp")), qPrintable(dialog.problem()));
  QVERIFY2(dialog.fitLabel()->text().startsWith(QStringLiteral("Cannot resume on this layout")),
           qPrintable(dialog.fitLabel()->text()));
  // More ranks than this machine's 8 cores.
  dialog.tpBox()->setValue(1);
  dialog.dpBox()->setValue(16);
  QVERIFY(!dialog.okButton()->isEnabled());
  QVERIFY2(dialog.problem().contains(QStringLiteral("16 ranks")), qPrintable(dialog.problem()));
  // Four ranks cannot split the run's 256-token batch into micro-batches of 4 x 32: refused in the
  // engine's words, as the worker would refuse it.
  dialog.dpBox()->setValue(4);
  QVERIFY(!dialog.okButton()->isEnabled());
  QVERIFY2(dialog.problem().contains(QStringLiteral("train.global_batch_tokens")),
           qPrintable(dialog.problem()));
  dialog.dpBox()->setValue(1);
  QVERIFY2(dialog.okButton()->isEnabled(), qPrintable(dialog.problem()));
}

void TestRelaunchDialog::forkChoosesACheckpoint() {
  const QList<HardwareTarget> targets = flotilla::ui::hardwareTargets(cpuMachine());
  RelaunchDialog dialog(RelaunchDialog::Mode::Fork, QStringLiteral("tiny"), tinyConfig(), targets, 0);
  QVERIFY(dialog.checkpointBox()->isVisibleTo(&dialog));
  QVERIFY2(!dialog.okButton()->isEnabled(), "no checkpoint: nothing to fork from");
  dialog.setCheckpoints(
      {{QStringLiteral("/runs/tiny/checkpoints/step_00000020"), 20, QStringLiteral("step 20")},
       {QStringLiteral("/runs/tiny/checkpoints/step_00000010"), 10, QStringLiteral("step 10")}});
  QVERIFY(dialog.okButton()->isEnabled());
  QCOMPARE(dialog.choice().checkpointDir, QStringLiteral("/runs/tiny/checkpoints/step_00000020"));
  dialog.checkpointBox()->setCurrentIndex(1);
  QCOMPARE(dialog.choice().checkpointDir, QStringLiteral("/runs/tiny/checkpoints/step_00000010"));
  QCOMPARE(dialog.okButton()->text(), QStringLiteral("Fork"));
}

QTEST_MAIN(TestRelaunchDialog)
#include "test_relaunchdialog.moc"
