// The New Run wizard's Checkpoints & evaluation page sets the evaluation tasks a run scores while
// it trains (eval.tasks, eval.task_limit, checkpoint.keep_best), typed or added, into the run's
// config; a missing task file and a keep_best naming no listed task are shown beside their fields
// (validate()'s messages under the key paths) and hold the page; the summary counts the tasks.
#include <QComboBox>
#include <QLabel>
#include <QLineEdit>
#include <QSpinBox>
#include <QTemporaryDir>
#include <QtTest>

#include <memory>

#include "ui/wizard/checkpointpage.h"
#include "ui/wizard/runwizard.h"
#include "wizard_helpers.h"

using flotilla::ui::RunWizard;
using namespace wizard_helpers;

class TestWizardEvalTasks : public QObject {
  Q_OBJECT

 private slots:
  void tasksReachTheConfigAndBadOnesAreShown();

 private:
  QTemporaryDir m_tmp;
};

void TestWizardEvalTasks::tasksReachTheConfigAndBadOnesAreShown() {
  QVERIFY(m_tmp.isValid());
  auto w = std::make_unique<RunWizard>(nullptr, m_tmp.filePath(QStringLiteral("templates")));
  w->setMachine(cpuMachine());
  w->resize(900, 900);
  w->show();
  QVERIFY(QTest::qWaitForWindowExposed(w.get()));
  QCOMPARE(w->advanceTo(RunWizard::Checkpoints), int(RunWizard::Checkpoints));
  auto* page = w->checkpointPage();
  auto* tasks = child<QLineEdit>(page, "evalTasks");
  QVERIFY(tasks->isVisibleTo(page) && tasks->text().isEmpty());
  QCOMPARE(child<QComboBox>(page, "keepBest")->currentText(), QStringLiteral("auto"));

  const QString arc = QStringLiteral(FLOTILLA_SOURCE_DIR "/resources/eval/arc-mini.jsonl");
  QTest::keyClicks(tasks, arc + QStringLiteral("?limit=10"));
  QCOMPARE(QString::fromStdString(w->config().eval.tasks), arc + QStringLiteral("?limit=10"));
  child<QSpinBox>(page, "evalTaskLimit")->setValue(50);
  QCOMPARE(w->config().eval.task_limit, 50);
  QTRY_VERIFY2(page->isComplete(), qPrintable(shownProblems(page)));
  QTRY_VERIFY2(child<QLabel>(page, "checkpointSummary")->text().contains(QStringLiteral("1 evaluation task")),
               qPrintable(child<QLabel>(page, "checkpointSummary")->text()));

  // A file that is not there: named beside the field, the page held.
  tasks->clear();
  QTest::keyClicks(tasks, QStringLiteral("/nowhere/hellaswag.jsonl"));
  QTRY_VERIFY2(shownProblems(page).contains(QStringLiteral("\"/nowhere/hellaswag.jsonl\" does not exist")),
               qPrintable(shownProblems(page)));
  QVERIFY(!page->isComplete());

  // Back to a real file; keep_best naming another task is refused, then a listed one is taken.
  tasks->clear();
  QTest::keyClicks(tasks, arc);
  auto* keep = child<QComboBox>(page, "keepBest");
  keep->setCurrentText(QStringLiteral("task/hellaswag/acc_norm"));
  QTRY_VERIFY2(shownProblems(page).contains(QStringLiteral("checkpoint.keep_best")),
               qPrintable(shownProblems(page)));
  keep->setCurrentText(QStringLiteral("task/arc-mini/acc"));
  QTRY_VERIFY2(page->isComplete(), qPrintable(shownProblems(page)));
  QCOMPARE(QString::fromStdString(w->config().checkpoint.keep_best), QStringLiteral("task/arc-mini/acc"));
  QCOMPARE(QString::fromStdString(w->config().eval.tasks), arc);
}

QTEST_MAIN(TestWizardEvalTasks)
#include "test_wizard_eval_tasks.moc"
