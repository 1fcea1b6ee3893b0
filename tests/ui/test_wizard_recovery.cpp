// Automatic recovery as a launch option of runs on SSH nodes (issue 7 item 4), without sshd:
//  - the wizard's Hardware page shows "Recover automatically after a preemption" and "Spare nodes"
//    only for node targets; the checkbox defaults to on when a chosen node is spot, a user's
//    choice sticks across target changes, spares are the stored nodes not chosen as targets;
//  - Finish hands the choice to the ServiceRun (RunsPage -> LocalRuns::startOnNodes);
//  - the stored policy round-trips through its event JSON;
//  - the Runs table opens a run on nodes as a ServiceRun: one nobody watches is offered for
//    attaching (declined: the terminal command is named), an ended one says where its data is,
//    neither opens a local folder.
#include <QAbstractButton>
#include <QCheckBox>
#include <QComboBox>
#include <QDir>
#include <QListWidget>
#include <QPushButton>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QtTest>

#include "db/database.h"
#include "db/nodes.h"
#include "db/run_store.h"
#include "ui/runs/localruns.h"
#include "ui/runs/runspage.h"
#include "ui/runs/servicerun.h"
#include "ui/runs/storerunsview.h"
#include "ui/runs/storeservice.h"
#include "ui/wizard/configdraft.h"
#include "ui/wizard/hardwarepage.h"
#include "ui/wizard/runwizard.h"

using flotilla::ui::RecoveryChoice;
using flotilla::ui::RunWizard;
using flotilla::ui::ServiceRun;

namespace {

flotilla::ProbeResult cpuMachine() {
  flotilla::ProbeResult p;
  p.cpu_model = "Test CPU";
  p.physical_cores = 8;
  p.memory_total_bytes = 32ull << 30;
  return p;
}

void addNode(flotilla::db::Database& db, const std::string& name, bool spot) {
  flotilla::db::SshNode n;
  n.name = name;
  n.host = "127.0.0.1";
  n.port = 1;  // nothing listens: a connect fails at once
  n.usd_per_hour = 2.0;
  n.spot = spot;
  const int64_t id = flotilla::db::add_ssh_node(db, n);
  flotilla::db::set_node_gpus(db, id, "NVIDIA H100 80GB HBM3", 1);
}

int indexOfTarget(const RunWizard& w, const QStringList& nodes) {
  const auto& targets = w.draft()->targets();
  for (int i = 0; i < targets.size(); ++i)
    if (targets[i].nodes == nodes) return i;
  return -1;
}

}  // namespace

class TestWizardRecovery : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase();
  void optionsOnlyForNodeTargets();
  void finishHandsTheChoiceOver();
  void policyJsonRoundTrips();
  void storedRunOnNodesOpensNoFolder();

 private:
  QTemporaryDir m_tmp;
  QString m_db;
};

void TestWizardRecovery::initTestCase() {
  QVERIFY(m_tmp.isValid());
  m_db = m_tmp.filePath(QStringLiteral("flotilla.db"));
  flotilla::db::Database db(m_db.toStdString());
  addNode(db, "a", false);
  addNode(db, "b", true);
  addNode(db, "c", false);
}

void TestWizardRecovery::optionsOnlyForNodeTargets() {
  RunWizard w(nullptr, m_tmp.filePath(QStringLiteral("templates")));
  w.setMachine(cpuMachine());
  QSignalSpy loaded(&w, &RunWizard::nodesLoaded);
  w.loadNodes(m_db);
  QVERIFY(loaded.wait(10000));
  w.resize(900, 760);
  w.show();
  w.next();
  w.next();
  QCOMPARE(w.currentId(), int(RunWizard::Hardware));
  QWizardPage* page = w.currentPage();
  auto* combo = page->findChild<QComboBox*>(QStringLiteral("target"));
  auto* autoRecover = page->findChild<QCheckBox*>(QStringLiteral("autoRecover"));
  auto* spares = page->findChild<QListWidget*>(QStringLiteral("spareNodes"));
  QVERIFY(combo && autoRecover && spares);

  // This machine: no such options, nothing handed over.
  QCOMPARE(combo->currentIndex(), 0);
  QVERIFY(!autoRecover->isVisible());
  QVERIFY(!spares->isVisible());
  QVERIFY(!w.autoRecover());

  // On-demand node a: shown, off by default; spares are the other stored nodes.
  combo->setCurrentIndex(indexOfTarget(w, {QStringLiteral("a")}));
  QVERIFY(autoRecover->isVisible());
  QVERIFY(spares->isVisible());
  QVERIFY(!autoRecover->isChecked());
  QVERIFY(!spares->isEnabled());  // nothing to pick for while recovery is off
  QCOMPARE(spares->count(), 2);
  QCOMPARE(spares->item(0)->data(Qt::UserRole).toString(), QStringLiteral("b"));
  QCOMPARE(spares->item(1)->data(Qt::UserRole).toString(), QStringLiteral("c"));
  QCOMPARE(spares->item(0)->text(), QStringLiteral("b (1 × NVIDIA H100 80GB HBM3, $2.00/h, spot)"));
  QVERIFY(!w.autoRecover());

  // Spot node b alone: on by default; a, c are the candidates.
  combo->setCurrentIndex(indexOfTarget(w, {QStringLiteral("b")}));
  QVERIFY(autoRecover->isChecked());
  QVERIFY(w.autoRecover());
  QVERIFY(spares->isEnabled());

  // All three (b is spot): on; no candidates left.
  const int all = indexOfTarget(w, {QStringLiteral("a"), QStringLiteral("b"), QStringLiteral("c")});
  QVERIFY(all > 0);
  combo->setCurrentIndex(all);
  QVERIFY(autoRecover->isChecked());
  QCOMPARE(spares->count(), 0);
  QVERIFY(!spares->isEnabled());

  // Node a with c as the spare, recovery switched on by the user.
  combo->setCurrentIndex(indexOfTarget(w, {QStringLiteral("a")}));
  autoRecover->setChecked(true);
  QVERIFY(w.autoRecover());
  QVERIFY(spares->isEnabled());
  spares->item(1)->setCheckState(Qt::Checked);
  QCOMPARE(w.spareNodes(), QStringList{QStringLiteral("c")});
  QDir().mkpath(QStringLiteral(FLOTILLA_SCREENSHOT_DIR));
  QVERIFY(w.grab().save(QStringLiteral(FLOTILLA_SCREENSHOT_DIR "/wizard-3-nodes-recovery.png")));

  // The user's choice sticks: off stays off on a spot target.
  autoRecover->setChecked(false);
  combo->setCurrentIndex(indexOfTarget(w, {QStringLiteral("b")}));
  QVERIFY(!autoRecover->isChecked());
  QVERIFY(!w.autoRecover());
  QVERIFY(w.spareNodes().isEmpty());  // nothing handed over while off
  autoRecover->setChecked(true);
  QCOMPARE(w.spareNodes(), QStringList{QStringLiteral("c")});  // c is still a candidate for b

  // c chosen as a target: it can no longer be its own spare.
  combo->setCurrentIndex(indexOfTarget(w, {QStringLiteral("c")}));
  QVERIFY(w.spareNodes().isEmpty());
  QCOMPARE(spares->count(), 2);
  QCOMPARE(spares->item(1)->data(Qt::UserRole).toString(), QStringLiteral("b"));

  // Back to this machine: hidden, nothing handed over even though the box was on.
  combo->setCurrentIndex(0);
  QVERIFY(!autoRecover->isVisible());
  QVERIFY(!w.autoRecover());
}

void TestWizardRecovery::finishHandsTheChoiceOver() {
  flotilla::ui::StoreService store(m_db);
  flotilla::ui::LocalRuns runs(m_tmp.filePath(QStringLiteral("ws")));
  runs.setStore(&store);
  runs.setWorkerPath(QStringLiteral(FLOTILLA_WORKER_PATH));
  flotilla::ui::RunsPage page(&runs);
  page.resize(1000, 700);
  page.show();
  QTest::mouseClick(page.newRunButton(), Qt::LeftButton);
  RunWizard* w = page.wizard();
  QVERIFY(w);
  w->setMachine(cpuMachine());
  QTRY_VERIFY_WITH_TIMEOUT(
      indexOfTarget(*w, {QStringLiteral("a"), QStringLiteral("b"), QStringLiteral("c")}) > 0, 10000);
  w->next();
  w->next();
  auto* combo = w->hardwarePage()->findChild<QComboBox*>(QStringLiteral("target"));
  combo->setCurrentIndex(indexOfTarget(*w, {QStringLiteral("b")}));  // spot: on by default
  auto* spares = w->hardwarePage()->findChild<QListWidget*>(QStringLiteral("spareNodes"));
  QCOMPARE(spares->count(), 2);
  spares->item(1)->setCheckState(Qt::Checked);  // c
  spares->item(0)->setCheckState(Qt::Checked);  // a
  while (w->currentId() != RunWizard::Review) w->next();
  QTRY_VERIFY(w->currentPage()->isComplete());
  QSignalSpy started(&page, &flotilla::ui::RunsPage::runOpened);
  w->button(QWizard::FinishButton)->click();
  QCOMPARE(started.count(), 1);
  QCOMPARE(runs.all().size(), 1);
  ServiceRun* run = runs.all().front();
  const RecoveryChoice choice = run->recovery();
  QVERIFY(choice.enabled);
  QCOMPARE(choice.spares, QStringList({QStringLiteral("a"), QStringLiteral("c")}));  // store order
  QCOMPARE(choice.maxRecoveries, 3);
  QCOMPARE(run->nodes(), QStringList{QStringLiteral("b")});
  QString log;
  for (const auto& line : run->log()) log += line.text + QLatin1Char('\n');
  QVERIFY2(log.contains(QStringLiteral("automatic recovery after a preemption: on")), qPrintable(log));
  QVERIFY2(log.contains(QStringLiteral("spare nodes a, c")), qPrintable(log));
  QTRY_COMPARE_WITH_TIMEOUT(run->state(), flotilla::ui::RunHandle::State::Failed, 20000);  // port 1
}

void TestWizardRecovery::policyJsonRoundTrips() {
  RecoveryChoice c;
  c.enabled = true;
  c.spares = {QStringLiteral("c"), QStringLiteral("d")};
  c.maxRecoveries = 5;
  c.settleSeconds = 1.5;
  const QString json = flotilla::ui::recoveryPolicyJson(c);
  QCOMPARE(json, QStringLiteral(R"({"after":1.5,"auto":true,"max":5,"mirror":false,"spares":["c","d"]})"));
  const RecoveryChoice back = flotilla::ui::recoveryChoiceFromJson(json);
  QVERIFY(back.enabled);
  QCOMPARE(back.spares, c.spares);
  QCOMPARE(back.maxRecoveries, 5);
  QCOMPARE(back.settleSeconds, 1.5);
  // Nothing recorded (or garbage): off.
  QVERIFY(!flotilla::ui::recoveryChoiceFromJson(QStringLiteral("{}")).enabled);
  QVERIFY(!flotilla::ui::recoveryChoiceFromJson(QStringLiteral("not json")).enabled);
  const RecoveryChoice hostile = flotilla::ui::recoveryChoiceFromJson(
      QStringLiteral(R"({"auto":true,"max":-4,"after":-1,"spares":[3,""]})"));
  QCOMPARE(hostile.maxRecoveries, 0);
  QCOMPARE(hostile.settleSeconds, 0.0);
  QVERIFY(hostile.spares.isEmpty());
}

void TestWizardRecovery::storedRunOnNodesOpensNoFolder() {
  int64_t runningId = 0, endedId = 0;
  {
    flotilla::db::Database db(m_db.toStdString());
    flotilla::db::NewRun r;
    r.name = "onnodes";
    r.target = "a,b";
    r.run_dir = "a:/home/u/.flotilla/runs/onnodes-1";
    runningId = flotilla::db::create_run(db, r);
    flotilla::db::set_status(db, runningId, flotilla::db::RunStatus::kRunning);
    // Launched with recovery and spares c, d; one recovery done since (d is gone from the store).
    RecoveryChoice policy;
    policy.enabled = true;
    policy.spares = {QStringLiteral("c"), QStringLiteral("d")};
    policy.maxRecoveries = 3;
    policy.settleSeconds = 4;
    flotilla::db::add_event(db, runningId, flotilla::db::now_seconds(), flotilla::ui::kRecoveryPolicyEvent,
                            "info", "automatic recovery after a preemption: on",
                            flotilla::ui::recoveryPolicyJson(policy).toStdString());
    flotilla::db::add_event(db, runningId, flotilla::db::now_seconds(), "recovery", "warning",
                            "automatic recovery 1/3 (lost c): 2 node(s) x 1 rank(s) on a,b");
    r.name = "onnodes-ended";
    r.run_dir = "a:/home/u/.flotilla/runs/onnodes-ended-2";
    endedId = flotilla::db::create_run(db, r);
    flotilla::db::set_status(db, endedId, flotilla::db::RunStatus::kRunning);
    flotilla::db::set_status(db, endedId, flotilla::db::RunStatus::kCompleted);
  }
  flotilla::ui::StoreService store(m_db);
  flotilla::ui::LocalRuns runs(m_tmp.filePath(QStringLiteral("ws2")));
  runs.setStore(&store);
  runs.setWorkerPath(QStringLiteral(FLOTILLA_WORKER_PATH));
  flotilla::ui::StoreRunsView view(&store, &runs);
  QSignalSpy local(&view, &flotilla::ui::StoreRunsView::runOpened);
  QSignalSpy remote(&view, &flotilla::ui::StoreRunsView::runOpened);
  QSignalSpy errors(&view, &flotilla::ui::StoreRunsView::errorRaised);
  QSignalSpy messages(&view, &flotilla::ui::StoreRunsView::message);
  QStringList asked;
  bool answer = false;
  view.confirmAttach = [&](const QString& name, const QString& nodes) {
    asked << name + QLatin1Char('@') + nodes;
    return answer;
  };

  // Running on nodes, not watched here, the user declines: what to do here is named, no terminal
  // command (issue 18 item 7), and the run is shown from the store as it trains (issue 34 item 1),
  // not watched: a followed run, running as its row says.
  view.openLive(runningId);
  QCOMPARE(asked, QStringList{QStringLiteral("onnodes@nodes a, b")});
  QCOMPARE(remote.count(), 1);
  QCOMPARE(messages.count(), 1);
  QCOMPARE(messages.at(0).at(0).toString(),
           QStringLiteral("Not attached: onnodes is shown from the run database as it trains. Open it again to "
                          "watch it here."));
  QCOMPARE(runs.count(), 1);
  ServiceRun* shown = runs.all().front();
  QVERIFY(shown->isFollowed());
  QCOMPARE(shown->state(), flotilla::ui::RunHandle::State::Running);
  QCOMPARE(runs.runningCount(), 0);  // someone else's run

  // Accepted: a ServiceRun re-attaches (and fails here: nothing answers on port 1).
  answer = true;
  view.openLive(runningId);
  QCOMPARE(asked.size(), 2);
  QCOMPARE(remote.count(), 2);
  QCOMPARE(runs.all().size(), 2);
  ServiceRun* run = runs.all().back();
  QVERIFY(!run->isFollowed());
  QCOMPARE(qvariant_cast<flotilla::ui::RunHandle*>(remote.at(1).at(0)),
           static_cast<flotilla::ui::RunHandle*>(run));
  QCOMPARE(run->storeId(), qint64(runningId));
  QCOMPARE(runs.runForStoreId(runningId), run);
  QTRY_COMPARE_WITH_TIMEOUT(run->state(), flotilla::ui::RunHandle::State::Failed, 20000);
  // The re-attached watcher follows the launch's stored choice, less the recovery already done.
  const RecoveryChoice followed = run->recovery();
  QVERIFY(followed.enabled);
  QCOMPARE(followed.spares, QStringList({QStringLiteral("c"), QStringLiteral("d")}));
  QCOMPARE(followed.maxRecoveries, 2);
  QCOMPARE(followed.settleSeconds, 4.0);

  // Ended on nodes: nothing asked; shown from the store (its files stay on the nodes, its metrics
  // are in the run database: issue 34 item 1), in the state its row gives.
  asked.clear();
  view.openLive(endedId);
  QVERIFY(asked.isEmpty());
  QCOMPARE(errors.count(), 0);
  QCOMPARE(runs.count(), 3);
  QCOMPARE(remote.count(), 3);
  QVERIFY(runs.all().back()->isFollowed());
  QCOMPARE(runs.all().back()->state(), flotilla::ui::RunHandle::State::Completed);

  // Resume refuses a run on nodes, naming what the app offers instead (not a terminal command).
  QString error;
  QVERIFY(!runs.resumeRun(endedId, &error));
  QVERIFY2(
      error.contains(QStringLiteral("use Duplicate")) && !error.contains(QStringLiteral("flotilla runs")),
      qPrintable(error));
}

QTEST_MAIN(TestWizardRecovery)
#include "test_wizard_recovery.moc"
