// The Runs table model (LocalRunsModel under QAbstractItemModelTester, over the LocalRuns service
// with the fake worker) and the Runs page around it: "Run the demo" starts a run, the empty state
// gives way to the table, rows follow their run's status, and a missing worker is reported on
// the page instead of failing silently.
#include <QAbstractItemModelTester>
#include <QPushButton>
#include <QSignalSpy>
#include <QTableView>
#include <QTemporaryDir>
#include <QtTest>

#include "fake_worker.h"
#include "ui/runs/localruns.h"
#include "ui/runs/localrunsmodel.h"
#include "ui/runs/runspage.h"
#include "ui/runs/servicerun.h"

using flotilla::ui::LocalRuns;
using flotilla::ui::LocalRunsModel;
using flotilla::ui::RunsPage;
using flotilla::ui::ServiceRun;

class TestRunsPage : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase();
  void modelFollowsTheService();
  void runTheDemoStartsARunAndShowsTheTable();
  void aMissingWorkerIsShownOnThePage();
  void durationsReadAsClockTime();

 private:
  QTemporaryDir m_tmp;
  QString m_fake;
};

void TestRunsPage::initTestCase() {
  QVERIFY(m_tmp.isValid());
  m_fake = fake_worker::write(m_tmp.path());
  QVERIFY(!m_fake.isEmpty());
}

void TestRunsPage::modelFollowsTheService() {
  LocalRuns runs(m_tmp.filePath(QStringLiteral("ws-model")));
  runs.setWorkerPath(m_fake);
  runs.setDemoSteps(4);
  LocalRunsModel model(&runs);
  QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
  QCOMPARE(model.rowCount(), 0);
  QCOMPARE(model.columnCount(), int(LocalRunsModel::ColumnCount));
  QCOMPARE(model.headerData(LocalRunsModel::Status, Qt::Horizontal).toString(), QStringLiteral("Status"));

  QSignalSpy inserted(&model, &QAbstractItemModel::rowsInserted);
  QSignalSpy changed(&model, &QAbstractItemModel::dataChanged);
  ServiceRun* first = runs.startDemo();
  QVERIFY(first);
  QCOMPARE(inserted.count(), 1);
  QCOMPARE(model.rowCount(), 1);
  QCOMPARE(model.runAt(0), first);
  QCOMPARE(model.index(0, LocalRunsModel::Name).data().toString(), first->name());
  QCOMPARE(qobject_cast<ServiceRun*>(model.index(0, 0).data(LocalRunsModel::RunRole).value<QObject*>()),
           first);
  QSignalSpy firstDone(first, &ServiceRun::finished);
  QVERIFY(firstDone.wait(10000));
  QVERIFY(changed.count() > 0);
  QCOMPARE(model.index(0, LocalRunsModel::Status).data().toString(), QStringLiteral("completed"));
  QCOMPARE(model.index(0, LocalRunsModel::Progress).data().toString(), QStringLiteral("4 / 4"));
  QCOMPARE(model.index(0, LocalRunsModel::Loss).data().toString(), QStringLiteral("96.5000"));
  QCOMPARE(model.index(0, LocalRunsModel::ValLoss).data().toString(), QStringLiteral("97.2500"));
  QCOMPARE(model.index(0, LocalRunsModel::TokensPerSec).data().toString(),
           QLocale().toString(1234.0, 'f', 0));
  QCOMPARE(model.index(0, LocalRunsModel::Loss).data(Qt::TextAlignmentRole).toInt(),
           int(Qt::AlignRight | Qt::AlignVCenter));
  QCOMPARE(model.index(0, LocalRunsModel::Name).data(Qt::ToolTipRole).toString(), first->runDir());

  // A second run that fails: its own row, its own status, the first row untouched.
  qputenv("FAKE_EXIT", "3");
  ServiceRun* second = runs.startDemo();
  qunsetenv("FAKE_EXIT");
  QVERIFY(second);
  QCOMPARE(model.rowCount(), 2);
  QSignalSpy secondDone(second, &ServiceRun::finished);
  QVERIFY(secondDone.wait(10000));
  QCOMPARE(model.index(1, LocalRunsModel::Status).data().toString(),
           QStringLiteral("failed (exit 3: config error)"));
  QCOMPARE(model.index(0, LocalRunsModel::Status).data().toString(), QStringLiteral("completed"));
  QVERIFY(!model.index(2, 0).isValid());
  QCOMPARE(model.runAt(5), nullptr);
}

void TestRunsPage::runTheDemoStartsARunAndShowsTheTable() {
  LocalRuns runs(m_tmp.filePath(QStringLiteral("ws-page")));
  runs.setWorkerPath(m_fake);
  runs.setDemoSteps(3);
  RunsPage page(&runs);
  page.resize(1000, 600);
  page.show();
  QVERIFY(QTest::qWaitForWindowExposed(&page));
  QSignalSpy opened(&page, &RunsPage::runOpened);
  QPushButton* demo = page.runDemoButton();
  QVERIFY(demo->isVisible() && demo->isEnabled());
  QCOMPARE(demo->objectName(), QStringLiteral("runDemoButton"));
  QVERIFY(page.newRunButton()->isEnabled());
  QTest::mouseClick(demo, Qt::LeftButton);
  QCOMPARE(opened.count(), 1);
  auto* run = qvariant_cast<ServiceRun*>(opened.at(0).at(0));
  QVERIFY(run);
  QCOMPARE(runs.at(0), run);
  // The table replaced the empty state; its toolbar keeps both actions.
  QVERIFY(page.table()->isVisible());
  QCOMPARE(page.table()->model()->rowCount(), 1);
  QCOMPARE(page.runDemoButton()->objectName(), QStringLiteral("runDemoToolbarButton"));
  QVERIFY(page.runDemoButton()->isVisible());
  QVERIFY(page.newRunButton()->isEnabled());
  QVERIFY(page.errorText().isEmpty());
  QSignalSpy done(run, &ServiceRun::finished);
  QVERIFY(done.wait(10000));
  // Double-clicking a row opens its run (on the Live page, in the app).
  emit page.table()->doubleClicked(page.table()->model()->index(0, LocalRunsModel::Status));
  QCOMPARE(opened.count(), 2);
  QCOMPARE(qvariant_cast<ServiceRun*>(opened.at(1).at(0)), run);
}

void TestRunsPage::aMissingWorkerIsShownOnThePage() {
  LocalRuns runs(m_tmp.filePath(QStringLiteral("ws-missing")));
  runs.setWorkerPath(m_tmp.filePath(QStringLiteral("no-such-worker")));
  RunsPage page(&runs);
  page.show();
  QVERIFY(QTest::qWaitForWindowExposed(&page));
  QSignalSpy opened(&page, &RunsPage::runOpened);
  QTest::mouseClick(page.runDemoButton(), Qt::LeftButton);
  QCOMPARE(opened.count(), 0);
  QVERIFY2(page.errorText().startsWith(QStringLiteral("Cannot start the demo.")),
           qPrintable(page.errorText()));
  QVERIFY2(page.errorText().contains(QStringLiteral("no-such-worker")), qPrintable(page.errorText()));
  QCOMPARE(page.runDemoButton()->objectName(), QStringLiteral("runDemoButton"));  // still the empty state
}

void TestRunsPage::durationsReadAsClockTime() {
  QCOMPARE(flotilla::ui::formatDuration(0), QStringLiteral("0:00"));
  QCOMPARE(flotilla::ui::formatDuration(65'400), QStringLiteral("1:05"));
  QCOMPARE(flotilla::ui::formatDuration(3'723'000), QStringLiteral("1:02:03"));
}

QTEST_MAIN(TestRunsPage)
#include "test_runspage.moc"
