// The Runs page's menu for a LoRA run (issue 31 item 4): a two-step LoRA run of the golden Llama
// folder (tests/engine/golden/hf/llama), continuing the golden PEFT adapter, is started as the app
// starts runs (LocalRuns over a real store, the real worker); its menu offers "Export LoRA adapter
// (PEFT)…" and "Export merged Hugging Face folder…" instead of "Export weights…" (which a full run
// keeps), and each entry runs `flotilla-worker export --format peft|hf` on the run's checkpoint,
// producing a folder PEFT loads (adapter_config.json with the run's r, alpha and targets, and its
// safetensors) and a merged model folder with the base's tensors.
#include <QAction>
#include <QMenu>
#include <QProcess>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QtTest>

#include "db/database.h"
#include "db/run_store.h"
#include "db/workspace.h"
#include "engine/config/config_io.h"
#include "engine/config/config_validate.h"
#include "engine/interop/hf_checkpoint.h"
#include "engine/interop/hf_config.h"
#include "engine/interop/hf_model.h"
#include "engine/interop/peft.h"
#include "engine/model/lora.h"
#include "ui/runs/localruns.h"
#include "ui/runs/servicerun.h"
#include "ui/runs/storerunsmodel.h"
#include "ui/runs/storerunsview.h"
#include "ui/runs/storeservice.h"
#include "wizard_helpers.h"

namespace db = flotilla::db;
using flotilla::ui::ServiceRun;
using flotilla::ui::StoreRunsView;

namespace {

QStringList actionTexts(QMenu* menu) {
  QStringList out;
  for (QAction* a : menu->actions())
    if (!a->isSeparator()) out << a->text();
  return out;
}

QAction* actionNamed(QMenu* menu, const QString& text) {
  for (QAction* a : menu->actions())
    if (a->text() == text) return a;
  return nullptr;
}

}  // namespace

class TestRunsViewLoraExport : public QObject {
  Q_OBJECT

 private slots:
  void aLoraRunsMenuExportsTheAdapterAndTheMergedModel();

 private:
  QTemporaryDir m_tmp{QStringLiteral(FLOTILLA_TEST_TMP "/runsview_lora-XXXXXX")};
};

void TestRunsViewLoraExport::aLoraRunsMenuExportsTheAdapterAndTheMergedModel() {
  QVERIFY(m_tmp.isValid());
  const QString ws = m_tmp.filePath(QStringLiteral("ws"));
  db::ensure_workspace_dir(ws.toStdString());
  const QString database = QString::fromStdString(db::workspace_database_path(ws.toStdString()));
  const QString base = m_tmp.filePath(QStringLiteral("base"));
  const QString adapter = m_tmp.filePath(QStringLiteral("adapter"));
  QVERIFY(wizard_helpers::copyFiles(
      QStringLiteral(FLOTILLA_SOURCE_DIR "/tests/engine/golden/hf/llama"), base,
      {QStringLiteral("config.json"), QStringLiteral("generation_config.json"),
       QStringLiteral("model.safetensors.index.json"), QStringLiteral("model-00001-of-00003.safetensors"),
       QStringLiteral("model-00002-of-00003.safetensors"),
       QStringLiteral("model-00003-of-00003.safetensors")}));
  QVERIFY(wizard_helpers::copyFiles(
      QStringLiteral(FLOTILLA_SOURCE_DIR "/tests/engine/golden/lora/llama/adapter"), adapter,
      {QStringLiteral("adapter_config.json"), QStringLiteral("adapter_model.safetensors")}));

  // Two steps over the synthetic corpus (the folder's 128-token vocabulary), continuing the adapter.
  flotilla::RunConfig c;
  c.run.name = "lora-run";
  c.run.threads = 1;
  c.run.device = "cpu";
  c.model.init_from = base.toStdString();
  QVERIFY(flotilla::interop::apply_hf_init_from(c));
  c.lora.enabled = true;
  c.lora.init_from = adapter.toStdString();
  c.data.source = "synthetic";
  c.data.synthetic_tokens = 20000;
  c.train.steps = 2;
  c.train.micro_batch = 2;
  c.train.seq_len = 16;
  c.train.global_batch_tokens = 0;
  c.train.log_every = 1;
  c.eval.every = 0;
  c.eval.batches = 1;
  c.checkpoint.every = 0;
  c.checkpoint.save_final = true;
  const auto problems = flotilla::validate(c, 1);
  QVERIFY2(problems.empty(), problems.empty() ? "" : flotilla::to_string(problems.front()).c_str());

  flotilla::ui::StoreService store(database, nullptr, 100);
  flotilla::ui::LocalRuns runs(ws);
  runs.setStore(&store);
  runs.setWorkerPath(QStringLiteral(FLOTILLA_WORKER_PATH));
  QString error;
  ServiceRun* run = runs.startConfig(c, 1, &error);
  QVERIFY2(run, qPrintable(error));
  QSignalSpy finished(run, &ServiceRun::finished);
  QVERIFY(finished.count() || finished.wait(60000));
  QVERIFY2(run->state() == ServiceRun::State::Completed, qPrintable(run->stateText()));
  const qint64 loraId = run->storeId();

  // A full run beside it (a stored row is all its menu needs).
  flotilla::RunConfig fullConfig = c;
  fullConfig.lora = {};
  qint64 fullId = 0;
  {
    db::Database d(database.toStdString());
    db::NewRun r;
    r.name = "full-run";
    r.config_toml = flotilla::config_to_toml(fullConfig);
    r.run_dir = m_tmp.filePath(QStringLiteral("full-run")).toStdString();
    fullId = db::create_run(d, r);
  }

  StoreRunsView view(&store, &runs);
  QTRY_VERIFY_WITH_TIMEOUT(view.model()->rowOfId(loraId) >= 0 && view.model()->rowOfId(fullId) >= 0, 10000);
  QTRY_VERIFY_WITH_TIMEOUT(view.model()
                                   ->index(view.model()->rowOfId(loraId), 0)
                                   .data(flotilla::ui::StoreRunsModel::CheckpointsRole)
                                   .toLongLong() > 0,
                           10000);

  const QString adapterEntry = QStringLiteral("Export LoRA adapter (PEFT)…");
  const QString mergedEntry = QStringLiteral("Export merged Hugging Face folder…");
  const QString weightsEntry = QStringLiteral("Export weights…");
  const std::unique_ptr<QMenu> fullMenu(view.runMenu(fullId));
  QVERIFY(fullMenu);
  QVERIFY(actionTexts(fullMenu.get()).contains(weightsEntry));
  QVERIFY(!actionTexts(fullMenu.get()).contains(adapterEntry));
  QVERIFY(!actionTexts(fullMenu.get()).contains(mergedEntry));
  const std::unique_ptr<QMenu> menu(view.runMenu(loraId));
  QVERIFY(menu);
  QVERIFY2(!actionTexts(menu.get()).contains(weightsEntry), qPrintable(actionTexts(menu.get()).join(", ")));
  QAction* exportAdapter = actionNamed(menu.get(), adapterEntry);
  QAction* exportMerged = actionNamed(menu.get(), mergedEntry);
  QVERIFY(exportAdapter && exportAdapter->isEnabled());
  QVERIFY(exportMerged && exportMerged->isEnabled());

  // The worker's export formats are the lead's half of this item: until `--format peft` is in its
  // help, the menu is what this test can check.
  QProcess help;
  help.start(QStringLiteral(FLOTILLA_WORKER_PATH), {QStringLiteral("export"), QStringLiteral("--help")});
  QVERIFY(help.waitForFinished(30000));
  if (!help.readAllStandardOutput().contains("peft"))
    QSKIP("flotilla-worker export has no --format peft yet: the menu's entries are checked, not the exports");

  // The adapter: a PEFT folder with the run's r, alpha and projections.
  const QString adapterOut = m_tmp.filePath(QStringLiteral("exported-adapter"));
  view.chooseExportFolder = [&](const QString&) { return adapterOut; };
  QSignalSpy adapterDone(&view, &StoreRunsView::adapterExported);
  exportAdapter->trigger();
  QVERIFY(view.isBusy());
  QVERIFY(adapterDone.count() || adapterDone.wait(60000));
  QVERIFY2(adapterDone.at(0).at(0).toBool(), qPrintable(adapterDone.at(0).at(1).toString()));
  QVERIFY(QFileInfo(adapterOut + QStringLiteral("/adapter_model.safetensors")).size() > 1000);
  const flotilla::interop::PeftAdapterConfig exported =
      flotilla::interop::read_peft_adapter_config(adapterOut.toStdString());
  const flotilla::interop::PeftAdapterConfig golden =
      flotilla::interop::read_peft_adapter_config(adapter.toStdString());
  QCOMPARE(exported.r, golden.r);
  QCOMPARE(exported.lora_alpha, golden.lora_alpha);
  QCOMPARE(exported.targets, golden.targets);

  // The merged model: a Hugging Face folder of the base's architecture and tensors.
  const QString mergedOut = m_tmp.filePath(QStringLiteral("exported-merged"));
  view.chooseExportFolder = [&](const QString&) { return mergedOut; };
  QSignalSpy mergedDone(&view, &StoreRunsView::weightsExported);
  exportMerged->trigger();
  QVERIFY(mergedDone.count() || mergedDone.wait(60000));
  QVERIFY2(mergedDone.at(0).at(0).toBool(), qPrintable(mergedDone.at(0).at(1).toString()));
  const flotilla::interop::HfConfig merged = flotilla::interop::read_hf_config(mergedOut.toStdString());
  QCOMPARE(QString::fromStdString(merged.architecture), QStringLiteral("LlamaForCausalLM"));
  const flotilla::interop::HfCheckpoint mergedWeights(mergedOut.toStdString());
  const flotilla::interop::HfCheckpoint baseWeights(base.toStdString());
  QCOMPARE(mergedWeights.tensors().size(), baseWeights.tensors().size());
  for (const auto& t : mergedWeights.tensors()) {
    const auto* b = baseWeights.find(t.name);
    QVERIFY2(b && b->shape == t.shape, t.name.c_str());
  }
}

QTEST_MAIN(TestRunsViewLoraExport)
#include "test_runsview_lora_export.moc"
