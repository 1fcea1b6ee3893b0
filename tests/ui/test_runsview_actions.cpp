// The Runs view's actions that used to stall or short-change the user (issue 6 follow-ups):
//  1. Duplicate config opens the New Run wizard on its Review page with the run's values, and Back
//     walks every page, each showing them; the name loses the old launch's timestamp.
//  2. CSV export runs off the UI thread: exportCsv() returns at once with the view busy (busy bar
//     shown), the UI thread keeps running its timers while a large run is written, the file is
//     right, and a write error still reaches errorRaised.
//  3. "Fork from a checkpoint" lists the checkpoints off the UI thread: fork() returns at once,
//     the question comes later on the UI thread with only the checkpoints still on disk, newest
//     first; a run without any reports so.
#include <QDateTime>
#include <QDoubleSpinBox>
#include <QLineEdit>
#include <QProgressBar>
#include <QSignalSpy>
#include <QSpinBox>
#include <QTableView>
#include <QTemporaryDir>
#include <QThread>
#include <QTimer>
#include <QMessageBox>
#include <QApplication>
#include <QPushButton>
#include <QtTest>

#include "db/database.h"
#include "db/metric_sink.h"
#include "db/run_store.h"
#include "db/sql.h"
#include "db/workspace.h"
#include "engine/config/config_io.h"
#include "ui/runs/localruns.h"
#include "ui/runs/runspage.h"
#include "ui/runs/storerunsmodel.h"
#include "ui/runs/storerunsview.h"
#include "ui/runs/storeservice.h"
#include "ui/wizard/runwizard.h"
#include "ui/wizard/templates.h"

namespace db = flotilla::db;
using flotilla::ui::RunWizard;
using flotilla::ui::StoreRunsView;

namespace {

template <typename T>
T* child(QWidget* page, const char* name) {
  T* w = page->findChild<T*>(QLatin1String(name));
  if (!w) qFatal("no child %s", name);
  return w;
}

}  // namespace

class TestRunsViewActions : public QObject {
  Q_OBJECT

 private slots:
  void init();
  void duplicateLandsOnReviewWithTheValues();
  void exportRunsOffTheUiThread();
  void forkListsCheckpointsOffTheUiThread();
  void deleteKeyRemovesTheSelectedRun();

 private:
  int64_t addRun(const std::string& name, const std::string& configToml = {});

  QTemporaryDir m_tmp{QStringLiteral(FLOTILLA_TEST_TMP "/runsview_actions-XXXXXX")};
  QString m_ws, m_db;
};

void TestRunsViewActions::init() {
  static int n = 0;
  QVERIFY(m_tmp.isValid());
  m_ws = m_tmp.filePath(QStringLiteral("ws%1").arg(++n));
  db::ensure_workspace_dir(m_ws.toStdString());
  m_db = QString::fromStdString(db::workspace_database_path(m_ws.toStdString()));
  const db::Database d(m_db.toStdString());
}

int64_t TestRunsViewActions::addRun(const std::string& name, const std::string& configToml) {
  db::Database d(m_db.toStdString());
  db::NewRun r;
  r.name = name;
  r.config_toml = configToml;
  r.run_dir = m_tmp.filePath(QString::fromStdString(name)).toStdString();
  const int64_t id = db::create_run(d, r);
  db::set_status(d, id, db::RunStatus::kRunning, 1000);
  db::set_status(d, id, db::RunStatus::kStopped, 2000);
  return id;
}

void TestRunsViewActions::duplicateLandsOnReviewWithTheValues() {
  flotilla::RunConfig c = flotilla::ui::TemplateStore::demoConfig();
  c.run.name = "dup-20240102-030405";
  c.run.out_dir = m_tmp.filePath(QStringLiteral("old-out")).toStdString();
  c.model.preset = "custom";
  c.model.n_embd = 96;
  c.model.n_head = 4;
  c.data.synthetic_tokens = 123456;
  c.train.steps = 123;
  c.train.micro_batch = 3;
  c.checkpoint.every = 7;
  c.budget.max_usd = 12.5;
  c.budget.usd_per_hour = 2;  // a limit without a price would stop the wizard on Budget
  const int64_t id = addRun("dup-20240102-030405", flotilla::config_to_toml(c));

  flotilla::ui::StoreService store(m_db, nullptr, 100);
  flotilla::ui::LocalRuns runs(m_ws);
  runs.setStore(&store);
  flotilla::ui::RunsPage page(&runs);
  page.resize(1000, 700);
  page.show();
  StoreRunsView* view = page.storeView();
  QVERIFY(view);
  QTRY_VERIFY(view->model()->rowOfId(id) >= 0);

  view->duplicate(id);
  RunWizard* w = page.wizard();
  QVERIFY(w);
  QTRY_COMPARE(w->currentId(), int(RunWizard::Review));  // after the machine probe, at the latest
  QCOMPARE(w->config().model.n_embd, 96);
  QCOMPARE(w->config().train.steps, 123);
  QCOMPARE(w->config().run.name, std::string("dup"));  // the launch adds a fresh timestamp
  QVERIFY(w->config().run.out_dir.empty());
  QCOMPARE(w->config().checkpoint.resume, std::string("auto"));

  // Back through every page, each showing the duplicated values.
  w->back();
  QCOMPARE(w->currentId(), int(RunWizard::Budget));
  QCOMPARE(child<QDoubleSpinBox>(w->currentPage(), "maxUsd")->value(), 12.5);
  w->back();
  QCOMPARE(w->currentId(), int(RunWizard::Checkpoints));
  QCOMPARE(child<QSpinBox>(w->currentPage(), "checkpointEvery")->value(), 7);
  w->back();
  QCOMPARE(w->currentId(), int(RunWizard::Batch));
  QCOMPARE(child<QSpinBox>(w->currentPage(), "steps")->value(), 123);
  QCOMPARE(child<QSpinBox>(w->currentPage(), "microBatch")->value(), 3);
  w->back();
  QCOMPARE(w->currentId(), int(RunWizard::Hardware));
  QCOMPARE(child<QSpinBox>(w->currentPage(), "ranks")->value(), 1);
  w->back();
  QCOMPARE(w->currentId(), int(RunWizard::Data));
  QCOMPARE(child<QSpinBox>(w->currentPage(), "syntheticTokens")->value(), 123456);
  w->back();
  QCOMPARE(w->currentId(), int(RunWizard::Model));
  QCOMPARE(child<QSpinBox>(w->currentPage(), "nEmbd")->value(), 96);
  QCOMPARE(child<QLineEdit>(w->currentPage(), "runName")->text(), QStringLiteral("dup"));
  w->reject();
}

void TestRunsViewActions::exportRunsOffTheUiThread() {
  const int64_t id = addRun("big");
  constexpr int kSteps = 60000;
  {
    db::Database d(m_db.toStdString());
    std::vector<db::MetricRow> rows;
    rows.reserve(3 * kSteps);
    for (int s = 1; s <= kSteps; ++s) {
      rows.push_back({id, "loss", s, 2.0 + 1.0 / s, 1000.0 + s});
      rows.push_back({id, "lr", s, 1e-3, 1000.0 + s});
      rows.push_back({id, "tokens_per_s", s, 1000.0 + s, 1000.0 + s});
    }
    db::write_tx(d, [&] { db::MetricSink(d).insert(rows); });
  }
  flotilla::ui::StoreService store(m_db, nullptr, 100);
  flotilla::ui::LocalRuns runs(m_ws);
  runs.setStore(&store);
  StoreRunsView view(&store, &runs);
  view.show();
  QSignalSpy finished(&view, &StoreRunsView::exportFinished);
  QSignalSpy errors(&view, &StoreRunsView::errorRaised);
  QSignalSpy messages(&view, &StoreRunsView::message);

  int ticks = 0;
  QTimer timer;
  timer.setInterval(0);
  connect(&timer, &QTimer::timeout, [&] { ++ticks; });
  timer.start();

  const QString out = m_tmp.filePath(QStringLiteral("big.csv"));
  QVERIFY(view.exportCsv(id, out));
  // Returned at once: nothing reported yet, the view busy with its bar shown.
  QCOMPARE(finished.count(), 0);
  QVERIFY(view.isBusy());
  QVERIFY(child<QProgressBar>(&view, "runsBusyBar")->isVisible());
  QVERIFY(finished.wait(60000));
  timer.stop();
  QVERIFY2(ticks >= 3, qPrintable(QString::number(ticks)));  // the UI thread ran on meanwhile
  QCOMPARE(finished.at(0).at(0).toBool(), true);
  QVERIFY(!view.isBusy());
  QVERIFY(!child<QProgressBar>(&view, "runsBusyBar")->isVisible());
  QCOMPARE(errors.count(), 0);
  QCOMPARE(messages.count(), 1);
  QFile f(out);
  QVERIFY(f.open(QIODevice::ReadOnly));
  const QList<QByteArray> lines = f.readAll().split('\n');
  QCOMPARE(lines.size(), kSteps + 2);  // header, one line a step, the final newline
  QCOMPARE(lines[0], QByteArray("step,loss,lr,tokens_per_s"));
  QCOMPARE(lines[2], QByteArray("2,2.5,0.001,1002"));

  // A write that fails is still reported as before.
  QVERIFY(view.exportCsv(id, m_tmp.filePath(QStringLiteral("no-such-dir/x.csv"))));
  QVERIFY(finished.wait(60000));
  QCOMPARE(finished.at(1).at(0).toBool(), false);
  QCOMPARE(errors.count(), 1);
  QVERIFY2(errors.at(0).at(0).toString().startsWith(QStringLiteral("Export failed: Cannot write")),
           qPrintable(errors.at(0).at(0).toString()));
}

void TestRunsViewActions::forkListsCheckpointsOffTheUiThread() {
  const int64_t id = addRun("parent");
  const int64_t bare = addRun("bare");
  const QString older = m_tmp.filePath(QStringLiteral("parent/ckpt-10"));
  const QString newer = m_tmp.filePath(QStringLiteral("parent/ckpt-30"));
  QVERIFY(QDir().mkpath(older));
  QVERIFY(QDir().mkpath(newer));
  // A checkpoint exists when its MANIFEST does (the runs service lists only those).
  for (const QString& dir : {older, newer}) {
    QFile manifest(QDir(dir).filePath(QStringLiteral("MANIFEST")));
    QVERIFY(manifest.open(QIODevice::WriteOnly));
  }
  {
    db::Database d(m_db.toStdString());
    db::Stmt insert(d, "INSERT INTO checkpoints(run_id, step, dir, time, bytes, reason) VALUES (?, ?, ?, ?, ?, ?)");
    const std::vector<std::pair<int, QString>> rows = {
        {10, older}, {20, m_tmp.filePath(QStringLiteral("parent/ckpt-20-deleted"))}, {30, newer}};
    for (const auto& [step, dir] : rows) {
      insert.bind(1, id).bind(2, step).bind(3, dir.toStdString()).bind(4, 1764680000.0 + step);
      insert.bind(5, int64_t{3} << 20).bind(6, std::string("periodic")).run();
      insert.reset();
    }
    // Losses every 4 steps: a checkpoint between two shows the one before it.
    std::vector<db::MetricRow> metrics;
    for (int s = 4; s <= 32; s += 4) metrics.push_back({id, "loss", s, 10.0 - 0.25 * s, 1000.0 + s});
    metrics.push_back({id, "val_loss", 30, 2.75, 1030.0});
    db::write_tx(d, [&] { db::MetricSink(d).insert(metrics); });
  }
  flotilla::ui::StoreService store(m_db, nullptr, 100);
  flotilla::ui::LocalRuns runs(m_ws);
  runs.setStore(&store);
  StoreRunsView view(&store, &runs);
  QStringList offered, labels;
  QThread* askedOn = nullptr;
  view.chooseCheckpoint = [&](const QList<flotilla::ui::CheckpointChoice>& choices) {
    offered.clear();
    labels.clear();
    for (const auto& c : choices) {
      offered << c.dir;
      labels << c.label;
    }
    askedOn = QThread::currentThread();
    return QString();  // cancelled: nothing starts
  };
  QSignalSpy listed(&view, &StoreRunsView::forkListed);
  QSignalSpy errors(&view, &StoreRunsView::errorRaised);
  QSignalSpy opened(&view, &StoreRunsView::runOpened);

  QCOMPARE(view.fork(id, QString()), nullptr);
  QVERIFY(view.isBusy());
  QVERIFY(offered.isEmpty());  // not asked yet: the list is read elsewhere
  QVERIFY(listed.wait(30000));
  QCOMPARE(offered, (QStringList{newer, older}));
  // Each by step, loss (the one logged at or before it), validation loss, time, size and reason.
  const QString at30 = QDateTime::fromSecsSinceEpoch(1764680030).toString(QStringLiteral("yyyy-MM-dd HH:mm"));
  QCOMPARE(labels.value(0), QStringLiteral("step 30 · loss 3.0000 · val 2.7500 · %1 · 3.0 MiB · periodic").arg(at30));
  QVERIFY2(labels.value(1).startsWith(QStringLiteral("step 10 · loss 8.0000 · ")), qPrintable(labels.value(1)));
  QCOMPARE(askedOn, QThread::currentThread());
  QVERIFY(!view.isBusy());
  QCOMPARE(errors.count(), 0);
  QCOMPARE(opened.count(), 0);

  offered.clear();
  QCOMPARE(view.fork(bare, QString()), nullptr);
  QVERIFY(listed.wait(30000));
  QVERIFY(offered.isEmpty());
  QCOMPARE(errors.count(), 1);
  QCOMPARE(errors.at(0).at(0).toString(), QStringLiteral("This run has no checkpoint on disk to fork from."));
}

// Issue 18: "Delete on a selected run". The key asks (the same confirmation as the menu's
// Delete…), deletes the stored run when confirmed, and leaves it when not.
void TestRunsViewActions::deleteKeyRemovesTheSelectedRun() {
  const int64_t keep = addRun("keep-me"), gone = addRun("delete-me");
  flotilla::ui::StoreService store(m_db, nullptr, 100);
  flotilla::ui::LocalRuns runs(m_ws);
  runs.setStore(&store);
  flotilla::ui::RunsPage page(&runs);
  page.resize(1000, 700);
  page.show();
  QVERIFY(QTest::qWaitForWindowExposed(&page));
  StoreRunsView* view = page.storeView();
  QTRY_VERIFY(view->model()->rowOfId(gone) >= 0 && view->model()->rowOfId(keep) >= 0);
  QStringList asked;
  bool answer = false;
  view->confirmDelete = [&](const QString& name) {
    asked << name;
    return answer;
  };
  view->selectId(gone);
  view->table()->setFocus();
  QTest::keyClick(view->table(), Qt::Key_Delete);
  QCOMPARE(asked, QStringList{QStringLiteral("delete-me")});
  QVERIFY(store.run(gone).has_value());  // declined: still there
  answer = true;
  QTest::keyClick(view->table(), Qt::Key_Delete);
  QCOMPARE(asked.size(), 2);
  QVERIFY(!store.run(gone).has_value());
  QVERIFY(store.run(keep).has_value());

  // Issue 34 #23: the real confirmation has Cancel as its default (as Kill's): Delete, then Enter,
  // removes nothing.
  view->confirmDelete = nullptr;
  view->selectId(keep);
  view->table()->setFocus();
  QString defaultText, objectName;
  QTimer::singleShot(0, [&] {
    auto* box = qobject_cast<QMessageBox*>(QApplication::activeModalWidget());
    if (!box) return;
    objectName = box->objectName();
    defaultText = box->defaultButton() ? box->defaultButton()->text() : QString();
    QTest::keyClick(box, Qt::Key_Return);
  });
  QTest::keyClick(view->table(), Qt::Key_Delete);
  QCOMPARE(objectName, QStringLiteral("deleteConfirmation"));
  QCOMPARE(defaultText, QMessageBox().addButton(QMessageBox::Cancel)->text());
  QVERIFY(store.run(keep).has_value());  // Enter was Cancel
}

QTEST_MAIN(TestRunsViewActions)
#include "test_runsview_actions.moc"
