// Issues 31 and 38's "done when", in the app: a Llama-family Hugging Face folder is LoRA-tuned (the
// golden Llama, copied; dp = 2, then tp = 2) and QLoRA-tuned (the 64-wide QLoRA golden base, bf16:
// dp = 2, then pp = 2, since tp = 2 cannot cut its 64-wide projections on 64-element blocks) from the
// wizard on two ranks, through the real MainWindow, RunsPage, LocalRuns and worker: the Model page's
// folder and its LoRA or "QLoRA (4-bit base)" choice are made with its widgets, the run goes to
// completion and is stored, and at its end the worker writes the PEFT adapter
// (checkpoint.export_peft) and the merged Hugging Face folder (checkpoint.export_hf). The adapter
// holds the checkpoint's adapters under PEFT's names; the merged folder is the base with W + s B A,
// under QLoRA the base dequantised from NF4 (not the original weights). (That PEFT and transformers
// load both is checked by hand with tests/reference/make_lora_goldens.py --check-trained and
// tests/reference/check_qlora_export.py, docs/lora.md and docs/qlora.md.)
#include <QAbstractButton>
#include <QDir>
#include <QSettings>
#include <QSignalSpy>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QtTest>

#include "db/database.h"
#include "db/queries.h"
#include "db/run_records.h"
#include "db/workspace.h"
#include "engine/checkpoint/model_checkpoint.h"
#include "engine/interop/hf_model.h"
#include "engine/interop/peft.h"
#include "engine/model/base_weights.h"
#include "ui/live/livepage.h"
#include "ui/main/mainwindow.h"
#include "ui/runs/localruns.h"
#include "ui/runs/runspage.h"
#include "ui/runs/servicerun.h"
#include "ui/wizard/modelpage.h"
#include "ui/wizard/runwizard.h"
#include "wizard_helpers.h"

using flotilla::ui::MainWindow;
using flotilla::ui::ServiceRun;
using namespace wizard_helpers;
namespace db = flotilla::db;

class TestLoraTwoRanksE2e : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase();
  void dataParallel() { trainOnTwoRanks(QStringLiteral("dp2"), 2, 1, 1, false); }
  void tensorParallel() { trainOnTwoRanks(QStringLiteral("tp2"), 1, 2, 1, false); }
  void qloraDataParallel() { trainOnTwoRanks(QStringLiteral("qlora-dp2"), 2, 1, 1, true); }
  void qloraPipelineParallel() { trainOnTwoRanks(QStringLiteral("qlora-pp2"), 1, 1, 2, true); }

 private:
  void trainOnTwoRanks(const QString& name, int dp, int tp, int pp, bool qlora);
  QTemporaryDir m_tmp{QStringLiteral(FLOTILLA_TEST_TMP "/lora_two_ranks-XXXXXX")};
  flotilla::ui::WorkspaceInfo m_workspace;
};

void TestLoraTwoRanksE2e::initTestCase() {
  QVERIFY(m_tmp.isValid());
  // FLOTILLA_KEEP_TEST_OUTPUT=1 keeps the runs and exports for a check by hand (docs/lora.md).
  if (qEnvironmentVariableIsSet("FLOTILLA_KEEP_TEST_OUTPUT")) {
    m_tmp.setAutoRemove(false);
    qInfo("keeping %s", qPrintable(m_tmp.path()));
  }
  QStandardPaths::setTestModeEnabled(true);
  QSettings::setPath(QSettings::NativeFormat, QSettings::UserScope, m_tmp.filePath(QStringLiteral("config")));
  const std::string dir = m_tmp.filePath(QStringLiteral("workspace")).toStdString();
  db::ensure_workspace_dir(dir);
  const db::Database d(db::workspace_database_path(dir));
  m_workspace.directory = QString::fromStdString(dir);
  m_workspace.databasePath = QString::fromStdString(d.path());
}

void TestLoraTwoRanksE2e::trainOnTwoRanks(const QString& name, int dp, int tp, int pp, bool qlora) {
  const QString base = m_tmp.filePath(name + QStringLiteral("-base"));
  if (qlora)
    QVERIFY(copyFiles(QStringLiteral(FLOTILLA_SOURCE_DIR "/tests/engine/golden/qlora/base"), base,
                      {QStringLiteral("config.json"), QStringLiteral("generation_config.json"),
                       QStringLiteral("model.safetensors")}));
  else
    QVERIFY(copyFiles(
        QStringLiteral(FLOTILLA_SOURCE_DIR "/tests/engine/golden/hf/llama"), base,
        {QStringLiteral("config.json"), QStringLiteral("generation_config.json"),
         QStringLiteral("model.safetensors.index.json"), QStringLiteral("model-00001-of-00003.safetensors"),
         QStringLiteral("model-00002-of-00003.safetensors"),
         QStringLiteral("model-00003-of-00003.safetensors")}));
  MainWindow w(m_workspace);
  w.localRuns()->setWorkerPath(QStringLiteral(FLOTILLA_WORKER_PATH));
  w.resize(1280, 800);
  w.show();
  auto* runsPage = qobject_cast<flotilla::ui::RunsPage*>(w.page(MainWindow::Runs));
  flotilla::ui::RunWizard* wizard = runsPage->openNewRunWizard();
  QVERIFY(wizard);
  // The Model page, as a user: the folder, then LoRA or QLoRA (rank 16, alpha 32, all linear).
  flotilla::ui::ModelPage* page = wizard->modelPage();
  page->chooseHfFolder(base);
  QVERIFY2(QTest::qWaitFor([&] { return !page->isReadingFolder() && page->isComplete(); }, 20000),
           qPrintable(shownProblems(page)));
  auto* choice = child<QAbstractButton>(page, qlora ? "trainingQlora" : "trainingLora");
  QVERIFY(choice->isEnabled());
  choice->click();
  QVERIFY(wizard->config().lora.enabled);
  QCOMPARE(wizard->config().lora.base_quant, std::string(qlora ? "nf4" : "none"));
  QVERIFY(wizard->config().lora.double_quant);
  QCOMPARE(wizard->config().model.init_from, base.toStdString());
  // A small run on this machine's CPU: two ranks, the synthetic corpus in the folder's vocabulary,
  // both exports at the end (the Checkpoints page's two boxes write these keys).
  flotilla::RunConfig c = wizard->config();
  c.run.name = "lora-" + name.toStdString();
  c.run.device = "cpu";
  c.run.threads = 1;
  c.lora.rank = 4;
  c.lora.alpha = 8;
  c.data.source = "synthetic";
  c.data.synthetic_tokens = 20000;
  c.train.steps = 12;
  c.train.micro_batch = 2;
  c.train.seq_len = 16;
  c.train.global_batch_tokens = 0;
  c.optim.lr = 1e-2;
  c.optim.warmup_steps = 2;
  c.parallel = {};
  c.parallel.dp = dp;
  c.parallel.tp = tp;
  c.parallel.pp = pp;
  c.eval.every = 0;
  c.budget = {};
  const QString peft = m_tmp.filePath(name + QStringLiteral("-adapter"));
  const QString merged = m_tmp.filePath(name + QStringLiteral("-merged"));
  c.checkpoint.export_peft = peft.toStdString();
  c.checkpoint.export_hf = merged.toStdString();
  c.checkpoint.export_dtype = "fp32";
  wizard->setConfig(c);
  auto* live = qobject_cast<flotilla::ui::LivePage*>(w.page(MainWindow::Live));
  wizard->accept();  // Finish: RunsPage launches the config and opens the run live
  ServiceRun* run = live->run();
  QVERIFY(run);
  QVERIFY2(run->commandLine().contains(QStringLiteral(" launch --nproc-per-node 2 ")),
           qPrintable(run->commandLine()));
  QSignalSpy finished(run, &ServiceRun::finished);
  QVERIFY(finished.count() || finished.wait(180000));
  QVERIFY2(run->exitCode() == 0, qPrintable(run->stateText() + QStringLiteral("\n") + run->runDir()));
  QTRY_COMPARE_WITH_TIMEOUT(
      db::get_run(db::Database(m_workspace.databasePath.toStdString()), run->storeId()).status,
      db::RunStatus::kCompleted, 20000);

  // What the run wrote: the checkpoint's adapters, under PEFT's names; the base with them merged.
  const flotilla::ModelCheckpoint ck = flotilla::load_model_checkpoint(run->runDir().toStdString(), nullptr);
  QVERIFY(ck.lora.enabled() && ck.lora.nf4 == qlora && ck.lora.rank == 4 && ck.step == 12);
  QVERIFY(QFileInfo::exists(peft + QStringLiteral("/adapter_config.json")));
  const auto config = flotilla::interop::read_peft_adapter_config(peft.toStdString());
  QCOMPARE(config.r, 4);
  QCOMPARE(config.base_model_name_or_path, base.toStdString());
  QVERIFY(flotilla::interop::import_peft_adapter(peft.toStdString(), ck.dims, ck.lora) == ck.params);
  const std::vector<float> original = flotilla::interop::import_hf_weights(base.toStdString(), ck.dims);
  std::vector<float> want = original;
  if (qlora) {  // every projection as NF4 holds it; the embedding, norms and head as the folder has them
    flotilla::base_weights_to_full(flotilla::interop::load_hf_base(base.toStdString(), ck.dims, true, true),
                                   want.data());
    QVERIFY(want != original);
  }
  const std::vector<float> frozen = want;
  flotilla::interop::merge_lora(ck.dims, ck.lora, ck.params.data(), want.data());
  const std::vector<float> got = flotilla::interop::import_hf_weights(merged.toStdString(), ck.dims);
  QVERIFY(got == want);
  QVERIFY(got != frozen);  // the adapter trained
  QVERIFY(!QFileInfo::exists(merged + QStringLiteral("/adapter_config.json")));
  if (qlora) {  // the run's log says the merged folder comes from the 4-bit base
    QFile log(run->runDir() + QStringLiteral("/train.log"));
    QVERIFY(log.open(QIODevice::ReadOnly));
    QVERIFY2(log.readAll().contains("dequantised from 4-bit NF4"), qPrintable(run->runDir()));
  }
}

QTEST_MAIN(TestLoraTwoRanksE2e)
#include "test_lora_two_ranks_e2e.moc"
