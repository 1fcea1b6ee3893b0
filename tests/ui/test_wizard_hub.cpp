// The wizard's Model page picking a Hugging Face model by name (issue 40), through its widgets over
// real files and the real worker: a Hugging Face cache laid out as huggingface_hub writes it
// (blobs/, snapshots/<commit>/ relative links, refs/main) lists its models with their architecture,
// parameters and whether Flotilla trains them (a GPT-2 row greyed, the reason as its tooltip);
// the search filters the rows; picking a row sets model.init_from to the name and every shape key
// from the snapshot's config.json, and the Review page shows the name and commit; a hostile name is
// refused inline and starts no process; and against the stand-in Hub (tests/tools/hub_server.py,
// HTTPS with a self-signed certificate) `flotilla-worker hub download --json` shows its progress and
// ends with the model chosen, a gated model shows the worker's message, and Cancel stops the process
// while Launch waits for the download.
#include <QAbstractButton>
#include <QDir>
#include <QLabel>
#include <QLineEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QtTest>

#include "engine/config/config_io.h"
#include "engine/interop/hub.h"
#include "engine/tokenizer/bpe.h"
#include "tests/engine/hub_server_util.h"
#include "ui/wizard/datapage.h"
#include "ui/wizard/dataprepare.h"
#include "ui/wizard/hubpicker.h"
#include "ui/wizard/modelpage.h"
#include "ui/wizard/reviewpage.h"
#include "ui/wizard/runwizard.h"
#include "ui/wizard/wizardformat.h"
#include "wizard_helpers.h"

using flotilla::ui::DataPage;
using flotilla::ui::HubPicker;
using flotilla::ui::ModelPage;
using flotilla::ui::RunWizard;
using namespace wizard_helpers;

namespace {

const char* kGolden = FLOTILLA_SOURCE_DIR "/tests/engine/golden/hf/qwen2";
const QString kCommitQwen = QStringLiteral("1111111111111111111111111111111111111111");
const QString kCommitSmol = QStringLiteral("2222222222222222222222222222222222222222");
const QString kCommitGpt2 = QStringLiteral("3333333333333333333333333333333333333333");

QByteArray readAll(const QString& path) {
  QFile f(path);
  return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
}

int rowOf(QTableWidget* table, const QString& name) {
  for (int row = 0; row < table->rowCount(); ++row)
    if (table->item(row, HubPicker::NameColumn)->text() == name) return row;
  return -1;
}

QStringList visibleNames(QTableWidget* table) {
  QStringList out;
  for (int row = 0; row < table->rowCount(); ++row)
    if (!table->isRowHidden(row)) out << table->item(row, HubPicker::NameColumn)->text();
  return out;
}

}  // namespace

class TestWizardHub : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase();
  void theTableListsTheCachedModels();
  void theSearchFiltersTheRows();
  void aCacheHuggingFaceHubWroteIsListedAndPicked();
  void pickingARowSetsTheNameAndTheShape();
  void theDataPageUsesTheNamedModelsTokenizer();
  void aHostileNameIsRefusedInline();
  void aDownloadShowsProgressAndEndsChosen();
  void aGatedModelShowsWhatToDo();
  void cancelStopsTheDownloadAndLaunchWaits();
  void aPickedAndADownloadedModelBothTrain();

 private:
  std::unique_ptr<RunWizard> makeWizard();
  // A fresh cache with three models (HF_HUB_CACHE points at it).
  QString makeCache(const QString& name);
  // The Model page on "Hugging Face by name", its cache listed.
  HubPicker* openByName(RunWizard* w);
  void serveTinyModel(flotilla_test::HubServer& hub, const std::string& repo);
  // Trains three steps of the wizard's config with the real worker; "" when it trained, else its log.
  QString trainWithWorker(RunWizard* w, const QString& name);
  QTemporaryDir m_tmp;
};

void TestWizardHub::initTestCase() {
  QVERIFY(m_tmp.isValid());
  qunsetenv("HF_TOKEN");
  qunsetenv("HF_HUB_OFFLINE");
  qputenv("HF_HOME", m_tmp.filePath(QStringLiteral("hf-home")).toUtf8());  // no token file there
}

std::unique_ptr<RunWizard> TestWizardHub::makeWizard() {
  auto w = std::make_unique<RunWizard>(nullptr, m_tmp.filePath(QStringLiteral("templates")));
  w->setMachine(cpuMachine());
  w->modelPage()->setWorkerPath(QStringLiteral(FLOTILLA_WORKER_PATH));
  w->resize(900, 760);
  w->show();
  if (!QTest::qWaitForWindowExposed(w.get())) qWarning("wizard not exposed");
  return w;
}

QString TestWizardHub::makeCache(const QString& name) {
  const QString hub = m_tmp.filePath(name);
  const QString staging = m_tmp.filePath(name + QStringLiteral("-staging"));
  const QStringList files{QStringLiteral("config.json"), QStringLiteral("generation_config.json"),
                          QStringLiteral("model.safetensors")};
  // A Qwen 2 model (the golden folder), a SmolLM2-135M-shaped one (sparse weights: headers only)
  // and a GPT-2 model Flotilla cannot fine-tune from a folder.
  if (!copyFiles(QLatin1String(kGolden), staging + QStringLiteral("/qwen"), files) ||
      !addToHfCache(hub, QStringLiteral("Qwen/Qwen2-tiny"), kCommitQwen, staging + QStringLiteral("/qwen")))
    qFatal("cannot lay out the qwen model");
  if (!writeSparseLlamaFolder(staging + QStringLiteral("/smol"), 30, 576, 1536, 9, 3, 49152, true) ||
      !addToHfCache(hub, QStringLiteral("HuggingFaceTB/SmolLM2-135M"), kCommitSmol,
                    staging + QStringLiteral("/smol")))
    qFatal("cannot lay out the smol model");
  QDir().mkpath(staging + QStringLiteral("/gpt2"));
  if (!writeFile(staging + QStringLiteral("/gpt2/config.json"),
                 R"({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_layer": 2, "n_head": 2,
                     "n_embd": 32, "vocab_size": 128, "n_positions": 64})") ||
      !QFile::copy(QLatin1String(kGolden) + QStringLiteral("/model.safetensors"),
                   staging + QStringLiteral("/gpt2/model.safetensors")) ||
      !addToHfCache(hub, QStringLiteral("openai-community/gpt2"), kCommitGpt2,
                    staging + QStringLiteral("/gpt2")))
    qFatal("cannot lay out the gpt2 model");
  qputenv("HF_HUB_CACHE", hub.toUtf8());
  return hub;
}

HubPicker* TestWizardHub::openByName(RunWizard* w) {
  ModelPage* page = w->modelPage();
  child<QAbstractButton>(page, "modelSource-hub")->click();
  HubPicker* picker = page->hubPicker();
  if (page->source() != ModelPage::HfName) qWarning("not on the name source");
  if (!QTest::qWaitFor([&] { return !picker->isListing(); }, 20000)) qWarning("the cache was not listed");
  return picker;
}

void TestWizardHub::theTableListsTheCachedModels() {
  const QString hub = makeCache(QStringLiteral("cache-list"));
  auto w = makeWizard();
  HubPicker* picker = openByName(w.get());
  ModelPage* page = w->modelPage();
  QVERIFY(picker->table()->isVisibleTo(page));
  QVERIFY(!child<QLineEdit>(page, "hfFolder")->isVisibleTo(page));
  QVERIFY2(picker->listing().error.isEmpty(), qPrintable(picker->listing().error));
  const QString cacheText = picker->cacheLabel()->text();
  QVERIFY2(cacheText.contains(hub) && cacheText.contains(QLatin1String("HF_HUB_CACHE")),
           qPrintable(cacheText));

  QTableWidget* table = picker->table();
  QCOMPARE(table->rowCount(), 3);
  const int qwen = rowOf(table, QStringLiteral("Qwen/Qwen2-tiny"));
  const int smol = rowOf(table, QStringLiteral("HuggingFaceTB/SmolLM2-135M"));
  const int gpt2 = rowOf(table, QStringLiteral("openai-community/gpt2"));
  QVERIFY(qwen >= 0 && smol >= 0 && gpt2 >= 0);
  QCOMPARE(table->item(qwen, HubPicker::ArchColumn)->text(), QStringLiteral("Qwen2ForCausalLM"));
  QCOMPARE(table->item(smol, HubPicker::ArchColumn)->text(), QStringLiteral("LlamaForCausalLM"));
  QCOMPARE(table->item(gpt2, HubPicker::ArchColumn)->text(), QStringLiteral("GPT2LMHeadModel"));
  QCOMPARE(table->item(smol, HubPicker::ParamsColumn)->text(), QStringLiteral("135 M"));
  QCOMPARE(table->item(qwen, HubPicker::RevisionColumn)->text(), QStringLiteral("1111111 (main)"));
  QVERIFY(!table->item(qwen, HubPicker::SizeColumn)->text().isEmpty());
  QCOMPARE(table->item(qwen, HubPicker::TrainableColumn)->text(), QStringLiteral("yes"));
  QCOMPARE(table->item(gpt2, HubPicker::TrainableColumn)->text(), QStringLiteral("no"));
  // The GPT-2 row is greyed and cannot be picked; its tooltip says why (the engine's words).
  const auto it = std::find_if(picker->listing().models.begin(), picker->listing().models.end(),
                               [](const auto& m) { return m.repo_id == "openai-community/gpt2"; });
  QVERIFY(it != picker->listing().models.end() && !it->why_not.empty());
  QVERIFY(!(table->item(gpt2, HubPicker::NameColumn)->flags() & Qt::ItemIsSelectable));
  QVERIFY2(table->item(gpt2, HubPicker::NameColumn)->toolTip().contains(QString::fromStdString(it->why_not)),
           qPrintable(table->item(gpt2, HubPicker::NameColumn)->toolTip()));
  QVERIFY(!picker->pick(QStringLiteral("openai-community/gpt2")));
  QVERIFY(w->config().model.init_from.empty());
}

// The cache the real huggingface_hub wrote (tests/reference/make_hub_cache.py, committed by helper
// cache): a sharded Llama with refs main and v1.0 on two commits, a GPT-2 and a BERT.
void TestWizardHub::aCacheHuggingFaceHubWroteIsListedAndPicked() {
  const QString hub = m_tmp.filePath(QStringLiteral("cache-hf"));
  std::error_code ec;
  std::filesystem::copy(
      FLOTILLA_SOURCE_DIR "/tests/engine/golden/hub-cache", hub.toStdString(),
      std::filesystem::copy_options::recursive | std::filesystem::copy_options::copy_symlinks, ec);
  QVERIFY2(!ec, ec.message().c_str());
  qputenv("HF_HUB_CACHE", hub.toUtf8());
  auto w = makeWizard();
  HubPicker* picker = openByName(w.get());
  ModelPage* page = w->modelPage();
  QTableWidget* table = picker->table();
  QCOMPARE(table->rowCount(), 3);
  const int llama = rowOf(table, QStringLiteral("flotilla-test/tiny-llama"));
  QVERIFY(llama >= 0);
  QCOMPARE(table->item(llama, HubPicker::ArchColumn)->text(), QStringLiteral("LlamaForCausalLM"));
  QCOMPARE(table->item(llama, HubPicker::RevisionColumn)->text(), QStringLiteral("192b9f7 (main)"));
  QCOMPARE(table->item(llama, HubPicker::TrainableColumn)->text(), QStringLiteral("yes"));
  for (const char* other : {"flotilla-test/tiny-gpt2", "flotilla-test/tiny-bert"}) {
    const int row = rowOf(table, QLatin1String(other));
    QVERIFY2(row >= 0 && table->item(row, HubPicker::TrainableColumn)->text() == QLatin1String("no"), other);
    QVERIFY2(!table->item(row, HubPicker::NameColumn)->toolTip().isEmpty(), other);
  }
  QVERIFY(picker->pick(QStringLiteral("flotilla-test/tiny-llama")));
  QTRY_VERIFY_WITH_TIMEOUT(!page->isReadingFolder(), 10000);
  QTRY_VERIFY2(page->isComplete(), qPrintable(shownProblems(page)));
  const flotilla::ModelSection& m = w->config().model;
  QCOMPARE(QString::fromStdString(m.init_from), QStringLiteral("flotilla-test/tiny-llama"));
  QCOMPARE(m.n_layer, 2);
  QCOMPARE(m.n_embd, 32);
  QCOMPARE(QString::fromStdString(m.rope_scaling), QStringLiteral("llama3"));
  QVERIFY2(page->hfSummary().contains(QLatin1String("commit 192b9f7")), qPrintable(page->hfSummary()));
  // LoRA is offered over a model by name, as over a folder, and the page stays complete.
  auto* lora = child<QAbstractButton>(page, "trainingLora");
  QVERIFY(lora->isEnabled());
  lora->click();
  QVERIFY(w->config().lora.enabled);
  QTRY_VERIFY2(page->isComplete(), qPrintable(shownProblems(page)));
  QVERIFY2(page->trainableText().contains(QLatin1String("trainable")), qPrintable(page->trainableText()));
  child<QAbstractButton>(page, "trainingFull")->click();
  // Another revision by name (the tag v1.0, another commit): found in the cache, no download.
  picker->nameEdit()->clear();
  QTest::keyClicks(picker->nameEdit(), QStringLiteral("flotilla-test/tiny-llama@v1.0"));
  QVERIFY(!picker->downloadButton()->isEnabled());
  QTest::keyClick(picker->nameEdit(), Qt::Key_Return);
  QVERIFY(!picker->isDownloading());
  QCOMPARE(QString::fromStdString(w->config().model.init_from),
           QStringLiteral("flotilla-test/tiny-llama@v1.0"));
  QTRY_VERIFY_WITH_TIMEOUT(!page->isReadingFolder(), 10000);
  QTRY_VERIFY2(page->hfSummary().contains(QLatin1String("commit bc8c8a9")), qPrintable(page->hfSummary()));
}

void TestWizardHub::theSearchFiltersTheRows() {
  makeCache(QStringLiteral("cache-search"));
  auto w = makeWizard();
  HubPicker* picker = openByName(w.get());
  QCOMPARE(visibleNames(picker->table()).size(), 3);
  QTest::keyClicks(picker->searchEdit(), QStringLiteral("smol"));
  QCOMPARE(visibleNames(picker->table()), QStringList{QStringLiteral("HuggingFaceTB/SmolLM2-135M")});
  picker->searchEdit()->clear();
  QTest::keyClicks(picker->searchEdit(), QStringLiteral("qwen2"));  // the name or the architecture
  QCOMPARE(visibleNames(picker->table()), QStringList{QStringLiteral("Qwen/Qwen2-tiny")});
  picker->searchEdit()->clear();
  QTest::keyClicks(picker->searchEdit(), QStringLiteral("causallm"));
  QCOMPARE(visibleNames(picker->table()).size(), 2);
  picker->searchEdit()->clear();
  QCOMPARE(visibleNames(picker->table()).size(), 3);
}

void TestWizardHub::pickingARowSetsTheNameAndTheShape() {
  makeCache(QStringLiteral("cache-pick"));
  auto w = makeWizard();
  HubPicker* picker = openByName(w.get());
  ModelPage* page = w->modelPage();
  QVERIFY(!page->isComplete());  // nothing picked yet
  QVERIFY(picker->pick(QStringLiteral("Qwen/Qwen2-tiny")));
  QCOMPARE(QString::fromStdString(w->config().model.init_from), QStringLiteral("Qwen/Qwen2-tiny"));
  QCOMPARE(picker->nameEdit()->text(), QStringLiteral("Qwen/Qwen2-tiny"));
  QTRY_VERIFY_WITH_TIMEOUT(!page->isReadingFolder(), 10000);
  // Every shape key as the engine reads the snapshot's config.json; the name stays the name.
  const flotilla::ModelSection& m = w->config().model;
  QCOMPARE(QString::fromStdString(m.init_from), QStringLiteral("Qwen/Qwen2-tiny"));
  QCOMPARE(QString::fromStdString(m.arch), QStringLiteral("llama"));
  QCOMPARE(m.n_layer, 2);
  QCOMPARE(m.n_head, 4);
  QCOMPARE(m.n_kv_head, 2);
  QCOMPARE(m.n_embd, 32);
  QCOMPARE(m.ffn_dim, 64);
  QCOMPARE(m.vocab_size, 128);
  QVERIFY(m.qkv_bias && m.tie_embeddings);
  QCOMPARE(m.rope_theta, 1e6);
  QVERIFY2(page->parameterText().contains(QLocale().toString(22816)), qPrintable(page->parameterText()));
  const QString summary = page->hfSummary();
  QVERIFY2(summary.contains(QLatin1String("commit 1111111")) &&
               summary.contains(QLatin1String("Qwen2ForCausalLM")),
           qPrintable(summary));
  // The Review page names the model and its commit.
  QTRY_VERIFY2(w->reviewPage()->modelNote().contains(QLatin1String("Qwen/Qwen2-tiny")) &&
                   w->reviewPage()->modelNote().contains(QLatin1String("1111111")),
               qPrintable(w->reviewPage()->modelNote()));
  // Another row replaces it; the shape follows.
  QVERIFY(picker->pick(QStringLiteral("HuggingFaceTB/SmolLM2-135M")));
  QTRY_VERIFY_WITH_TIMEOUT(!page->isReadingFolder() && w->config().model.n_layer == 30, 10000);
  QCOMPARE(w->config().model.n_embd, 576);
  QCOMPARE(w->config().model.n_kv_head, 3);
  // The folder source starts with no folder (the name is not one); back to names, the name again.
  child<QAbstractButton>(page, "modelSource-hf")->click();
  QCOMPARE(page->source(), ModelPage::HfFolder);
  QVERIFY(w->config().model.init_from.empty());
  child<QAbstractButton>(page, "modelSource-hub")->click();
  QCOMPARE(page->source(), ModelPage::HfName);
  QCOMPARE(QString::fromStdString(w->config().model.init_from), QStringLiteral("HuggingFaceTB/SmolLM2-135M"));
  QTRY_VERIFY_WITH_TIMEOUT(!page->isReadingFolder() && !picker->isListing(), 10000);
  QVERIFY(picker->table()
              ->item(rowOf(picker->table(), QStringLiteral("HuggingFaceTB/SmolLM2-135M")), 0)
              ->isSelected());
  // A named size clears the name.
  child<QAbstractButton>(page, "modelSource-preset")->click();
  QVERIFY(w->config().model.init_from.empty());
  QVERIFY(w->reviewPage()->modelNote().isEmpty());
}

// "The model's tokenizer" on the Data page is the cached snapshot's: chat records prepared with
// SmolLM2's tokenizer files, which sit in the snapshot beside its config.json.
void TestWizardHub::theDataPageUsesTheNamedModelsTokenizer() {
  const QString hub = m_tmp.filePath(QStringLiteral("cache-data"));
  const QString staging = m_tmp.filePath(QStringLiteral("cache-data-staging"));
  QVERIFY(writeSparseLlamaFolder(staging, 30, 576, 1536, 9, 3, 49152, true));
  QVERIFY(copyFiles(QStringLiteral(FLOTILLA_SOURCE_DIR "/tests/engine/golden/tokenizers/smollm2"), staging,
                    {QStringLiteral("tokenizer.json"), QStringLiteral("tokenizer_config.json")}));
  QVERIFY(addToHfCache(hub, QStringLiteral("HuggingFaceTB/SmolLM2-135M-Instruct"), kCommitSmol, staging));
  qputenv("HF_HUB_CACHE", hub.toUtf8());
  QByteArray chats;
  for (const char* q : {"What is the capital of France?", "Name a prime above 100.", "Say hello in German."})
    chats += R"({"messages": [{"role": "user", "content": ")" + QByteArray(q) +
             R"("}, {"role": "assistant", "content": "An answer."}]})" + "\n";
  const QString input = m_tmp.filePath(QStringLiteral("chats.jsonl"));
  QVERIFY(writeFile(input, chats));

  auto w = makeWizard();
  HubPicker* picker = openByName(w.get());
  QVERIFY(picker->pick(QStringLiteral("HuggingFaceTB/SmolLM2-135M-Instruct")));
  QTRY_VERIFY_WITH_TIMEOUT(!w->modelPage()->isReadingFolder(), 10000);
  QVERIFY2(w->modelPage()->hfSummary().contains(QLatin1String("Tokenizer: in the folder")),
           qPrintable(w->modelPage()->hfSummary()));
  flotilla::RunConfig c = w->config();
  c.train.micro_batch = 1;
  c.train.global_batch_tokens = 0;
  w->setConfig(c);  // the page reads the name back as a name
  QCOMPARE(w->modelPage()->source(), ModelPage::HfName);
  QTRY_VERIFY_WITH_TIMEOUT(!w->modelPage()->isReadingFolder() && w->modelPage()->isComplete(), 10000);
  w->next();
  QCOMPARE(w->currentId(), int(RunWizard::Data));
  DataPage* data = w->dataPage();
  data->setMode(DataPage::Prepare);
  data->setPrepareInputs({input}, QString(), m_tmp.filePath(QStringLiteral("data-sft")));
  QCOMPARE(data->tokenizerSource(), flotilla::ui::TokenizerSource::Model);
  data->startPrepare();
  QTRY_VERIFY_WITH_TIMEOUT(!data->isPreparing(), 30000);
  QVERIFY2(data->prepared().ok, qPrintable(data->prepareStatus()));
  // The snapshot's tokenizer (the golden SmolLM2 one, cut to a small vocabulary) did the work.
  const int vocab =
      flotilla::Tokenizer::load(FLOTILLA_SOURCE_DIR "/tests/engine/golden/tokenizers/smollm2").vocab_size();
  QCOMPARE(data->prepared().tokenizerVocab, vocab);
  QCOMPARE(QString::fromStdString(w->config().model.init_from),
           QStringLiteral("HuggingFaceTB/SmolLM2-135M-Instruct"));
}

void TestWizardHub::aHostileNameIsRefusedInline() {
  makeCache(QStringLiteral("cache-hostile"));
  auto w = makeWizard();
  HubPicker* picker = openByName(w.get());
  auto* message = child<QLabel>(w->modelPage(), "hubNameMessage");
  for (const char* hostile : {"../../etc/passwd", "/etc/passwd", "org/../../x", "org/na me",
                              "org/name@../../x", "~/models/x", "a/b/c"}) {
    picker->nameEdit()->clear();
    QTest::keyClicks(picker->nameEdit(), QLatin1String(hostile));
    QVERIFY2(message->text().contains(QLatin1String("is not a Hugging Face model name")), hostile);
    QVERIFY2(message->isVisibleTo(w->modelPage()), hostile);
    QVERIFY2(!picker->downloadButton()->isEnabled(), hostile);
    picker->startDownload();  // as if the button were pressed anyway
    QVERIFY2(!picker->isDownloading() && picker->process() == nullptr, hostile);
    QVERIFY2(w->config().model.init_from.empty(), hostile);
  }
  picker->nameEdit()->clear();
  QTest::keyClicks(picker->nameEdit(), QStringLiteral("org/not-cached"));
  QVERIFY2(message->text().contains(QLatin1String("Not in the cache")), qPrintable(message->text()));
  QVERIFY(picker->downloadButton()->isEnabled());
  picker->nameEdit()->clear();
  QTest::keyClicks(picker->nameEdit(), QStringLiteral("Qwen/Qwen2-tiny"));
  QVERIFY(!picker->downloadButton()->isEnabled());  // cached: nothing to download
}

void TestWizardHub::serveTinyModel(flotilla_test::HubServer& hub, const std::string& repo) {
  for (const char* file : {"config.json", "generation_config.json", "model.safetensors"})
    hub.add_file(repo, file,
                 readAll(QLatin1String(kGolden) + QLatin1Char('/') + QLatin1String(file)).toStdString());
}

void TestWizardHub::aDownloadShowsProgressAndEndsChosen() {
  makeCache(QStringLiteral("cache-download"));
  flotilla_test::HubServer hub;
  serveTinyModel(hub, "testorg/tiny-qwen");
  hub.start();
  hub.apply_env();
  hub.control(R"({"throttle_bps": 40000})");  // 48 kB of weights: progress lines over about a second
  auto w = makeWizard();
  HubPicker* picker = openByName(w.get());
  ModelPage* page = w->modelPage();
  QTest::keyClicks(picker->nameEdit(), QStringLiteral("testorg/tiny-qwen"));
  QVERIFY(picker->downloadButton()->isEnabled());
  QTest::mouseClick(picker->downloadButton(), Qt::LeftButton);
  QVERIFY(picker->isDownloading());
  QVERIFY(picker->progressBar()->isVisibleTo(page));
  QVERIFY(!page->isComplete());  // Next waits for the download
  // The weights' line: file i of n, bytes of all files so far of their total, rate, time left.
  const QRegularExpression line(
      QStringLiteral("^model\\.safetensors \\(3/3\\): [\\d.]+ of [\\d.]+ kB, [\\d.]+ kB/s, [^,]+ left$"));
  QTRY_VERIFY2_WITH_TIMEOUT(
      line.match(picker->progressText()).hasMatch() && picker->progressBar()->value() > 0,
      qPrintable(picker->progressText()), 15000);
  qInfo("progress: %s", qPrintable(picker->statusText()));
  QVERIFY(picker->statusText().contains(QLatin1String("the next download resumes from it")));
  QTRY_VERIFY_WITH_TIMEOUT(!picker->isDownloading(), 20000);
  QVERIFY2(picker->statusText().startsWith(QLatin1String("Downloaded testorg/tiny-qwen")),
           qPrintable(picker->statusText()));
  // The cache is listed again and the model chosen: its row selected, its shape in the draft.
  QTRY_VERIFY_WITH_TIMEOUT(
      !picker->isListing() && rowOf(picker->table(), QStringLiteral("testorg/tiny-qwen")) >= 0, 10000);
  const int row = rowOf(picker->table(), QStringLiteral("testorg/tiny-qwen"));
  QVERIFY(picker->table()->item(row, 0)->isSelected());
  QCOMPARE(QString::fromStdString(w->config().model.init_from), QStringLiteral("testorg/tiny-qwen"));
  QTRY_VERIFY_WITH_TIMEOUT(!page->isReadingFolder() && w->config().model.n_layer == 2, 10000);
  QCOMPARE(w->config().model.n_embd, 32);
  qunsetenv("HF_ENDPOINT");
}

void TestWizardHub::aGatedModelShowsWhatToDo() {
  makeCache(QStringLiteral("cache-gated"));
  flotilla_test::HubServer hub;
  serveTinyModel(hub, "testorg/gated");
  hub.repo_json("testorg/gated", R"({"gated": "manual"})");
  hub.start();
  hub.apply_env();
  auto w = makeWizard();
  HubPicker* picker = openByName(w.get());
  QTest::keyClicks(picker->nameEdit(), QStringLiteral("testorg/gated"));
  picker->startDownload();
  QVERIFY(picker->isDownloading());
  QTRY_VERIFY_WITH_TIMEOUT(!picker->isDownloading(), 20000);
  const QString status = picker->statusText();
  qInfo("gated: %s", qPrintable(status));
  QVERIFY2(status.contains(QLatin1String("testorg/gated")) && status.contains(QLatin1String("HF_TOKEN")) &&
               status.contains(QLatin1String("licence"), Qt::CaseInsensitive),
           qPrintable(status));
  QVERIFY(child<QLabel>(w->modelPage(), "hubStatus")->isVisibleTo(w->modelPage()));
  QVERIFY(!w->modelPage()->isComplete());
  qunsetenv("HF_ENDPOINT");
}

void TestWizardHub::cancelStopsTheDownloadAndLaunchWaits() {
  const QString cache = makeCache(QStringLiteral("cache-cancel"));
  flotilla_test::HubServer hub;
  serveTinyModel(hub, "testorg/slow");
  hub.start();
  hub.apply_env();
  hub.control(R"({"throttle_bps": 10000})");  // 48 kB: about 5 s, cancelled half-way
  auto w = makeWizard();
  HubPicker* picker = openByName(w.get());
  ModelPage* page = w->modelPage();
  QTest::keyClicks(picker->nameEdit(), QStringLiteral("testorg/slow"));
  QTest::mouseClick(picker->downloadButton(), Qt::LeftButton);
  QVERIFY(picker->isDownloading());
  QCOMPARE(QString::fromStdString(w->config().model.init_from), QStringLiteral("testorg/slow"));
  // Some 20 kB of the weights arrived (the worker writes them in 4 kB pieces a kill cannot lose).
  QTRY_VERIFY_WITH_TIMEOUT(picker->progressText().contains(QLatin1String("model.safetensors")) &&
                               picker->progressBar()->value() > 400,
                           15000);
  // Launch waits: the Model page and the Review page both refuse while the model downloads.
  QVERIFY(!page->isComplete());
  QVERIFY2(page->launchBlocker().contains(QLatin1String("Downloading testorg/slow")),
           qPrintable(page->launchBlocker()));
  QVERIFY(!w->reviewPage()->isComplete());
  QVERIFY2(shownProblems(w->reviewPage()).contains(QLatin1String("Downloading testorg/slow")),
           qPrintable(shownProblems(w->reviewPage())));
  QProcess* process = picker->process();
  QVERIFY(process && process->state() != QProcess::NotRunning);
  const qint64 pid = process->processId();
  QVERIFY(picker->cancelButton()->isVisibleTo(page));
  QTest::mouseClick(picker->cancelButton(), Qt::LeftButton);
  QTRY_VERIFY_WITH_TIMEOUT(!picker->isDownloading(), 1500);  // a kill: at once, long before the end
  qInfo("cancelled: %s", qPrintable(picker->statusText()));
  QVERIFY2(!QFileInfo::exists(QStringLiteral("/proc/%1").arg(pid)) ||
               readAll(QStringLiteral("/proc/%1/stat").arg(pid)).contains(") Z "),
           "the worker still runs");
  QVERIFY2(picker->statusText().contains(QLatin1String("cancelled")) &&
               picker->statusText().contains(QLatin1String("resumes")),
           qPrintable(picker->statusText()));
  QVERIFY(page->launchBlocker().isEmpty());
  QVERIFY(!shownProblems(w->reviewPage()).contains(QLatin1String("Downloading")));
  QVERIFY(w->reviewPage()->modelNote().contains(QLatin1String("testorg/slow")));
  // The part fetched stays in the cache for the next download to resume.
  QStringList partial;
  for (const QFileInfo& f : QDir(cache + QStringLiteral("/models--testorg--slow/blobs"))
                                .entryInfoList({QStringLiteral("*.incomplete")}))
    partial << f.fileName();
  QVERIFY2(!partial.isEmpty(), "no .incomplete blob kept");
  // Download again: the worker resumes from the kept part, says so, and the model ends chosen.
  hub.control(R"({"throttle_bps": 40000})");
  QVERIFY(picker->downloadButton()->isEnabled());
  QTest::mouseClick(picker->downloadButton(), Qt::LeftButton);
  QTRY_VERIFY2_WITH_TIMEOUT(
      picker->progressText().contains(QLatin1String("resumed")) || !picker->isDownloading(),
      qPrintable(picker->progressText()), 15000);
  qInfo("resumed: %s", qPrintable(picker->progressText()));
  QVERIFY2(picker->progressText().contains(QLatin1String("resumed from")),
           qPrintable(picker->progressText()));
  QTRY_VERIFY_WITH_TIMEOUT(!picker->isDownloading(), 20000);
  QVERIFY2(picker->statusText().startsWith(QLatin1String("Downloaded testorg/slow")),
           qPrintable(picker->statusText()));
  QTRY_VERIFY_WITH_TIMEOUT(!page->isReadingFolder() && w->config().model.n_layer == 2, 10000);
  bool ranged = false;
  for (const auto& r : hub.requests()) ranged = ranged || (!r.range.empty() && r.status == 206);
  QVERIFY2(ranged, "no range request resumed the file");
  qunsetenv("HF_ENDPOINT");
}

QString TestWizardHub::trainWithWorker(RunWizard* w, const QString& name) {
  if (w->advanceTo(RunWizard::Review) != RunWizard::Review)
    return QStringLiteral("stopped before Review: ") + shownProblems(w->currentPage());
  flotilla::RunConfig c = w->config();
  c.run.out_dir = m_tmp.filePath(name).toStdString();
  c.train.steps = 3;
  c.data.synthetic_tokens = 20000;
  c.eval.every = 0;
  c.eval.batches = 1;
  c.checkpoint.every = 0;
  const QString toml = m_tmp.filePath(name + QStringLiteral(".toml"));
  if (!writeFile(toml, QByteArray::fromStdString(flotilla::config_to_toml(c))))
    return QStringLiteral("no toml");
  QProcess worker;
  worker.setProcessChannelMode(QProcess::MergedChannels);
  worker.start(QStringLiteral(FLOTILLA_WORKER_PATH),
               {QStringLiteral("train"), QStringLiteral("--config"), toml, QStringLiteral("--quiet"),
                QStringLiteral("--no-stdout-metrics")});
  if (!worker.waitForFinished(120000)) return QStringLiteral("the worker did not finish");
  const QString log = QString::fromUtf8(worker.readAll());
  if (worker.exitStatus() != QProcess::NormalExit || worker.exitCode() != 0) return log;
  const QByteArray metrics =
      readAll(QString::fromStdString(c.run.out_dir) + QStringLiteral("/metrics.jsonl"));
  return metrics.contains("\"step\":3") ? QString() : QStringLiteral("no step 3 in metrics.jsonl: ") + log;
}

// The issue's "done when" in the app: a model picked by name from the cache (the one huggingface_hub
// wrote) and another downloaded by name both fine-tune, the worker finding each by its name in the
// cache with the network off (HF_HUB_OFFLINE=1).
void TestWizardHub::aPickedAndADownloadedModelBothTrain() {
  const QString cache = m_tmp.filePath(QStringLiteral("cache-train"));
  std::error_code ec;
  std::filesystem::copy(
      FLOTILLA_SOURCE_DIR "/tests/engine/golden/hub-cache", cache.toStdString(),
      std::filesystem::copy_options::recursive | std::filesystem::copy_options::copy_symlinks, ec);
  QVERIFY2(!ec, ec.message().c_str());
  qputenv("HF_HUB_CACHE", cache.toUtf8());
  flotilla_test::HubServer hub;
  serveTinyModel(hub, "testorg/tiny-qwen");
  hub.start();
  hub.apply_env();

  auto w = makeWizard();
  HubPicker* picker = openByName(w.get());
  QVERIFY(picker->pick(QStringLiteral("flotilla-test/tiny-llama")));
  QTRY_VERIFY_WITH_TIMEOUT(!w->modelPage()->isReadingFolder(), 10000);
  QTest::keyClicks(picker->nameEdit(), QStringLiteral("x"));  // edits the name away from the choice
  picker->nameEdit()->clear();
  QTest::keyClicks(picker->nameEdit(), QStringLiteral("testorg/tiny-qwen"));
  QTest::mouseClick(picker->downloadButton(), Qt::LeftButton);
  QTRY_VERIFY_WITH_TIMEOUT(!picker->isDownloading(), 20000);
  QTRY_VERIFY_WITH_TIMEOUT(!picker->isListing() && !w->modelPage()->isReadingFolder() &&
                               w->config().model.init_from == "testorg/tiny-qwen" &&
                               w->modelPage()->isComplete(),
                           10000);

  qputenv("HF_HUB_OFFLINE", "1");
  const QString qwenLog = trainWithWorker(w.get(), QStringLiteral("train-qwen"));
  QVERIFY2(qwenLog.isEmpty(), qPrintable(qwenLog));
  w->back();
  while (w->currentId() != RunWizard::Model) w->back();
  QVERIFY(picker->pick(QStringLiteral("flotilla-test/tiny-llama")));
  QTRY_VERIFY_WITH_TIMEOUT(!w->modelPage()->isReadingFolder() && w->config().model.n_kv_head == 2 &&
                               w->config().model.rope_scaling == "llama3",
                           10000);
  const QString llamaLog = trainWithWorker(w.get(), QStringLiteral("train-llama"));
  QVERIFY2(llamaLog.isEmpty(), qPrintable(llamaLog));
  qunsetenv("HF_HUB_OFFLINE");
  qunsetenv("HF_ENDPOINT");
}

QTEST_MAIN(TestWizardHub)
#include "test_wizard_hub.moc"
