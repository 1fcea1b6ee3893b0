// Issue 34 item 2, the README's fine-tuning path with small chat data, as a user walks it: a Hugging
// Face folder (a random Qwen-shaped Llama-family model whose vocabulary is the golden Qwen
// tokenizer's, that tokenizer beside it) → Data: 400 chat records prepared with the model's own
// tokenizer → Next … → Launch, through the real MainWindow, RunsPage, LocalRuns and worker; the run
// trains to completion with validation loss. Before the fix Prepare wrote a 1 % validation split
// smaller than one batch and Next stayed disabled with the fix on a page it could not reach.
#include <QAbstractButton>
#include <QComboBox>
#include <QDir>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QPushButton>
#include <QSettings>
#include <QSignalSpy>
#include <QSpinBox>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QtTest>

#include <cmath>

#include "db/database.h"
#include "db/queries.h"
#include "db/run_records.h"
#include "db/workspace.h"
#include "engine/config/config_io.h"
#include "engine/data/loader.h"
#include "engine/interop/hf_model.h"
#include "engine/model/model.h"
#include "engine/model/model_dims.h"
#include "engine/tokenizer/bpe.h"
#include "ui/live/livepage.h"
#include "ui/main/mainwindow.h"
#include "ui/runs/localruns.h"
#include "ui/runs/runspage.h"
#include "ui/runs/servicerun.h"
#include "ui/wizard/batchpage.h"
#include "ui/wizard/datapage.h"
#include "ui/wizard/modelpage.h"
#include "ui/wizard/runwizard.h"
#include "wizard_helpers.h"

using flotilla::ui::DataPage;
using flotilla::ui::MainWindow;
using flotilla::ui::RunWizard;
using flotilla::ui::ServiceRun;
using flotilla::ui::TokenizerSource;
using namespace wizard_helpers;
namespace db = flotilla::db;

namespace {

const char* kQwenTokenizer = FLOTILLA_SOURCE_DIR "/tests/engine/golden/tokenizers/qwen";

// A random Qwen 2-shaped model (2 layers, width 32, 4 heads, 2 K/V heads, q/k/v biases, tied) with
// the golden Qwen tokenizer's vocabulary, written as a Hugging Face folder with that tokenizer.
bool writeQwenFolder(const QString& dir) {
  const int vocab = flotilla::Tokenizer::load(kQwenTokenizer).vocab_size();
  flotilla::ModelSection s;
  s.arch = "llama";
  s.preset = "custom";
  s.n_layer = 2;
  s.n_head = 4;
  s.n_kv_head = 2;
  s.n_embd = 32;
  s.ffn_dim = 64;
  s.vocab_size = vocab;
  s.max_seq_len = 512;
  s.tie_embeddings = true;
  s.qkv_bias = true;
  s.rope_theta = 1e6;
  const flotilla::ModelDims d = flotilla::dims_from_config(s);
  flotilla::Model m(d);
  m.init_random(3);
  std::vector<float> full(m.base_layout().full_params());
  m.base_to_full(full.data());
  flotilla::interop::HfExportOptions o;
  o.dtype = "fp32";
  o.tokenizer_folder = kQwenTokenizer;
  flotilla::interop::export_hf_folder(dir.toStdString(), d, full.data(), o);
  return QFile::exists(QDir(dir).filePath(QStringLiteral("tokenizer.json")));
}

// 400 short chat records: capital cities and additions (the review's data set).
QByteArray chatRecords() {
  const char* capitals[][2] = {{"France", "Paris"}, {"Japan", "Tokyo"},   {"Italy", "Rome"},
                               {"Spain", "Madrid"}, {"Peru", "Lima"},     {"Egypt", "Cairo"},
                               {"Cuba", "Havana"},  {"Chile", "Santiago"}};
  QByteArray out;
  for (int i = 0; i < 400; ++i) {
    QString q, a;
    if (i % 2 == 0) {
      const auto& c = capitals[(i / 2) % 8];
      q = QStringLiteral("What is the capital of %1?").arg(QLatin1String(c[0]));
      a = QStringLiteral("The capital of %1 is %2.").arg(QLatin1String(c[0]), QLatin1String(c[1]));
    } else {
      q = QStringLiteral("What is %1 + %2?").arg(i % 10).arg(i % 7);
      a = QStringLiteral("%1 + %2 = %3.").arg(i % 10).arg(i % 7).arg(i % 10 + i % 7);
    }
    const QJsonArray messages{
        QJsonObject{{QStringLiteral("role"), QStringLiteral("user")}, {QStringLiteral("content"), q}},
        QJsonObject{{QStringLiteral("role"), QStringLiteral("assistant")}, {QStringLiteral("content"), a}}};
    out += QJsonDocument(QJsonObject{{QStringLiteral("messages"), messages}}).toJson(QJsonDocument::Compact) +
           '\n';
  }
  return out;
}

}  // namespace

class TestWizardSmallDataE2e : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase();
  void smallChatDataReachesLaunchAndTrains();

 private:
  QTemporaryDir m_tmp{QStringLiteral(FLOTILLA_TEST_TMP "/wizard_small_data-XXXXXX")};
  flotilla::ui::WorkspaceInfo m_workspace;
};

void TestWizardSmallDataE2e::initTestCase() {
  QVERIFY(m_tmp.isValid());
  QStandardPaths::setTestModeEnabled(true);
  QSettings::setPath(QSettings::NativeFormat, QSettings::UserScope, m_tmp.filePath(QStringLiteral("config")));
  const std::string dir = m_tmp.filePath(QStringLiteral("workspace")).toStdString();
  db::ensure_workspace_dir(dir);
  const db::Database d(db::workspace_database_path(dir));
  m_workspace.directory = QString::fromStdString(dir);
  m_workspace.databasePath = QString::fromStdString(d.path());
}

void TestWizardSmallDataE2e::smallChatDataReachesLaunchAndTrains() {
  const QString model = m_tmp.filePath(QStringLiteral("qwen-tiny"));
  QVERIFY(writeQwenFolder(model));
  const QString chats = m_tmp.filePath(QStringLiteral("chats.jsonl"));
  QVERIFY(writeFile(chats, chatRecords()));

  MainWindow w(m_workspace);
  w.localRuns()->setWorkerPath(QStringLiteral(FLOTILLA_WORKER_PATH));
  w.resize(1280, 800);
  w.show();
  auto* runsPage = qobject_cast<flotilla::ui::RunsPage*>(w.page(MainWindow::Runs));
  RunWizard* wizard = runsPage->openNewRunWizard();
  QVERIFY(wizard);

  // Model: the Hugging Face folder.
  wizard->modelPage()->chooseHfFolder(model);
  QVERIFY2(QTest::qWaitFor(
               [&] { return !wizard->modelPage()->isReadingFolder() && wizard->modelPage()->isComplete(); },
               20000),
           qPrintable(shownProblems(wizard->modelPage())));
  const int evalEvery = wizard->config().eval.every;
  QVERIFY(evalEvery > 0);
  wizard->next();
  QCOMPARE(wizard->currentId(), int(RunWizard::Data));

  // Data: the chat file, the model's own tokenizer, the defaults, Prepare shards.
  DataPage* data = wizard->dataPage();
  child<QAbstractButton>(data, "source-prepare")->click();
  QCOMPARE(data->mode(), DataPage::Prepare);
  data->setPrepareInputs({chats}, QString(), m_tmp.filePath(QStringLiteral("sft")));
  QCOMPARE(data->tokenizerSource(), TokenizerSource::Model);
  QCOMPARE(data->validation(), DataPage::ValidationBatch);
  child<QPushButton>(data, "prepareButton")->click();
  QTRY_VERIFY_WITH_TIMEOUT(!data->isPreparing(), 30000);
  QVERIFY2(data->prepared().ok, qPrintable(data->prepareStatus()));
  QCOMPARE(data->prepared().result.chat_records, 400);
  // The golden Qwen tokenizer has <think>: the engine's default for it is qwen3 (ChatML + think blocks).
  QCOMPARE(QString::fromStdString(data->prepared().result.chat_format), QStringLiteral("qwen3"));
  // Next is open (before issue 34: disabled, a 1 % split of 111 tokens was less than one batch)…
  QTRY_VERIFY2_WITH_TIMEOUT(data->isComplete(), qPrintable(shownProblems(data)), 20000);
  QVERIFY2(shownProblems(data).isEmpty(), qPrintable(shownProblems(data)));
  QVERIFY(wizard->button(QWizard::NextButton)->isEnabled());
  // … because the validation split is one batch of rows, and the run measures validation loss.
  const flotilla::RunConfig& c = wizard->config();
  const qint64 batchRows = qint64{c.parallel.dp} * c.train.micro_batch;
  QCOMPARE(data->batchRows(), batchRows);
  QVERIFY2(data->prepared().result.val_rows >= batchRows,
           qPrintable(QStringLiteral("%1 validation rows").arg(data->prepared().result.val_rows)));
  QVERIFY(!c.data.val.empty());
  QCOMPARE(c.eval.every, evalEvery);
  wizard->grab().save(QStringLiteral(FLOTILLA_SCREENSHOT_DIR "/wizard-data-small-chat.png"));

  // Next … to Review, as a user clicks: a short run (30 steps, validation at step 25).
  wizard->button(QWizard::NextButton)->click();
  QCOMPARE(wizard->currentId(), int(RunWizard::Hardware));
  QTRY_VERIFY(wizard->button(QWizard::NextButton)->isEnabled());
  wizard->grab().save(QStringLiteral(FLOTILLA_SCREENSHOT_DIR "/wizard-hardware-small-chat.png"));
  wizard->button(QWizard::NextButton)->click();
  QCOMPARE(wizard->currentId(), int(RunWizard::Batch));
  child<QSpinBox>(wizard->batchPage(), "steps")->setValue(30);
  QTRY_VERIFY(wizard->button(QWizard::NextButton)->isEnabled());
  wizard->button(QWizard::NextButton)->click();
  QCOMPARE(wizard->currentId(), int(RunWizard::Checkpoints));
  QTRY_VERIFY(wizard->button(QWizard::NextButton)->isEnabled());
  wizard->grab().save(QStringLiteral(FLOTILLA_SCREENSHOT_DIR "/wizard-checkpoints-small-chat.png"));
  wizard->button(QWizard::NextButton)->click();
  QCOMPARE(wizard->currentId(), int(RunWizard::Budget));
  QTRY_VERIFY(wizard->button(QWizard::NextButton)->isEnabled());
  wizard->button(QWizard::NextButton)->click();
  QCOMPARE(wizard->currentId(), int(RunWizard::Review));
  QTRY_VERIFY(wizard->button(QWizard::FinishButton)->isEnabled());

  // Launch: the run trains to the end on the prepared shards, validation included.
  auto* live = qobject_cast<flotilla::ui::LivePage*>(w.page(MainWindow::Live));
  const std::string val = wizard->config().data.val;
  wizard->button(QWizard::FinishButton)->click();
  ServiceRun* run = live->run();
  QVERIFY(run);
  QSignalSpy finished(run, &ServiceRun::finished);
  QVERIFY(finished.count() || finished.wait(240000));
  QVERIFY2(run->exitCode() == 0, qPrintable(run->stateText() + QStringLiteral("\n") + run->runDir()));
  const db::Database store(m_workspace.databasePath.toStdString());
  QTRY_COMPARE_WITH_TIMEOUT(db::get_run(store, run->storeId()).status, db::RunStatus::kCompleted, 20000);
  const flotilla::RunConfig ran =
      flotilla::load_config_file((run->runDir() + QStringLiteral("/run.toml")).toStdString());
  QCOMPARE(ran.data.val, val);
  QCOMPARE(ran.train.steps, 30);
  // Validation loss measured on the one-batch split (at step 25 and after the last), and stored.
  const auto val_points = db::metric_points(store, run->storeId(), "val_loss");
  QVERIFY2(!val_points.empty(), "no val_loss stored");
  QVERIFY(std::isfinite(val_points.back().value) && val_points.back().value > 0);
}

QTEST_MAIN(TestWizardSmallDataE2e)
#include "test_wizard_small_data_e2e.moc"
