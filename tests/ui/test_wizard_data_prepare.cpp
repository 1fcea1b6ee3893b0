// The wizard's Data page preparing fine-tuning data through its widgets, with the engine's real
// tokenizers and prepare_shards on real files: a chat + prompt/completion JSONL tokenized with the
// golden Llama 3 tokenizer.json (tests/engine/golden/tokenizers/llama3) gives labeled shards whose
// documents, targets and rows at the run's train.seq_len equal what the engine's chat rendering and
// packing plan give for the same records, and the page says so; packing off gives one document per
// row; a Hugging Face model's own tokenizer is the default, and one larger than the model's
// vocabulary blocks Next naming both numbers; a tokenizer trained here lands beside the shards.
#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QSpinBox>
#include <QTemporaryDir>
#include <QtTest>

#include "engine/data/chat_format.h"
#include "engine/data/loader.h"
#include "engine/data/packing.h"
#include "engine/tokenizer/bpe.h"
#include "ui/wizard/configdraft.h"
#include "ui/wizard/datapage.h"
#include "ui/wizard/modelpage.h"
#include "ui/wizard/runwizard.h"
#include "wizard_helpers.h"

using flotilla::RunConfig;
using flotilla::ui::DataPage;
using flotilla::ui::RunWizard;
using flotilla::ui::TokenizerSource;
using namespace wizard_helpers;

namespace {

const char* kLlama3 = FLOTILLA_SOURCE_DIR "/tests/engine/golden/tokenizers/llama3";

struct Conversation {
  std::vector<flotilla::ChatMessage> messages;
};

std::vector<Conversation> conversations() {
  QString longAnswer;
  for (int i = 0; i < 40; ++i)
    longAnswer += QStringLiteral("Step %1: stir the pot and wait a minute. ").arg(i);
  return {
      {{{"system", "You are terse.", {}}, {"user", "What is 2 + 2?", {}}, {"assistant", "4", {}}}},
      {{{"user", "Name a colour.", {}},
        {"assistant", "Blue.", {}},
        {"user", "Another?", {}},
        {"assistant", "Red.", {}}}},
      {{{"user", "How do I make soup?", {}}, {"assistant", longAnswer.toStdString(), {}}}},
      {{{"user", "Say hello in French.", {}}, {"assistant", "Bonjour !", {}}}},
      {{{"system", "Answer in one word.", {}}, {"user", "Opposite of hot?", {}}, {"assistant", "Cold", {}}}},
  };
}

const std::vector<std::pair<std::string, std::string>> kCompletions = {
    {"The capital of France is", " Paris."},
    {"Once upon a time", " there was a small boat."},
};

// One JSONL line per conversation, then the prompt/completion records.
QByteArray chatJsonl() {
  QByteArray out;
  for (const Conversation& c : conversations()) {
    QJsonArray messages;
    for (const auto& m : c.messages)
      messages.append(QJsonObject{{QStringLiteral("role"), QString::fromStdString(m.role)},
                                  {QStringLiteral("content"), QString::fromStdString(m.content)}});
    out += QJsonDocument(QJsonObject{{QStringLiteral("messages"), messages}}).toJson(QJsonDocument::Compact) +
           '\n';
  }
  for (const auto& [prompt, completion] : kCompletions)
    out += QJsonDocument(QJsonObject{{QStringLiteral("prompt"), QString::fromStdString(prompt)},
                                     {QStringLiteral("completion"), QString::fromStdString(completion)}})
               .toJson(QJsonDocument::Compact) +
           '\n';
  return out;
}

// The records as the engine tokenizes them one by one (chat: llama3; completions: plain).
std::vector<flotilla::LabeledDocument> expectedDocuments(const flotilla::Tokenizer& tok) {
  std::vector<flotilla::LabeledDocument> docs;
  for (const Conversation& c : conversations())
    docs.push_back(flotilla::tokenize_chat(tok, flotilla::ChatFormat::kLlama3, c.messages));
  for (const auto& [prompt, completion] : kCompletions)
    docs.push_back(flotilla::tokenize_completion(tok, flotilla::ChatFormat::kPlain, prompt, completion));
  return docs;
}

// Rows of T + 1 tokens the loader's packing plan makes of docs[first, last).
int64_t expectedRows(const std::vector<flotilla::LabeledDocument>& docs, size_t first, size_t last, int T,
                     bool pack, int64_t* split = nullptr) {
  std::vector<int64_t> starts;
  int64_t total = 0;
  for (size_t i = first; i < last; ++i) {
    starts.push_back(total);
    total += static_cast<int64_t>(docs[i].ids.size());
  }
  const flotilla::PackPlan plan = flotilla::plan_rows(starts, total, T, pack);
  if (split) *split = plan.split_documents;
  return plan.rows();
}

// Sums of the shard headers of a glob: documents and targets.
std::pair<int64_t, int64_t> shardTotals(const std::string& glob, bool* labeled, bool* pack) {
  int64_t documents = 0, targets = 0;
  for (const std::string& path : flotilla::expand_shards(glob)) {
    const flotilla::ShardInfo info = flotilla::inspect_shard(path);
    documents += info.documents;
    targets += info.targets;
    *labeled = info.labeled;
    *pack = info.pack;
  }
  return {documents, targets};
}

// One sequence per micro-batch, no accumulation: a batch reads a single row.
void oneRowPerBatch(RunWizard* w) {
  RunConfig c = w->config();
  c.train.micro_batch = 1;
  c.train.global_batch_tokens = 0;
  w->setConfig(c);
}

}  // namespace

class TestWizardDataPrepare : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase();
  void chatRecordsGiveLabeledPackedShards();
  void aHuggingFaceModelsTokenizerIsTheDefaultAndMustFitItsVocabulary();
  void aTokenizerTrainedHereIsSavedBesideTheShards();

 private:
  std::unique_ptr<RunWizard> makeWizard();
  DataPage* prepareMode(RunWizard* w);
  QTemporaryDir m_tmp;
};

void TestWizardDataPrepare::initTestCase() {
  QVERIFY(m_tmp.isValid());
  QVERIFY(writeFile(m_tmp.filePath(QStringLiteral("chats.jsonl")), chatJsonl()));
}

std::unique_ptr<RunWizard> TestWizardDataPrepare::makeWizard() {
  auto w = std::make_unique<RunWizard>(nullptr, m_tmp.filePath(QStringLiteral("templates")));
  w->setMachine(cpuMachine());
  w->resize(900, 720);
  w->show();
  if (!QTest::qWaitForWindowExposed(w.get())) qWarning("wizard not exposed");
  return w;
}

DataPage* TestWizardDataPrepare::prepareMode(RunWizard* w) {
  w->next();
  if (w->currentId() != RunWizard::Data) qFatal("not on the Data page");
  DataPage* page = w->dataPage();
  page->setMode(DataPage::Prepare);
  // 1 % of the tokens for validation (what Prepare did before issue 34 made one batch the
  // default): these small data sets then get a split smaller than one batch, which is refused.
  page->setValidation(DataPage::ValidationShare);
  child<QDoubleSpinBox>(page, "validationPercent")->setValue(1.0);
  return page;
}

void TestWizardDataPrepare::chatRecordsGiveLabeledPackedShards() {
  auto w = makeWizard();
  DataPage* page = prepareMode(w.get());
  const QString out = m_tmp.filePath(QStringLiteral("sft"));
  page->setPrepareInputs({m_tmp.filePath(QStringLiteral("chats.jsonl"))}, QLatin1String(kLlama3), out);
  QCOMPARE(page->tokenizerSource(), TokenizerSource::File);
  QCOMPARE(child<QComboBox>(page, "chatFormat")->currentData().toString(), QString());  // automatic
  QVERIFY(child<QCheckBox>(page, "packDocuments")->isChecked());
  page->startPrepare();
  QVERIFY(page->isPreparing());
  QTRY_VERIFY_WITH_TIMEOUT(!page->isPreparing(), 30000);
  const flotilla::PrepareResult r = page->prepared().result;  // a copy: preparing again replaces it
  QVERIFY2(page->prepared().ok, qPrintable(page->prepareStatus()));

  // What the engine makes of the same records one by one, split where prepare split them.
  const flotilla::Tokenizer tok = flotilla::Tokenizer::load(kLlama3);
  const std::vector<flotilla::LabeledDocument> docs = expectedDocuments(tok);
  int64_t tokens = 0, targets = 0;
  for (const auto& d : docs) {
    tokens += static_cast<int64_t>(d.ids.size());
    targets += d.target_count();
  }
  QVERIFY(r.labeled);
  QCOMPARE(r.chat_records, 5);
  QCOMPARE(r.completion_records, 2);
  QCOMPARE(QString::fromStdString(r.chat_format), QStringLiteral("llama3"));
  QCOMPARE(r.documents, 7);
  QCOMPARE(r.train_tokens + r.val_tokens, tokens);
  QCOMPARE(r.train_targets + r.val_targets, targets);
  QVERIFY(targets < tokens);  // masked: prompts and headers are not targets
  const int T = w->config().train.seq_len;
  QCOMPARE(T, 128);
  const size_t nVal = static_cast<size_t>(r.val_documents);
  QVERIFY(nVal >= 1);
  int64_t split = 0;
  QCOMPARE(r.train_rows, expectedRows(docs, nVal, docs.size(), T, true, &split));
  QCOMPARE(r.val_rows, expectedRows(docs, 0, nVal, T, true));
  QCOMPARE(r.split_documents, split);
  QVERIFY(split >= 1);  // the soup recipe is longer than a row

  // The shards on disk say the same, and data.* points at them.
  QCOMPARE(QString::fromStdString(w->config().data.source), QStringLiteral("shards"));
  QCOMPARE(QString::fromStdString(w->config().data.train), out + QStringLiteral("/train_*.bin"));
  QCOMPARE(QString::fromStdString(w->config().data.val), out + QStringLiteral("/val_*.bin"));
  bool labeled = false, pack = false;
  const auto [trainDocs, trainTargets] = shardTotals(w->config().data.train, &labeled, &pack);
  QVERIFY(labeled && pack);
  QCOMPARE(trainDocs, r.train_documents);
  QCOMPARE(trainTargets, r.train_targets);
  QCOMPARE(w->config().model.vocab_size, tok.vocab_size());  // not a Hugging Face model: the tokenizer's

  // The page's message counts them.
  const QString status = page->prepareStatus();
  const QLocale locale;
  for (const QString& part :
       {QStringLiteral("7 documents: 2 prompt/completion, 5 chat (llama3 format)"),
        QStringLiteral("Loss targets: %1 train, %2 validation")
            .arg(locale.toString(r.train_targets), locale.toString(r.val_targets)),
        QStringLiteral("Sequences of 128 tokens (train.seq_len): %1 train, %2 validation")
            .arg(locale.toString(r.train_rows), locale.toString(r.val_rows)),
        QStringLiteral("documents packed"),
        split == 1 ? QStringLiteral("1 document is longer than a row")
                   : QStringLiteral("%1 documents are longer than a row").arg(split)})
    QVERIFY2(status.contains(part), qPrintable(part + QStringLiteral("\nnot in\n") + status));
  QTRY_VERIFY(!page->isScanning());
  // The validation split is one packed row: refused (the worker's preflight) until a batch reads
  // one row (issue 18 item 1).
  QTRY_VERIFY2(shownProblems(page).contains(QStringLiteral("data.val: ")) &&
                   shownProblems(page).contains(QStringLiteral("fewer than one batch")),
               qPrintable(shownProblems(page)));
  oneRowPerBatch(w.get());
  QTRY_VERIFY2(page->isComplete(), qPrintable(shownProblems(page)));

  // Packing off: one document (or piece) per row, as the shard header records.
  child<QCheckBox>(page, "packDocuments")->setChecked(false);
  page->startPrepare();
  QTRY_VERIFY_WITH_TIMEOUT(!page->isPreparing(), 30000);
  QVERIFY2(page->prepared().ok, qPrintable(page->prepareStatus()));
  QCOMPARE(page->prepared().result.train_rows, expectedRows(docs, nVal, docs.size(), T, false));
  QVERIFY(page->prepared().result.train_rows > r.train_rows);
  shardTotals(w->config().data.train, &labeled, &pack);
  QVERIFY(labeled && !pack);
  QVERIFY2(page->prepareStatus().contains(QStringLiteral("one document per row")),
           qPrintable(page->prepareStatus()));

  // A chat format the tokenizer lacks the tokens of: the engine's message, nothing pointed at.
  auto* format = child<QComboBox>(page, "chatFormat");
  format->setCurrentIndex(format->findData(QStringLiteral("chatml")));
  page->startPrepare();
  QTRY_VERIFY_WITH_TIMEOUT(!page->isPreparing(), 30000);
  QVERIFY(!page->prepared().ok);
  QVERIFY2(page->prepareStatus().startsWith(QStringLiteral("Preparing failed: ")) &&
               page->prepareStatus().contains(QStringLiteral("<|im_start|>")),
           qPrintable(page->prepareStatus()));
  QVERIFY(!page->isComplete());
}

void TestWizardDataPrepare::aHuggingFaceModelsTokenizerIsTheDefaultAndMustFitItsVocabulary() {
  // The golden Qwen 2 model (vocabulary 128) with the golden Llama 3 tokenizer beside it.
  const QString model = m_tmp.filePath(QStringLiteral("hf-model"));
  QVERIFY(copyFiles(QStringLiteral(FLOTILLA_SOURCE_DIR "/tests/engine/golden/hf/qwen2"), model,
                    {QStringLiteral("config.json"), QStringLiteral("model.safetensors")}));
  QVERIFY(copyFiles(QLatin1String(kLlama3), model,
                    {QStringLiteral("tokenizer.json"), QStringLiteral("tokenizer_config.json")}));
  auto w = makeWizard();
  w->modelPage()->chooseHfFolder(model);
  QTRY_VERIFY_WITH_TIMEOUT(!w->modelPage()->isReadingFolder(), 10000);
  QTRY_VERIFY2(w->modelPage()->isComplete(), qPrintable(shownProblems(w->modelPage())));
  QCOMPARE(w->config().model.vocab_size, 128);
  DataPage* page = prepareMode(w.get());
  QCOMPARE(page->tokenizerSource(), TokenizerSource::Model);
  QVERIFY(!child<QWidget>(page, "prepareTokenizer")->isVisibleTo(page));
  page->setPrepareInputs({m_tmp.filePath(QStringLiteral("chats.jsonl"))}, QString(),
                         m_tmp.filePath(QStringLiteral("hf-sft")));
  page->startPrepare();
  QTRY_VERIFY_WITH_TIMEOUT(!page->isPreparing(), 30000);
  QVERIFY2(page->prepared().ok, qPrintable(page->prepareStatus()));
  const int tokens = flotilla::Tokenizer::load(model.toStdString()).vocab_size();
  QCOMPARE(page->prepared().tokenizerVocab, tokens);
  QCOMPARE(w->config().model.vocab_size, 128);  // the checkpoint's, not the tokenizer's
  QTRY_VERIFY(!page->isScanning());
  QVERIFY(!page->isComplete());
  QVERIFY2(
      shownProblems(page).contains(QStringLiteral("The tokenizer has %1 tokens but the model's vocabulary "
                                                  "(model.vocab_size) is 128")
                                       .arg(QLocale().toString(tokens))),
      qPrintable(shownProblems(page)));
  w->next();
  QCOMPARE(w->currentId(), int(RunWizard::Data));
  // A model vocabulary that covers the tokenizer clears it.
  w->draft()->edit([&](RunConfig& c) { c.model.vocab_size = tokens; });
  // The validation split is one packed row: refused (the worker's preflight) until a batch reads
  // one row (issue 18 item 1).
  QTRY_VERIFY2(shownProblems(page).contains(QStringLiteral("data.val: ")) &&
                   shownProblems(page).contains(QStringLiteral("fewer than one batch")),
               qPrintable(shownProblems(page)));
  oneRowPerBatch(w.get());
  QTRY_VERIFY2(page->isComplete(), qPrintable(shownProblems(page)));
}

void TestWizardDataPrepare::aTokenizerTrainedHereIsSavedBesideTheShards() {
  // Prompt/completion records (plain format: <|endoftext|> ends each) and a text file.
  QByteArray jsonl;
  std::vector<std::string> texts;
  for (int i = 0; i < 30; ++i) {
    const std::string prompt = "Question " + std::to_string(i % 7) + ": what does the fox do?";
    const std::string completion =
        " The quick brown fox jumps over the lazy dog " + std::to_string(i) + " times.";
    jsonl += QJsonDocument(QJsonObject{{QStringLiteral("prompt"), QString::fromStdString(prompt)},
                                       {QStringLiteral("completion"), QString::fromStdString(completion)}})
                 .toJson(QJsonDocument::Compact) +
             '\n';
    texts.push_back(prompt + completion);
  }
  const QString input = m_tmp.filePath(QStringLiteral("qa.jsonl"));
  QVERIFY(writeFile(input, jsonl));
  const QString out = m_tmp.filePath(QStringLiteral("trained"));

  auto w = makeWizard();
  DataPage* page = prepareMode(w.get());
  page->setPrepareInputs({input}, QString(), out);
  child<QComboBox>(page, "tokenizerSource")->setCurrentIndex(2);
  emit child<QComboBox>(page, "tokenizerSource")->activated(2);
  QCOMPARE(page->tokenizerSource(), TokenizerSource::Train);
  QVERIFY(child<QSpinBox>(page, "trainVocabSize")->isVisibleTo(page));
  child<QSpinBox>(page, "trainVocabSize")->setValue(300);
  page->startPrepare();
  QTRY_VERIFY_WITH_TIMEOUT(!page->isPreparing(), 30000);
  QVERIFY2(page->prepared().ok, qPrintable(page->prepareStatus()));

  // Trained on the records' text (not their JSON), saved where Tokenizer::load(out) finds it.
  const QString saved = out + QStringLiteral("/tokenizer.flotilla.json");
  QCOMPARE(page->prepared().savedTokenizer, saved);
  const flotilla::Tokenizer loaded = flotilla::Tokenizer::load(out.toStdString());
  const flotilla::Tokenizer expected =
      flotilla::Tokenizer::train(std::vector<std::string_view>(texts.begin(), texts.end()), 300);
  QCOMPARE(QString::fromStdString(loaded.to_json()), QString::fromStdString(expected.to_json()));
  QCOMPARE(w->config().model.vocab_size, loaded.vocab_size());
  QVERIFY(loaded.vocab_size() <= 300);
  const flotilla::PrepareResult& r = page->prepared().result;
  QVERIFY(r.labeled);
  QCOMPARE(r.completion_records, 30);
  int64_t targets = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::string prompt = "Question " + std::to_string(i % 7) + ": what does the fox do?";
    targets += flotilla::tokenize_completion(loaded, flotilla::ChatFormat::kPlain, prompt,
                                             texts[i].substr(prompt.size()))
                   .target_count();
  }
  QCOMPARE(r.train_targets + r.val_targets, targets);
  // Every id of the shards is inside the model's vocabulary.
  for (const std::string& path : flotilla::expand_shards(w->config().data.train))
    flotilla::inspect_shard(path, w->config().model.vocab_size, true);
  QVERIFY2(page->prepareStatus().contains(QStringLiteral("Tokenizer trained here, saved as ") + saved),
           qPrintable(page->prepareStatus()));
  QTRY_VERIFY(!page->isScanning());
  // The validation split is one packed row: refused (the worker's preflight) until a batch reads
  // one row (issue 18 item 1).
  QTRY_VERIFY2(shownProblems(page).contains(QStringLiteral("data.val: ")) &&
                   shownProblems(page).contains(QStringLiteral("fewer than one batch")),
               qPrintable(shownProblems(page)));
  oneRowPerBatch(w.get());
  QTRY_VERIFY2(page->isComplete(), qPrintable(shownProblems(page)));
}

QTEST_MAIN(TestWizardDataPrepare)
#include "test_wizard_data_prepare.moc"
