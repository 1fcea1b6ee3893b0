// The Runs page's exports for a QLoRA run (issue 38): a two-step QLoRA run (lora.base_quant = "nf4")
// of the QLoRA golden base (tests/engine/golden/qlora/base, every width a multiple of 64) started as
// the app starts runs (LocalRuns over a real store, the real worker). Its menu offers the LoRA run's
// two exports; the merged export says, while it runs and when done, that the adapter is merged into
// the base dequantised from 4-bit NF4 (not the original weights), and its folder holds the base's
// tensors; the adapter export says the adapter was trained over the 4-bit base. A LoRA run's
// messages are test_runsview_lora_export's and do not mention NF4.
#include <QAction>
#include <QMenu>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QtTest>

#include "db/workspace.h"
#include "engine/config/config_validate.h"
#include "engine/interop/hf_checkpoint.h"
#include "engine/interop/hf_config.h"
#include "engine/interop/hf_model.h"
#include "engine/interop/peft.h"
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

QAction* actionNamed(QMenu* menu, const QString& text) {
  for (QAction* a : menu->actions())
    if (a->text() == text) return a;
  return nullptr;
}

}  // namespace

class TestRunsViewQloraExport : public QObject {
  Q_OBJECT

 private slots:
  void aQloraRunsExportsSayTheBaseWasQuantised();

 private:
  QTemporaryDir m_tmp{QStringLiteral(FLOTILLA_TEST_TMP "/runsview_qlora-XXXXXX")};
};

void TestRunsViewQloraExport::aQloraRunsExportsSayTheBaseWasQuantised() {
  QVERIFY(m_tmp.isValid());
  const QString ws = m_tmp.filePath(QStringLiteral("ws"));
  db::ensure_workspace_dir(ws.toStdString());
  const QString database = QString::fromStdString(db::workspace_database_path(ws.toStdString()));
  const QString base = m_tmp.filePath(QStringLiteral("base"));
  QVERIFY(wizard_helpers::copyFiles(QStringLiteral(FLOTILLA_SOURCE_DIR "/tests/engine/golden/qlora/base"),
                                    base,
                                    {QStringLiteral("config.json"), QStringLiteral("generation_config.json"),
                                     QStringLiteral("model.safetensors")}));

  flotilla::RunConfig c;
  c.run.name = "qlora-run";
  c.run.threads = 1;
  c.run.device = "cpu";
  c.model.init_from = base.toStdString();
  QVERIFY(flotilla::interop::apply_hf_init_from(c));
  c.lora.enabled = true;
  c.lora.rank = 4;
  c.lora.alpha = 8.0;
  c.lora.base_quant = "nf4";
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
  const qint64 id = run->storeId();

  StoreRunsView view(&store, &runs);
  QTRY_VERIFY_WITH_TIMEOUT(view.model()->rowOfId(id) >= 0, 10000);
  QTRY_VERIFY_WITH_TIMEOUT(view.model()
                                   ->index(view.model()->rowOfId(id), 0)
                                   .data(flotilla::ui::StoreRunsModel::CheckpointsRole)
                                   .toLongLong() > 0,
                           10000);
  const std::unique_ptr<QMenu> menu(view.runMenu(id));
  QVERIFY(menu);
  QAction* exportAdapter = actionNamed(menu.get(), QStringLiteral("Export LoRA adapter (PEFT)…"));
  QAction* exportMerged = actionNamed(menu.get(), QStringLiteral("Export merged Hugging Face folder…"));
  QVERIFY(exportAdapter && exportAdapter->isEnabled());
  QVERIFY(exportMerged && exportMerged->isEnabled());
  QSignalSpy messages(&view, &StoreRunsView::message);

  // The merged model: busy text and message name the 4-bit NF4 base; the folder has the base's tensors.
  const QString mergedOut = m_tmp.filePath(QStringLiteral("exported-merged"));
  view.chooseExportFolder = [&](const QString&) { return mergedOut; };
  QSignalSpy mergedDone(&view, &StoreRunsView::weightsExported);
  exportMerged->trigger();
  QVERIFY(view.isBusy());
  QVERIFY(mergedDone.count() || mergedDone.wait(60000));
  QVERIFY2(mergedDone.at(0).at(0).toBool(), qPrintable(mergedDone.at(0).at(1).toString()));
  QStringList said;
  for (const auto& m : messages) said << m.at(0).toString();
  QVERIFY2(said.join(QLatin1Char('\n'))
               .contains(QStringLiteral("dequantised from 4-bit NF4 (QLoRA), not into the "
                                        "original weights")),
           qPrintable(said.join(QLatin1Char('\n'))));
  const flotilla::interop::HfCheckpoint mergedWeights(mergedOut.toStdString());
  const flotilla::interop::HfCheckpoint baseWeights(base.toStdString());
  QCOMPARE(mergedWeights.tensors().size(), baseWeights.tensors().size());
  QVERIFY(!flotilla::interop::read_hf_config(mergedOut.toStdString()).architecture.empty());

  // The adapter: a PEFT folder; the message says it was trained over the 4-bit base.
  const QString adapterOut = m_tmp.filePath(QStringLiteral("exported-adapter"));
  view.chooseExportFolder = [&](const QString&) { return adapterOut; };
  QSignalSpy adapterDone(&view, &StoreRunsView::adapterExported);
  messages.clear();
  exportAdapter->trigger();
  QVERIFY(adapterDone.count() || adapterDone.wait(60000));
  QVERIFY2(adapterDone.at(0).at(0).toBool(), qPrintable(adapterDone.at(0).at(1).toString()));
  QCOMPARE(flotilla::interop::read_peft_adapter_config(adapterOut.toStdString()).r, 4);
  said.clear();
  for (const auto& m : messages) said << m.at(0).toString();
  QVERIFY2(said.join(QLatin1Char('\n')).contains(QStringLiteral("in 4-bit NF4 (QLoRA)")),
           qPrintable(said.join(QLatin1Char('\n'))));
}

QTEST_MAIN(TestRunsViewQloraExport)
#include "test_runsview_qlora_export.moc"
