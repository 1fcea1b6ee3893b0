// The run menu's Sample and Export dialogs (issue 34 #6, #25, #26) on a real chat-tuned run: a tiny
// Llama trained by the app's LocalRuns on ChatML conversations prepared with the golden SmolLM2
// tokenizer (its tokenizer_config.json has a chat template), checkpoints at steps 80 and 160.
// - "Sample from the model…" opens the Sample dialog with the chat template on; Generate runs the
//   worker in the background (the dialog answers while it works) and shows only the answer, which
//   ends at <|im_end|> ("The capital of France is Paris.", not the prompt echoed and padded with
//   <|im_end|> to 64 tokens); a second answer keeps the first below it; Copy copies the answer.
// - A run with no tokenizer (the synthetic corpus) opens the dialog asking for token ids, saying
//   why, with no chat option.
// - "Export weights…" opens the Export dialog: format, checkpoint, dtype (the source's first, named)
//   and folder; the export writes the chosen step in the chosen dtype and reports the absolute
//   folder.
#include <QAction>
#include <QApplication>
#include <QCheckBox>
#include <QClipboard>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QLabel>
#include <QLineEdit>
#include <QMenu>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSignalSpy>
#include <QSpinBox>
#include <QTemporaryDir>
#include <QtTest>

#include <nlohmann/json.hpp>

#include "db/database.h"
#include "db/run_store.h"
#include "db/workspace.h"
#include "engine/config/config_io.h"
#include "engine/interop/hf_config.h"
#include "ui/runs/exportdialog.h"
#include "ui/runs/localruns.h"
#include "ui/runs/sampledialog.h"
#include "ui/runs/servicerun.h"
#include "ui/runs/storerunsmodel.h"
#include "ui/runs/storerunsview.h"
#include "ui/runs/storeservice.h"
#include "wizard_helpers.h"
#include "worker_run.h"

namespace db = flotilla::db;
using flotilla::ui::ExportDialog;
using flotilla::ui::SampleDialog;
using flotilla::ui::ServiceRun;
using flotilla::ui::StoreRunsView;

namespace {

const char* kFrance = "What is the capital of France?";
const char* kJapan = "What is the capital of Japan?";

QByteArray chats() {
  QByteArray out;
  for (int i = 0; i < 200; ++i) {
    const bool france = i % 2 == 0;
    const nlohmann::json rec = {
        {"messages",
         {{{"role", "user"}, {"content", france ? kFrance : kJapan}},
          {{"role", "assistant"},
           {"content", france ? "The capital of France is Paris." : "The capital of Japan is Tokyo."}}}}};
    out += QByteArray::fromStdString(rec.dump()) + '\n';
  }
  return out;
}

QAction* actionNamed(QMenu* menu, const QString& text) {
  for (QAction* a : menu->actions())
    if (a->text() == text) return a;
  return nullptr;
}

void savePng(QWidget* w, const QString& name) {
  w->grab().save(QStringLiteral(FLOTILLA_SCREENSHOT_DIR "/") + name);
}

}  // namespace

class TestRunsViewSampleExport : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase();
  void sampleDialogAnswersAChatModelInItsFormat();
  void sampleDialogAsksARunWithoutTokenizerForIds();
  void exportDialogWritesTheChosenStepAndDtype();

 private:
  QTemporaryDir m_tmp{QStringLiteral(FLOTILLA_TEST_TMP "/runsview_sample-XXXXXX")};
  QString m_database;
  std::unique_ptr<flotilla::ui::StoreService> m_store;
  std::unique_ptr<flotilla::ui::LocalRuns> m_runs;
  qint64 m_chatId = 0;
};

void TestRunsViewSampleExport::initTestCase() {
  QVERIFY(m_tmp.isValid());
  const QString ws = m_tmp.filePath(QStringLiteral("ws"));
  db::ensure_workspace_dir(ws.toStdString());
  m_database = QString::fromStdString(db::workspace_database_path(ws.toStdString()));
  // Chat data prepared with the SmolLM2 tokenizer, which is left beside the shards (as the Data
  // page leaves the tokenizer that made them): the run's tokenizer, with its chat template.
  const QString tok = QStringLiteral(FLOTILLA_SOURCE_DIR "/tests/engine/golden/tokenizers/smollm2");
  const QString data = m_tmp.filePath(QStringLiteral("data"));
  QVERIFY(wizard_helpers::writeFile(m_tmp.filePath(QStringLiteral("chats.jsonl")), chats()));
  const auto prep = flotilla_test::run_worker(
      {"data", "prepare", "--input", m_tmp.filePath(QStringLiteral("chats.jsonl")).toStdString(),
       "--tokenizer", tok.toStdString(), "--out", data.toStdString(), "--val-fraction", "0"});
  QVERIFY2(prep.exit_code == 0, prep.output.c_str());
  QVERIFY(wizard_helpers::copyFiles(
      tok, data, {QStringLiteral("tokenizer.json"), QStringLiteral("tokenizer_config.json")}));

  flotilla::RunConfig c = flotilla::parse_config_toml(
      "[run]\nname = \"chat\"\nseed = 3\nthreads = 2\ndevice = \"cpu\"\n"
      "[model]\npreset = \"custom\"\narch = \"llama\"\nn_layer = 2\nn_head = 4\nn_kv_head = 2\n"
      "n_embd = 64\nffn_dim = 128\nvocab_size = 600\nmax_seq_len = 64\n"
      "[data]\nsource = \"shards\"\ntrain = \"" +
          data.toStdString() +
          "/train_*.bin\"\n"
          "[train]\nsteps = 160\nmicro_batch = 4\nseq_len = 64\n"
          "[optim]\nlr = 0.01\nwarmup_steps = 10\n"
          "[checkpoint]\nevery = 80\nkeep_last = 3\n[eval]\nevery = 0\n",
      "test");
  m_store = std::make_unique<flotilla::ui::StoreService>(m_database, nullptr, 100);
  m_runs = std::make_unique<flotilla::ui::LocalRuns>(ws);
  m_runs->setStore(m_store.get());
  m_runs->setWorkerPath(QStringLiteral(FLOTILLA_WORKER_PATH));
  QString error;
  ServiceRun* run = m_runs->startConfig(c, 1, &error);
  QVERIFY2(run, qPrintable(error));
  QSignalSpy finished(run, &ServiceRun::finished);
  QVERIFY(finished.count() || finished.wait(180000));
  QVERIFY2(run->state() == ServiceRun::State::Completed, qPrintable(run->stateText()));
  m_chatId = run->storeId();
}

void TestRunsViewSampleExport::sampleDialogAnswersAChatModelInItsFormat() {
  StoreRunsView view(m_store.get(), m_runs.get());
  QTRY_VERIFY_WITH_TIMEOUT(
      view.model()->rowOfId(m_chatId) >= 0 && view.model()
                                                      ->index(view.model()->rowOfId(m_chatId), 0)
                                                      .data(flotilla::ui::StoreRunsModel::CheckpointsRole)
                                                      .toLongLong() > 0,
      10000);
  const std::unique_ptr<QMenu> menu(view.runMenu(m_chatId));
  QAction* sample = actionNamed(menu.get(), QStringLiteral("Sample from the model…"));
  QVERIFY(sample && sample->isEnabled());
  sample->trigger();
  SampleDialog* dialog = nullptr;
  QTRY_VERIFY_WITH_TIMEOUT((dialog = view.findChild<SampleDialog*>()) != nullptr, 10000);
  QVERIFY(dialog->isVisible());
  QVERIFY(dialog->chatBox() && dialog->chatBox()->isChecked());  // the run's tokenizer has a chat template
  QVERIFY(dialog->findChild<QLabel*>(QStringLiteral("sampleAbout"))
              ->text()
              .contains(QStringLiteral("chat model")));

  dialog->promptEdit()->setPlainText(QString::fromUtf8(kFrance));
  dialog->temperatureBox()->setValue(0);  // greedy
  dialog->generateButton()->click();
  // The worker runs in the background: the dialog is back at once, Generate waits, Stop is offered.
  QVERIFY(dialog->isGenerating());
  QVERIFY(!dialog->generateButton()->isEnabled() && dialog->stopButton()->isVisibleTo(dialog));
  QSignalSpy done(dialog, &SampleDialog::finished);
  QVERIFY(done.count() || done.wait(60000));
  QVERIFY2(done.at(0).at(0).toBool(), qPrintable(done.at(0).at(1).toString()));
  // Only the answer, ending at the end of its turn (the worker's line says where it stopped).
  QCOMPARE(dialog->answer(), QStringLiteral("The capital of France is Paris."));
  QVERIFY2(dialog->statusLabel()->text().contains(QStringLiteral("stopped at <|im_end|>")),
           qPrintable(dialog->statusLabel()->text()));

  // A second answer; the first stays below for comparison.
  dialog->promptEdit()->setPlainText(QString::fromUtf8(kJapan));
  dialog->generateButton()->click();
  QVERIFY(done.wait(60000));
  QCOMPARE(dialog->answer(), QStringLiteral("The capital of Japan is Tokyo."));
  const QString history = dialog->historyView()->toPlainText();
  QVERIFY2(history.contains(QStringLiteral("#1")) &&
               history.contains(QStringLiteral("The capital of France is Paris.")) &&
               history.contains(QStringLiteral("#2")) && history.contains(QStringLiteral("temperature 0")),
           qPrintable(history));
  QVERIFY2(dialog->statusLabel()->text().contains(
               QStringLiteral("tokens from step 160, stopped at <|im_end|> · ")),
           qPrintable(dialog->statusLabel()->text()));
  dialog->copyButton()->click();
  QCOMPARE(QApplication::clipboard()->text(), QStringLiteral("The capital of Japan is Tokyo."));
  savePng(dialog, QStringLiteral("sample-dialog.png"));
  // The chat template off: the model continues the text itself, without a user turn.
  dialog->chatBox()->setChecked(false);
  QCOMPARE(dialog->request().chat, std::string("off"));

  // The programmatic path (the same request, its defaults) answers a chat model in its format too.
  QString shown;
  view.showSample = [&](const QString& text) { shown = text; };
  QSignalSpy sampled(&view, &StoreRunsView::sampled);
  QVERIFY(view.sampleModel(m_chatId, QString::fromUtf8(kFrance)));
  QVERIFY(sampled.wait(60000));
  QVERIFY2(sampled.at(0).at(0).toBool() && !shown.contains(QStringLiteral("<|im_end|>")) &&
               !shown.contains(QString::fromUtf8(kFrance)),
           qPrintable(shown));
}

void TestRunsViewSampleExport::sampleDialogAsksARunWithoutTokenizerForIds() {
  // A stored run of the synthetic corpus: no tokenizer.
  flotilla::RunConfig c;
  c.run.name = "synthetic";
  qint64 id = 0;
  {
    db::Database d(m_database.toStdString());
    db::NewRun r;
    r.name = "synthetic";
    r.config_toml = flotilla::config_to_toml(c);
    r.run_dir = m_tmp.filePath(QStringLiteral("synthetic-run")).toStdString();
    id = db::create_run(d, r);
  }
  QDir().mkpath(m_tmp.filePath(QStringLiteral("synthetic-run")));
  StoreRunsView view(m_store.get(), m_runs.get());
  QVERIFY(view.sampleModel(id, QString()));
  SampleDialog* dialog = nullptr;
  QTRY_VERIFY_WITH_TIMEOUT((dialog = view.findChild<SampleDialog*>()) != nullptr, 10000);
  QVERIFY(!dialog->hasTokenizer() && dialog->chatBox() == nullptr && dialog->stopEdit() == nullptr);
  const QString about = dialog->findChild<QLabel*>(QStringLiteral("sampleAbout"))->text();
  QVERIFY2(about.contains(QStringLiteral("no tokenizer")) && about.contains(QStringLiteral("token ids")) &&
               about.contains(QStringLiteral("from 0 to %1").arg(c.model.vocab_size - 1)),
           qPrintable(about));
  // Text is refused before the worker is asked, saying what to give.
  dialog->promptEdit()->setPlainText(QStringLiteral("Once upon a time"));
  dialog->generateButton()->click();
  QVERIFY(!dialog->isGenerating());
  QVERIFY2(dialog->statusLabel()->text().contains(QStringLiteral("give token ids")),
           qPrintable(dialog->statusLabel()->text()));
  dialog->promptEdit()->setPlainText(QStringLiteral("1 2 3"));
  QCOMPARE(dialog->request().prompt, std::string("1 2 3"));
  savePng(dialog, QStringLiteral("sample-dialog-ids.png"));
}

void TestRunsViewSampleExport::exportDialogWritesTheChosenStepAndDtype() {
  StoreRunsView view(m_store.get(), m_runs.get());
  QTRY_VERIFY_WITH_TIMEOUT(view.model()->rowOfId(m_chatId) >= 0, 10000);
  const QString out = m_tmp.filePath(QStringLiteral("exported"));
  QStringList formats;
  QString sourceItem;
  int checkpoints = 0;
  view.answerExport = [&](ExportDialog& d) {
    for (int i = 0; i < d.formatBox()->count(); ++i) formats << d.formatBox()->itemData(i).toString();
    sourceItem = d.dtypeBox()->itemText(0);
    checkpoints = d.checkpointBox()->count();
    d.checkpointBox()->setCurrentIndex(d.checkpointBox()->count() - 1);  // the oldest: step 80
    d.dtypeBox()->setCurrentIndex(d.dtypeBox()->findData(QStringLiteral("bf16")));
    d.folderEdit()->setText(out);
    savePng(&d, QStringLiteral("export-dialog.png"));
    return true;
  };
  QString shownFolder, details;
  view.showExported = [&](const QString& folder, const QString& d) {
    shownFolder = folder;
    details = d;
  };
  const std::unique_ptr<QMenu> menu(view.runMenu(m_chatId));
  QAction* exportAction = actionNamed(menu.get(), QStringLiteral("Export weights…"));
  QVERIFY(exportAction && exportAction->isEnabled());
  QSignalSpy exported(&view, &StoreRunsView::weightsExported);
  exportAction->trigger();
  QVERIFY(exported.count() || exported.wait(60000));
  QVERIFY2(exported.at(0).at(0).toBool(), qPrintable(exported.at(0).at(1).toString()));
  QCOMPARE(formats, QStringList{QStringLiteral("hf")});
  QVERIFY2(sourceItem == QStringLiteral("fp32, as the source (the dtype of the checkpoint's weights)"),
           qPrintable(sourceItem));
  QCOMPARE(checkpoints, 2);  // steps 160 and 80
  QCOMPARE(exported.at(0).at(1).toString(), out);
  QCOMPARE(shownFolder, out);
  QVERIFY2(details.contains(QStringLiteral("(step 80)")) && details.contains(QStringLiteral("(bf16)")) &&
               details.contains(out),
           qPrintable(details));
  QCOMPARE(flotilla::interop::read_hf_config(out.toStdString()).dtype, std::string("bfloat16"));
  QVERIFY(QFile::exists(out + QStringLiteral("/tokenizer.json")));  // the run's tokenizer beside it
}

QTEST_MAIN(TestRunsViewSampleExport)
#include "test_runsview_sample_export.moc"
