// Issue 34's wizard items, each through the pages' widgets with the engine's real tokenizer,
// prepare_shards and preflight:
//  - item 2: the Data page's Prepare has a validation choice and a sequence length; "none" clears
//    data.val and sets eval.every to 0 (the Checkpoints page follows); a split too small for one
//    batch (1 % of small chat data, the old default) offers its fixes as buttons under the message,
//    and each opens Next; no message on the page is ever drawn disabled;
//  - item 13: a shard path typed and abandoned for the synthetic corpus does not reach the config;
//  - item 11: a figure that waits on a problem names where that problem is (this page's field, or
//    another page); the Checkpoints summary says when there is no validation data;
//  - item 24: a missing shard folder's message appears once;
//  - item 27: the Model page's shape fields have tooltips;
//  - item 28: "parallel.tp=3 does not divide …" names the key once.
#include <QAbstractButton>
#include <QApplication>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSpinBox>
#include <QTemporaryDir>
#include <QtTest>

#include "engine/data/loader.h"
#include "ui/wizard/checkpointpage.h"
#include "ui/wizard/configdraft.h"
#include "ui/wizard/datapage.h"
#include "ui/wizard/hardwarepage.h"
#include "ui/wizard/modelpage.h"
#include "ui/wizard/runwizard.h"
#include "wizard_helpers.h"

using flotilla::RunConfig;
using flotilla::ui::DataPage;
using flotilla::ui::RunWizard;
using namespace wizard_helpers;

namespace {

const char* kQwenTokenizer = FLOTILLA_SOURCE_DIR "/tests/engine/golden/tokenizers/qwen";

QByteArray chatRecords(int n) {
  QByteArray out;
  for (int i = 0; i < n; ++i) {
    const QJsonArray messages{
        QJsonObject{{QStringLiteral("role"), QStringLiteral("user")},
                    {QStringLiteral("content"), QStringLiteral("What is %1 + %2?").arg(i % 10).arg(i % 7)}},
        QJsonObject{{QStringLiteral("role"), QStringLiteral("assistant")},
                    {QStringLiteral("content"),
                     QStringLiteral("%1 + %2 = %3.").arg(i % 10).arg(i % 7).arg(i % 10 + i % 7)}}};
    out += QJsonDocument(QJsonObject{{QStringLiteral("messages"), messages}}).toJson(QJsonDocument::Compact) +
           '\n';
  }
  return out;
}

// Labels with text that are shown on the page but drawn disabled (greyed).
QStringList greyedMessages(QWidget* page) {
  QStringList out;
  for (QLabel* l : page->findChildren<QLabel*>())
    if (l->isVisibleTo(page) && !l->text().isEmpty() && !l->isEnabled()) out << l->text();
  return out;
}

// For a person to look at (FLOTILLA_SCREENSHOT_DIR/wizard-NAME.png).
void grab(QWidget* w, const QString& name) {
  QApplication::processEvents();
  w->window()->grab().save(QStringLiteral(FLOTILLA_SCREENSHOT_DIR "/wizard-") + name +
                           QStringLiteral(".png"));
}

}  // namespace

class TestWizardMessages : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase();
  void aSplitTooSmallForABatchOffersItsFixes();
  void noValidationClearsItAndTheCheckpointsPageFollows();
  void dataTooSmallForABatchOfValidationHasAWayOn();
  void abandonedShardPathsStayOutOfTheConfig();
  void abandonedLoraSettingsStayOutOfTheConfig();
  void aMissingShardFolderIsSaidOnce();
  void figuresThatWaitNameWhereTheProblemIs();
  void modelFieldsHaveTooltips();
  void aKeyIsNamedOnce();

 private:
  std::unique_ptr<RunWizard> makeWizard();
  DataPage* prepared(RunWizard* w, const QString& out, DataPage::Validation v, double percent = 1);
  QTemporaryDir m_tmp;
};

void TestWizardMessages::initTestCase() {
  QVERIFY(m_tmp.isValid());
  QVERIFY(writeFile(m_tmp.filePath(QStringLiteral("chats.jsonl")), chatRecords(400)));
}

std::unique_ptr<RunWizard> TestWizardMessages::makeWizard() {
  auto w = std::make_unique<RunWizard>(nullptr, m_tmp.filePath(QStringLiteral("templates")));
  w->setMachine(cpuMachine());
  w->resize(900, 760);
  w->show();
  if (!QTest::qWaitForWindowExposed(w.get())) qWarning("wizard not exposed");
  return w;
}

DataPage* TestWizardMessages::prepared(RunWizard* w, const QString& out, DataPage::Validation v,
                                       double percent) {
  // The demo model with the golden ChatML tokenizer's vocabulary.
  RunConfig c = w->config();
  c.model.vocab_size = 1024;
  w->setConfig(c);
  w->next();
  DataPage* page = w->dataPage();
  child<QAbstractButton>(page, "source-prepare")->click();
  page->setPrepareInputs({m_tmp.filePath(QStringLiteral("chats.jsonl"))}, QLatin1String(kQwenTokenizer), out);
  auto* choice = child<QComboBox>(page, "validationChoice");
  choice->setCurrentIndex(choice->findData(v));
  emit choice->activated(choice->currentIndex());
  child<QDoubleSpinBox>(page, "validationPercent")->setValue(percent);
  child<QPushButton>(page, "prepareButton")->click();
  if (!QTest::qWaitFor([&] { return !page->isPreparing(); }, 30000)) qWarning("still preparing");
  if (!QTest::qWaitFor([&] { return !page->isScanning(); }, 10000)) qWarning("still reading the shards");
  return page;
}

void TestWizardMessages::aSplitTooSmallForABatchOffersItsFixes() {
  for (const char* fix : {"fixMicroBatch", "fixValidationRows", "fixNoValidation"}) {
    auto w = makeWizard();
    DataPage* page = prepared(w.get(), m_tmp.filePath(QStringLiteral("small-") + QLatin1String(fix)),
                              DataPage::ValidationShare);
    QVERIFY2(page->prepared().ok, qPrintable(page->prepareStatus()));
    QVERIFY(page->prepared().result.val_rows < page->batchRows());
    // Refused, said in red at the foot of the page (never inside a greyed box), with the fixes.
    QTRY_VERIFY2(shownProblems(page).contains(QStringLiteral("fewer than one batch")),
                 qPrintable(shownProblems(page)));
    QVERIFY(!page->isComplete());
    QVERIFY2(greyedMessages(page).isEmpty(), qPrintable(greyedMessages(page).join(QLatin1Char('\n'))));
    QVERIFY(child<QWidget>(page, "dataFixes")->isVisibleTo(page));
    auto* button = child<QPushButton>(page, fix);
    QVERIFY2(button->isVisibleTo(page) && button->isEnabled(), fix);
    if (QLatin1String(fix) == QLatin1String("fixMicroBatch"))
      grab(page, QStringLiteral("data-split-too-small"));
    if (QLatin1String(fix) == QLatin1String("fixMicroBatch")) {
      QVERIFY(page->fittingMicroBatch() >= 1 && page->fittingMicroBatch() < w->config().train.micro_batch);
      QVERIFY2(button->text().contains(QString::number(page->fittingMicroBatch())),
               qPrintable(button->text()));
    }
    const qint64 tokensBefore = flotilla::tokens_per_step(w->config());
    button->click();
    QVERIFY(QTest::qWaitFor([&] { return !page->isPreparing(); }, 30000));
    QTRY_VERIFY2_WITH_TIMEOUT(page->isComplete(), qPrintable(shownProblems(page)), 20000);
    QVERIFY(!child<QWidget>(page, "dataFixes")->isVisibleTo(page));
    const RunConfig& c = w->config();
    if (QLatin1String(fix) == QLatin1String("fixMicroBatch")) {
      QCOMPARE(flotilla::tokens_per_step(c), tokensBefore);  // the global batch is kept
      QVERIFY(!c.data.val.empty());
    } else if (QLatin1String(fix) == QLatin1String("fixValidationRows")) {
      QCOMPARE(page->validation(), DataPage::ValidationBatch);
      QVERIFY(page->prepared().result.val_rows >= page->batchRows());
    } else {
      QVERIFY(c.data.val.empty());
      QCOMPARE(c.eval.every, 0);
    }
    QVERIFY(w->button(QWizard::NextButton)->isEnabled());
    grab(page, QStringLiteral("data-after-") + QLatin1String(fix));
    w->next();
    QCOMPARE(w->currentId(), int(RunWizard::Hardware));
  }
}

void TestWizardMessages::noValidationClearsItAndTheCheckpointsPageFollows() {
  auto w = makeWizard();
  const int every = w->config().eval.every;
  QVERIFY(every > 0);
  DataPage* page = prepared(w.get(), m_tmp.filePath(QStringLiteral("none")), DataPage::ValidationNone);
  QVERIFY2(page->prepared().ok, qPrintable(page->prepareStatus()));
  QCOMPARE(page->prepared().result.val_tokens, 0);
  QVERIFY(w->config().data.val.empty());
  QCOMPARE(w->config().eval.every, 0);
  QTRY_VERIFY2(page->isComplete(), qPrintable(shownProblems(page)));
  QCOMPARE(w->advanceTo(RunWizard::Checkpoints), int(RunWizard::Checkpoints));
  auto* checkpoints = w->checkpointPage();
  const QString summary = child<QLabel>(checkpoints, "checkpointSummary")->text();
  QVERIFY2(summary.contains(QStringLiteral("no validation loss")) &&
               !summary.contains(QStringLiteral("measurement")),
           qPrintable(summary));
  QVERIFY(!child<QSpinBox>(checkpoints, "evalEvery")->isEnabled());
  grab(checkpoints, QStringLiteral("checkpoints-no-validation"));
  QVERIFY(checkpoints->isComplete());
  QVERIFY2(greyedMessages(checkpoints).isEmpty(),
           qPrintable(greyedMessages(checkpoints).join(QLatin1Char('\n'))));
  // Back to a validation split: eval.every comes back.
  w->back();
  w->back();
  w->back();
  QCOMPARE(w->currentId(), int(RunWizard::Data));
  page->setValidation(DataPage::ValidationBatch);
  QCOMPARE(w->config().eval.every, every);
  QTRY_VERIFY_WITH_TIMEOUT(page->isPreparing() || !w->config().data.val.empty(), 5000);
  QVERIFY(QTest::qWaitFor([&] { return !page->isPreparing(); }, 30000));
  QTRY_VERIFY_WITH_TIMEOUT(!w->config().data.val.empty(), 10000);
  QTRY_VERIFY2(page->isComplete(), qPrintable(shownProblems(page)));
}

void TestWizardMessages::dataTooSmallForABatchOfValidationHasAWayOn() {
  // Six chats cannot fill one batch (8 rows) of validation and leave a training split: Prepare
  // fails; the engine's words are listed in red and "Train without validation" prepares again.
  const QString tiny = m_tmp.filePath(QStringLiteral("tiny.jsonl"));
  QVERIFY(writeFile(tiny, chatRecords(6)));
  auto w = makeWizard();
  RunConfig c = w->config();
  c.model.vocab_size = 1024;
  w->setConfig(c);
  w->next();
  DataPage* page = w->dataPage();
  child<QAbstractButton>(page, "source-prepare")->click();
  page->setPrepareInputs({tiny}, QLatin1String(kQwenTokenizer), m_tmp.filePath(QStringLiteral("tiny")));
  QCOMPARE(page->validation(), DataPage::ValidationBatch);
  child<QPushButton>(page, "prepareButton")->click();
  QTRY_VERIFY_WITH_TIMEOUT(!page->isPreparing(), 30000);
  QVERIFY(!page->prepared().ok);
  QTRY_VERIFY2(shownProblems(page).contains(QStringLiteral("Preparing failed: ")) &&
                   shownProblems(page).contains(QStringLiteral("validation rows")),
               qPrintable(shownProblems(page)));
  QVERIFY(!page->isComplete());
  QVERIFY2(greyedMessages(page).isEmpty(), qPrintable(greyedMessages(page).join(QLatin1Char('\n'))));
  auto* noVal = child<QPushButton>(page, "fixNoValidation");
  QVERIFY(noVal->isVisibleTo(page));
  grab(page, QStringLiteral("data-too-small-for-validation"));
  noVal->click();
  QTRY_VERIFY_WITH_TIMEOUT(!page->isPreparing(), 30000);
  QVERIFY2(page->prepared().ok, qPrintable(page->prepareStatus()));
  QCOMPARE(page->validation(), DataPage::ValidationNone);
  QCOMPARE(w->config().eval.every, 0);
  // The six chats train with one row per batch; the page offers that micro-batch.
  QTRY_VERIFY_WITH_TIMEOUT(!page->isScanning(), 10000);
  if (!page->isComplete()) {
    QVERIFY2(child<QPushButton>(page, "fixMicroBatch")->isVisibleTo(page), qPrintable(shownProblems(page)));
    child<QPushButton>(page, "fixMicroBatch")->click();
  }
  QTRY_VERIFY2(page->isComplete(), qPrintable(shownProblems(page)));
}

void TestWizardMessages::abandonedShardPathsStayOutOfTheConfig() {
  auto w = makeWizard();
  const RunConfig start = w->config();
  w->next();
  DataPage* page = w->dataPage();
  child<QAbstractButton>(page, "source-shards")->click();
  auto* train = child<QLineEdit>(page, "trainShards");
  QTest::keyClicks(train, QStringLiteral("/does/not/exist/train_*.bin"));
  QCOMPARE(QString::fromStdString(w->config().data.train), QStringLiteral("/does/not/exist/train_*.bin"));
  child<QAbstractButton>(page, "source-synthetic")->click();
  QVERIFY(w->config().data.train.empty());
  QVERIFY(w->config().data.val.empty());
  QCOMPARE(w->config().data.source, std::string("synthetic"));
  QCOMPARE(w->advanceTo(RunWizard::Review), int(RunWizard::Review));
  QVERIFY(w->config().data.train.empty());
  QCOMPARE(w->config().data.synthetic_tokens, start.data.synthetic_tokens);
  // The typed path is still in its field: choosing shards again brings it back.
  w->back();
  while (w->currentId() != RunWizard::Data) w->back();
  QCOMPARE(train->text(), QStringLiteral("/does/not/exist/train_*.bin"));
  child<QAbstractButton>(page, "source-shards")->click();
  QCOMPARE(QString::fromStdString(w->config().data.train), QStringLiteral("/does/not/exist/train_*.bin"));
}

void TestWizardMessages::abandonedLoraSettingsStayOutOfTheConfig() {
  // A Hugging Face folder (the golden Qwen 2), LoRA with rank 4 and dropout, then full fine-tuning.
  const QString model = m_tmp.filePath(QStringLiteral("hf-qwen2"));
  QVERIFY(copyFiles(QStringLiteral(FLOTILLA_SOURCE_DIR "/tests/engine/golden/hf/qwen2"), model,
                    {QStringLiteral("config.json"), QStringLiteral("model.safetensors")}));
  auto w = makeWizard();
  w->modelPage()->chooseHfFolder(model);
  QTRY_VERIFY_WITH_TIMEOUT(!w->modelPage()->isReadingFolder() && w->modelPage()->isComplete(), 10000);
  child<QAbstractButton>(w->modelPage(), "trainingLora")->click();
  child<QSpinBox>(w->modelPage(), "loraRank")->setValue(4);
  child<QDoubleSpinBox>(w->modelPage(), "loraDropout")->setValue(0.1);
  QCOMPARE(w->config().lora.rank, 4);
  child<QAbstractButton>(w->modelPage(), "trainingFull")->click();
  const flotilla::LoraSection defaults;
  QVERIFY(!w->config().lora.enabled);
  QCOMPARE(w->config().lora.rank, defaults.rank);
  QCOMPARE(w->config().lora.dropout, defaults.dropout);
}

void TestWizardMessages::aMissingShardFolderIsSaidOnce() {
  auto w = makeWizard();
  w->next();
  DataPage* page = w->dataPage();
  child<QAbstractButton>(page, "source-shards")->click();
  auto* train = child<QLineEdit>(page, "trainShards");
  QTest::keyClicks(train, QStringLiteral("/does/not/exist"));
  QVERIFY(QTest::qWaitFor([&] { return !page->isScanning(); }, 10000));
  QTRY_VERIFY(shownProblems(page).contains(QStringLiteral("/does/not/exist")));
  int times = 0;
  for (QLabel* l : page->findChildren<QLabel*>())
    if (l->isVisibleTo(page) && l->text().contains(QStringLiteral("/does/not/exist"))) ++times;
  QCOMPARE(times, 1);
  grab(page, QStringLiteral("data-missing-folder"));
  QVERIFY(!page->problemBeside(QStringLiteral("data.train")).isEmpty());
  QVERIFY2(greyedMessages(page).isEmpty(), qPrintable(greyedMessages(page).join(QLatin1Char('\n'))));
  // Back to synthetic: nothing stale is left on the page.
  child<QAbstractButton>(page, "source-synthetic")->click();
  QTRY_VERIFY(page->isComplete());
  QVERIFY2(shownProblems(page).isEmpty(), qPrintable(shownProblems(page)));
  QVERIFY2(greyedMessages(page).isEmpty(), qPrintable(greyedMessages(page).join(QLatin1Char('\n'))));
}

void TestWizardMessages::figuresThatWaitNameWhereTheProblemIs() {
  // Model page: 3 heads do not divide the width; the parameter count points at that field.
  {
    auto w = makeWizard();
    auto* model = w->modelPage();
    child<QSpinBox>(model, "nHead")->setValue(3);
    QTRY_VERIFY(!model->isComplete());
    QLabel* params = nullptr;
    for (QLabel* l : model->findChildren<QLabel*>())
      if (l->text().startsWith(QStringLiteral("— ("))) params = l;
    QVERIFY(params);
    QVERIFY2(params->text().contains(QStringLiteral("under “Attention heads”")), qPrintable(params->text()));
    QVERIFY(!params->text().contains(QStringLiteral("below")));
    grab(model, QStringLiteral("model-heads3"));
  }
  // Hardware page: the problem is on the Checkpoints page (eval.every with no validation shards).
  {
    auto w = makeWizard();
    // Shards that exist (prepared with no validation) so only eval.every is wrong.
    DataPage* page = prepared(w.get(), m_tmp.filePath(QStringLiteral("hw")), DataPage::ValidationNone);
    QVERIFY(page->prepared().ok);
    w->draft()->edit([](RunConfig& r) { r.eval.every = 25; });
    QTRY_VERIFY(page->isComplete());
    w->next();
    QCOMPARE(w->currentId(), int(RunWizard::Hardware));
    const QString plan = child<QLabel>(w->hardwarePage(), "planText")->text();
    QVERIFY2(plan.contains(QStringLiteral("on the %1 page").arg(w->checkpointPage()->title())) &&
                 plan.contains(QStringLiteral("eval.every")),
             qPrintable(plan));
    QVERIFY(!plan.contains(QStringLiteral("fix the problems shown")));
    grab(w->hardwarePage(), QStringLiteral("hardware-problem-elsewhere"));
  }
}

void TestWizardMessages::modelFieldsHaveTooltips() {
  auto w = makeWizard();
  for (const char* name : {"nLayer", "nHead", "nEmbd", "nKvHead", "headDim", "ffnDim", "ropeTheta",
                           "vocabSize", "maxSeqLen", "qkvBias", "qkNorm", "tieEmbeddings"}) {
    const QString tip = child<QWidget>(w->modelPage(), name)->toolTip();
    QVERIFY2(tip.size() > 30, name);
  }
}

void TestWizardMessages::aKeyIsNamedOnce() {
  auto w = makeWizard();
  w->next();
  w->next();
  QCOMPARE(w->currentId(), int(RunWizard::Hardware));
  auto* hw = w->hardwarePage();
  child<QSpinBox>(hw, "ranks")->setValue(3);
  child<QSpinBox>(hw, "tp")->setValue(3);
  QTRY_VERIFY(shownProblems(hw).contains(QStringLiteral("does not divide")));
  QVERIFY2(shownProblems(hw).contains(QStringLiteral("parallel.tp=3 does not divide")) &&
               !shownProblems(hw).contains(QStringLiteral("parallel.tp: parallel.tp=")),
           qPrintable(shownProblems(hw)));
  grab(hw, QStringLiteral("hardware-tp3"));
}

QTEST_MAIN(TestWizardMessages)
#include "test_wizard_messages.moc"
