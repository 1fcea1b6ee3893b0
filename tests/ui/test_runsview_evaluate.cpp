// The run menu's "Evaluate…" (issue 35) on a real run with the real worker: a tiny Llama trained by
// the app's LocalRuns on text prepared with the 600-token golden SmolLM2 tokenizer (left beside the
// shards: the run's tokenizer), checkpoints at steps 10 and 20.
// - The menu offers Evaluate… once the run has a checkpoint; it opens the Evaluate dialog on the
//   run's checkpoints (newest first).
// - Evaluating step 10 on resources/eval/arc-mini.jsonl (first 8 examples) runs `flotilla-worker
//   eval --json` in the background (the dialog answers meanwhile), shows the scores, and stores each
//   as the run's metric task/arc-mini/<score> at step 10 (the store's writer), where Compare lists
//   and plots it.
// - A missing file is refused before anything runs; a file the worker refuses (an answer out of
//   range) fails with its file and line, and stores nothing.
#include <QAction>
#include <QComboBox>
#include <QLabel>
#include <QLineEdit>
#include <QMenu>
#include <QPushButton>
#include <QSignalSpy>
#include <QSpinBox>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QtTest>

#include "db/database.h"
#include "db/queries.h"
#include "db/run_store.h"
#include "db/workspace.h"
#include "engine/config/config_io.h"
#include "ui/compare/comparequery.h"
#include "ui/runs/evaluatedialog.h"
#include "ui/runs/localruns.h"
#include "ui/runs/servicerun.h"
#include "ui/runs/storerunsmodel.h"
#include "ui/runs/storerunsview.h"
#include "ui/runs/storeservice.h"
#include "wizard_helpers.h"
#include "worker_run.h"

namespace db = flotilla::db;
using flotilla::ui::EvaluateDialog;
using flotilla::ui::ServiceRun;
using flotilla::ui::StoreRunsView;

namespace {

QAction* actionNamed(QMenu* menu, const QString& text) {
  for (QAction* a : menu->actions())
    if (a->text() == text) return a;
  return nullptr;
}

}  // namespace

class TestRunsViewEvaluate : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase();
  void evaluateStoresTheScoresAtTheCheckpointStep();
  void refusedFilesStoreNothing();

 private:
  EvaluateDialog* openDialog(StoreRunsView& view);

  QTemporaryDir m_tmp{QStringLiteral(FLOTILLA_TEST_TMP "/runsview_evaluate-XXXXXX")};
  QString m_database;
  std::unique_ptr<flotilla::ui::StoreService> m_store;
  std::unique_ptr<flotilla::ui::LocalRuns> m_runs;
  qint64 m_id = 0;
};

void TestRunsViewEvaluate::initTestCase() {
  QVERIFY(m_tmp.isValid());
  const QString ws = m_tmp.filePath(QStringLiteral("ws"));
  db::ensure_workspace_dir(ws.toStdString());
  m_database = QString::fromStdString(db::workspace_database_path(ws.toStdString()));
  const QString tok = QStringLiteral(FLOTILLA_SOURCE_DIR "/tests/engine/golden/tokenizers/smollm2");
  const QString data = m_tmp.filePath(QStringLiteral("data"));
  QByteArray text;
  for (int i = 0; i < 300; ++i)
    text += "The cat sat on the mat. Water is wet. The sun rises in the east. Snow is cold.\n";
  QVERIFY(wizard_helpers::writeFile(m_tmp.filePath(QStringLiteral("corpus.txt")), text));
  const auto prep = flotilla_test::run_worker(
      {"data", "prepare", "--input", m_tmp.filePath(QStringLiteral("corpus.txt")).toStdString(),
       "--tokenizer", tok.toStdString(), "--out", data.toStdString(), "--val-fraction", "0"});
  QVERIFY2(prep.exit_code == 0, prep.output.c_str());
  QVERIFY(wizard_helpers::copyFiles(
      tok, data, {QStringLiteral("tokenizer.json"), QStringLiteral("tokenizer_config.json")}));
  const flotilla::RunConfig c = flotilla::parse_config_toml(
      "[run]\nname = \"tiny\"\nseed = 3\nthreads = 2\ndevice = \"cpu\"\n"
      "[model]\npreset = \"custom\"\narch = \"llama\"\nn_layer = 1\nn_head = 2\nn_kv_head = 1\n"
      "n_embd = 32\nffn_dim = 64\nvocab_size = 600\nmax_seq_len = 64\n"
      "[data]\nsource = \"shards\"\ntrain = \"" +
          data.toStdString() +
          "/train_*.bin\"\n"
          "[train]\nsteps = 20\nmicro_batch = 2\nseq_len = 32\n"
          "[optim]\nlr = 0.01\nwarmup_steps = 2\n"
          "[checkpoint]\nevery = 10\nkeep_last = 3\n[eval]\nevery = 0\n",
      "test");
  m_store = std::make_unique<flotilla::ui::StoreService>(m_database, nullptr, 100);
  m_runs = std::make_unique<flotilla::ui::LocalRuns>(ws);
  m_runs->setStore(m_store.get());
  m_runs->setWorkerPath(QStringLiteral(FLOTILLA_WORKER_PATH));
  QString error;
  ServiceRun* run = m_runs->startConfig(c, 1, &error);
  QVERIFY2(run, qPrintable(error));
  QSignalSpy finished(run, &ServiceRun::finished);
  QVERIFY(finished.count() || finished.wait(120000));
  QVERIFY2(run->state() == ServiceRun::State::Completed, qPrintable(run->stateText()));
  m_id = run->storeId();
}

EvaluateDialog* TestRunsViewEvaluate::openDialog(StoreRunsView& view) {
  const auto checkpointed = [&] {
    const int row = view.model()->rowOfId(m_id);
    return row >= 0 &&
           view.model()->index(row, 0).data(flotilla::ui::StoreRunsModel::CheckpointsRole).toLongLong() > 0;
  };
  if (!QTest::qWaitFor(checkpointed, 10000)) return nullptr;
  const std::unique_ptr<QMenu> menu(view.runMenu(m_id));
  QAction* evaluate = actionNamed(menu.get(), QStringLiteral("Evaluate…"));
  if (!evaluate || !evaluate->isEnabled()) return nullptr;
  QSignalSpy opened(&view, &StoreRunsView::evaluateOpened);
  evaluate->trigger();
  if (!opened.count() && !opened.wait(20000)) return nullptr;
  return view.findChild<EvaluateDialog*>();
}

void TestRunsViewEvaluate::evaluateStoresTheScoresAtTheCheckpointStep() {
  StoreRunsView view(m_store.get(), m_runs.get());
  EvaluateDialog* dialog = openDialog(view);
  QVERIFY(dialog);
  QVERIFY(dialog->isVisible());
  // The run's checkpoints, newest first.
  QCOMPARE(dialog->checkpointBox()->count(), 2);
  QCOMPARE(dialog->checkpointBox()->itemData(0).toLongLong(), 20);
  dialog->checkpointBox()->setCurrentIndex(dialog->checkpointBox()->findData(10));
  dialog->taskEdit()->setText(QStringLiteral(FLOTILLA_SOURCE_DIR "/resources/eval/arc-mini.jsonl"));
  dialog->limitBox()->setValue(8);
  QSignalSpy done(dialog, &EvaluateDialog::finished);
  dialog->evaluateButton()->click();
  // The worker runs in the background: the dialog is back at once, Stop is offered.
  QVERIFY(dialog->isEvaluating());
  QVERIFY(!dialog->evaluateButton()->isEnabled() && dialog->stopButton()->isVisibleTo(dialog));
  QVERIFY(done.count() || done.wait(60000));
  QVERIFY2(done.at(0).at(0).toBool(), qPrintable(done.at(0).at(1).toString()));
  QVERIFY(dialog->outcome().has_value());
  QCOMPARE(QString::fromStdString(dialog->outcome()->task), QStringLiteral("arc-mini"));
  QCOMPARE(QString::fromStdString(dialog->outcome()->kind), QStringLiteral("multiple_choice"));
  QCOMPARE(dialog->storedStep(), qint64(10));
  QVERIFY(dialog->storedMetrics().contains(QStringLiteral("task/arc-mini/acc_norm")));
  // The scores table: acc, acc_norm, their stderrs, n = 8.
  QStringList shown;
  QString n;
  for (int r = 0; r < dialog->scoresTable()->rowCount(); ++r) {
    shown << dialog->scoresTable()->item(r, 0)->text();
    if (shown.last() == QStringLiteral("n")) n = dialog->scoresTable()->item(r, 1)->text();
  }
  for (const char* k : {"acc", "acc_norm", "acc_stderr", "acc_norm_stderr", "n"})
    QVERIFY2(shown.contains(QLatin1String(k)), qPrintable(shown.join(QLatin1Char(','))));
  QCOMPARE(n, QStringLiteral("8"));
  QVERIFY2(dialog->statusLabel()->text().contains(QStringLiteral("step 10")),
           qPrintable(dialog->statusLabel()->text()));
  QTest::qWait(100);
  dialog->grab().save(QStringLiteral(FLOTILLA_SCREENSHOT_DIR "/evaluate-dialog.png"));

  // Stored at step 10, the worker's value; Compare lists it among the run's metrics.
  double accNorm = -1;
  for (const auto& [k, v] : dialog->outcome()->scores)
    if (k == "acc_norm") accNorm = v;
  {
    db::OpenOptions o;
    o.create = false;
    const db::Database d(m_database.toStdString(), o);
    const auto pts = db::metric_points(d, m_id, "task/arc-mini/acc_norm");
    QCOMPARE(pts.size(), size_t(1));
    QCOMPARE(pts[0].step, int64_t(10));
    QCOMPARE(pts[0].value, accNorm);
    QCOMPARE(db::metric_points(d, m_id, "task/arc-mini/n").at(0).value, 8.0);
  }
  flotilla::ui::CompareRequest req;
  req.databasePath = m_database;
  req.runIds = {m_id};
  req.metric = "task/arc-mini/acc_norm";
  const auto cmp = flotilla::ui::loadComparison(req);
  QCOMPARE(cmp.scoreMetric, std::string("task/arc-mini/acc_norm"));
  QCOMPARE(cmp.series.at(0).points.size(), size_t(1));
  dialog->close();
}

void TestRunsViewEvaluate::refusedFilesStoreNothing() {
  StoreRunsView view(m_store.get(), m_runs.get());
  EvaluateDialog* dialog = openDialog(view);
  QVERIFY(dialog);
  dialog->taskEdit()->setText(m_tmp.filePath(QStringLiteral("missing.jsonl")));
  dialog->evaluateButton()->click();
  QVERIFY(!dialog->isEvaluating());  // nothing ran
  QVERIFY(dialog->statusLabel()->text().contains(QStringLiteral("No such file")));

  // Few-shot needs its dev file; the fields become the worker's request (runs::eval_worker_args).
  dialog->taskEdit()->setText(QStringLiteral(FLOTILLA_SOURCE_DIR "/resources/eval/arc-mini.jsonl"));
  dialog->fewshotBox()->setValue(2);
  dialog->evaluateButton()->click();
  QVERIFY(!dialog->isEvaluating());
  QVERIFY2(dialog->statusLabel()->text().contains(QStringLiteral("dev file")),
           qPrintable(dialog->statusLabel()->text()));
  dialog->devEdit()->setText(QStringLiteral(FLOTILLA_SOURCE_DIR "/resources/eval/arc-mini-dev.jsonl"));
  dialog->kindBox()->setCurrentIndex(dialog->kindBox()->findData(QStringLiteral("multiple_choice")));
  dialog->limitBox()->setValue(3);
  flotilla::runs::EvalRequest asked = dialog->request();
  asked.checkpoint = "/ck";
  const std::vector<std::string> args = flotilla::runs::eval_worker_args(asked);
  const auto has = [&args](const std::string& flag, const std::string& value) {
    for (size_t i = 0; i + 1 < args.size(); ++i)
      if (args[i] == flag && args[i + 1] == value) return true;
    return false;
  };
  QVERIFY(has("--fewshot", "2") && has("--kind", "multiple_choice") && has("--limit", "3") &&
          has("--dev", FLOTILLA_SOURCE_DIR "/resources/eval/arc-mini-dev.jsonl") && args.back() == "--json");
  QVERIFY(has("--tokenizer", asked.tokenizer) && !asked.tokenizer.empty());  // the run's own
  dialog->fewshotBox()->setValue(0);
  dialog->kindBox()->setCurrentIndex(0);

  const QString bad = m_tmp.filePath(QStringLiteral("bad.jsonl"));
  QVERIFY(wizard_helpers::writeFile(bad, "{\"context\":\"a\",\"choices\":[\"b\",\"c\"],\"answer\":5}\n"));
  dialog->taskEdit()->setText(bad);
  QSignalSpy done(dialog, &EvaluateDialog::finished);
  dialog->evaluateButton()->click();
  QVERIFY(done.count() || done.wait(60000));
  QVERIFY(!done.at(0).at(0).toBool());
  QVERIFY2(done.at(0).at(1).toString().contains(QStringLiteral("bad.jsonl")),
           qPrintable(done.at(0).at(1).toString()));
  QVERIFY(dialog->statusLabel()->text().startsWith(QStringLiteral("Evaluation failed")));
  QVERIFY(dialog->storedMetrics().isEmpty());
  db::OpenOptions o;
  o.create = false;
  const db::Database d(m_database.toStdString(), o);
  QVERIFY(db::metric_points(d, m_id, "task/bad/acc").empty());
  dialog->close();
}

QTEST_MAIN(TestRunsViewEvaluate)
#include "test_runsview_evaluate.moc"
