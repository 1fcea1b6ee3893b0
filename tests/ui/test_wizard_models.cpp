// The wizard's Model page with the Llama family and Hugging Face folders, driven through its
// widgets over real files: a golden Qwen 2 folder (tests/engine/golden/hf/qwen2, copied) sets every
// shape key as the engine's apply_hf_init_from does and shows its architecture, weights, the
// planner's parameter count and what fits; folders the engine refuses (no config.json, an
// unsupported model_type, an o_proj bias) block Next with the engine's message after
// model.init_from; custom Llama dimensions go through the Review page's TOML and back; the "what
// fits" line names only the changes the planner confirms; the Checkpoints page's Hugging Face
// export writes checkpoint.export_hf / export_dtype, for Llama-family models only; and the config
// the wizard makes of a folder trains with the real worker and exports a Hugging Face folder.
#include <QAbstractButton>
#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QProcess>
#include <QSpinBox>
#include <QTemporaryDir>
#include <QtTest>

#include "engine/config/config_io.h"
#include "engine/config/config_validate.h"
#include "engine/interop/hf_checkpoint.h"
#include "engine/interop/hf_config.h"
#include "engine/interop/hf_model.h"
#include "engine/plan/planner.h"
#include "ui/nodes/machinefacts.h"
#include "ui/wizard/checkpointpage.h"
#include "ui/wizard/configdraft.h"
#include "ui/wizard/modelpage.h"
#include "ui/wizard/reviewpage.h"
#include "ui/wizard/runwizard.h"
#include "wizard_helpers.h"

using flotilla::RunConfig;
using flotilla::ui::ModelPage;
using flotilla::ui::RunWizard;
using namespace wizard_helpers;

class TestWizardModels : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase();
  void aHuggingFaceFolderSetsTheShapeAndShowsWhatFits();
  void foldersTheEngineRefusesBlockNext();
  void customLlamaDimensionsRoundTripThroughTheToml();
  void llamaPresetsShowTheirArchitecture();
  void theFitLineNamesOnlyWhatThePlannerConfirms();
  void theHuggingFaceExportIsForLlamaModelsOnly();
  void aRunFromAFolderTrainsAndExportsWithTheWorker();

 private:
  std::unique_ptr<RunWizard> makeWizard(const flotilla::ProbeResult& machine = cpuMachine());
  QString qwen2Folder(const QString& name);
  QTemporaryDir m_tmp;
};

void TestWizardModels::initTestCase() { QVERIFY(m_tmp.isValid()); }

std::unique_ptr<RunWizard> TestWizardModels::makeWizard(const flotilla::ProbeResult& machine) {
  auto w = std::make_unique<RunWizard>(nullptr, m_tmp.filePath(QStringLiteral("templates")));
  w->setMachine(machine);
  w->resize(900, 720);
  w->show();
  if (!QTest::qWaitForWindowExposed(w.get())) qWarning("wizard not exposed");
  return w;
}

QString TestWizardModels::qwen2Folder(const QString& name) {
  const QString dir = m_tmp.filePath(name);
  if (!copyFiles(QStringLiteral(FLOTILLA_SOURCE_DIR "/tests/engine/golden/hf/qwen2"), dir,
                 {QStringLiteral("config.json"), QStringLiteral("generation_config.json"),
                  QStringLiteral("model.safetensors")}))
    qFatal("cannot copy the qwen2 golden folder");
  return dir;
}

void TestWizardModels::aHuggingFaceFolderSetsTheShapeAndShowsWhatFits() {
  const QString dir = qwen2Folder(QStringLiteral("qwen2"));
  auto w = makeWizard();
  ModelPage* page = w->modelPage();
  child<QAbstractButton>(page, "modelSource-hf")->click();
  QCOMPARE(page->source(), ModelPage::HfFolder);
  QVERIFY(!page->isComplete());  // no folder yet
  QVERIFY2(
      shownProblems(page).contains(QStringLiteral("model.init_from: choose a Hugging Face model folder")),
      qPrintable(shownProblems(page)));
  QVERIFY(child<QLineEdit>(page, "hfFolder")->isVisibleTo(page));
  QVERIFY(!child<QSpinBox>(page, "nLayer")->isVisibleTo(page));

  auto* path = child<QLineEdit>(page, "hfFolder");
  path->setText(dir);
  emit path->editingFinished();
  QVERIFY(page->isReadingFolder());
  QVERIFY(!page->isComplete());  // Next waits for the folder
  QTRY_VERIFY_WITH_TIMEOUT(!page->isReadingFolder(), 10000);
  QTRY_VERIFY2(page->isComplete(), qPrintable(shownProblems(page)));

  // The draft holds what the worker's apply_hf_init_from makes of the folder.
  RunConfig expected = w->config();
  QVERIFY(flotilla::interop::apply_hf_init_from(expected));
  const flotilla::ModelSection& m = w->config().model;
  QCOMPARE(QString::fromStdString(flotilla::config_to_toml(w->config())),
           QString::fromStdString(flotilla::config_to_toml(expected)));
  QCOMPARE(QString::fromStdString(m.init_from), dir);
  QCOMPARE(QString::fromStdString(m.arch), QStringLiteral("llama"));
  QCOMPARE(QString::fromStdString(m.preset), QStringLiteral("custom"));
  QCOMPARE(m.n_layer, 2);
  QCOMPARE(m.n_head, 4);
  QCOMPARE(m.n_kv_head, 2);
  QCOMPARE(m.n_embd, 32);
  QCOMPARE(m.ffn_dim, 64);
  QCOMPARE(m.vocab_size, 128);
  QVERIFY(m.qkv_bias && m.tie_embeddings && !m.qk_norm);
  QCOMPARE(m.rope_theta, 1e6);

  // Parameters: the planner's count of the folder's model (as its safetensors hold them).
  QVERIFY2(page->parameterText().contains(QLocale().toString(22816)), qPrintable(page->parameterText()));
  const QString summary = page->hfSummary();
  for (const char* part : {"Qwen2ForCausalLM", "model_type qwen2", "2 layers", "4 heads", "2 K/V heads",
                           "head_dim 8", "width 32", "FFN 64", "q/k/v biases", "Vocabulary: 128 tokens",
                           "LM head tied", "RoPE: default", "model.safetensors", "tensors (BF16"})
    QVERIFY2(summary.contains(QLatin1String(part)), qPrintable(part + QStringLiteral(" in: ") + summary));
  for (const char* shown : {"Qwen2ForCausalLM", "2 K/V heads", "LM head tied", "model.safetensors"})
    QVERIFY2(child<QLabel>(page, "hfInfo")->text().contains(QLatin1String(shown)), shown);

  // What fits: the planner's peak for this hardware and layout, as the Hardware page's bar shows it.
  const auto plan = w->draft()->plan();
  QVERIFY(plan && plan->fits);
  const QString fit = page->fitText();
  QVERIFY2(fit.startsWith(QStringLiteral("Fits: %1 of %2 per device")
                              .arg(flotilla::ui::formatBytes(plan->peak().total()),
                                   flotilla::ui::formatBytes(plan->device.mem_bytes))),
           qPrintable(fit));
  QVERIFY2(fit.contains(w->draft()->target().label), qPrintable(fit));

  // The choice survives Next and Back; a named size clears the folder again.
  w->next();
  QCOMPARE(w->currentId(), int(RunWizard::Data));
  w->back();
  QCOMPARE(page->source(), ModelPage::HfFolder);
  child<QAbstractButton>(page, "modelSource-preset")->click();
  QVERIFY(w->config().model.init_from.empty());
  QCOMPARE(QString::fromStdString(w->config().model.arch), QStringLiteral("gpt2"));
  QVERIFY2(page->isComplete(), qPrintable(shownProblems(page)));
}

void TestWizardModels::foldersTheEngineRefusesBlockNext() {
  auto w = makeWizard();
  ModelPage* page = w->modelPage();

  // No config.json: validate()'s model.init_from message.
  const QString empty = m_tmp.filePath(QStringLiteral("no-config"));
  QVERIFY(QDir().mkpath(empty));
  page->chooseHfFolder(empty);
  QVERIFY(!page->isReadingFolder());
  QVERIFY(!page->isComplete());
  QVERIFY2(
      shownProblems(page).contains(QStringLiteral("model.init_from: \"%1\" has no config.json").arg(empty)),
      qPrintable(shownProblems(page)));
  w->next();
  QCOMPARE(w->currentId(), int(RunWizard::Model));

  // An unsupported model_type: the config reader's message, naming the key.
  const QString bert = m_tmp.filePath(QStringLiteral("bert"));
  QVERIFY(QDir().mkpath(bert));
  QVERIFY(writeFile(bert + QStringLiteral("/config.json"),
                    R"({"architectures": ["BertForMaskedLM"], "model_type": "bert", "hidden_size": 32})"));
  page->chooseHfFolder(bert);
  QTRY_VERIFY_WITH_TIMEOUT(!page->isReadingFolder(), 10000);
  QVERIFY(!page->isComplete());
  QVERIFY2(shownProblems(page).contains(QStringLiteral("model.init_from: ")) &&
               shownProblems(page).contains(QStringLiteral("model_type \"bert\" is not supported")),
           qPrintable(shownProblems(page)));
  QVERIFY(page->hfSummary().isEmpty());
  QCOMPARE(page->parameterText(), QStringLiteral("—"));
  w->next();
  QCOMPARE(w->currentId(), int(RunWizard::Model));

  // A llama folder with attention_bias = true: an o_proj bias the engine does not have.
  const QString biased = qwen2Folder(QStringLiteral("o-bias"));
  QFile cfg(biased + QStringLiteral("/config.json"));
  QVERIFY(cfg.open(QIODevice::ReadOnly));
  QByteArray json = cfg.readAll();
  cfg.close();
  json.replace(R"("model_type": "qwen2")", R"("model_type": "llama", "attention_bias": true)");
  json.replace("Qwen2ForCausalLM", "LlamaForCausalLM");
  QVERIFY(writeFile(biased + QStringLiteral("/config.json"), json));
  page->chooseHfFolder(biased);
  QTRY_VERIFY_WITH_TIMEOUT(!page->isReadingFolder(), 10000);
  QVERIFY(!page->isComplete());
  QVERIFY2(shownProblems(page).contains(QStringLiteral("model.init_from: ")) &&
               shownProblems(page).contains(QStringLiteral("bias on o_proj")),
           qPrintable(shownProblems(page)));

  // A config.json without weights: the checkpoint reader's message.
  const QString noWeights = m_tmp.filePath(QStringLiteral("no-weights"));
  QVERIFY(copyFiles(QStringLiteral(FLOTILLA_SOURCE_DIR "/tests/engine/golden/hf/qwen2"), noWeights,
                    {QStringLiteral("config.json")}));
  page->chooseHfFolder(noWeights);
  QTRY_VERIFY_WITH_TIMEOUT(!page->isReadingFolder(), 10000);
  QVERIFY(!page->isComplete());
  QVERIFY2(shownProblems(page).contains(QStringLiteral("model.init_from: ")) &&
               shownProblems(page).contains(QStringLiteral("safetensors")),
           qPrintable(shownProblems(page)));

  // A good folder clears the problem.
  page->chooseHfFolder(qwen2Folder(QStringLiteral("qwen2-good")));
  QTRY_VERIFY_WITH_TIMEOUT(!page->isReadingFolder(), 10000);
  QTRY_VERIFY2(page->isComplete(), qPrintable(shownProblems(page)));
  w->next();
  QCOMPARE(w->currentId(), int(RunWizard::Data));
}

void TestWizardModels::customLlamaDimensionsRoundTripThroughTheToml() {
  auto w = makeWizard();
  ModelPage* page = w->modelPage();
  child<QAbstractButton>(page, "modelSource-custom")->click();
  QCOMPARE(QString::fromStdString(w->config().model.preset), QStringLiteral("custom"));
  QVERIFY(!child<QSpinBox>(page, "nKvHead")->isVisibleTo(page));  // GPT-2 has no K/V heads
  auto* arch = child<QComboBox>(page, "arch");
  arch->setCurrentIndex(arch->findData(QStringLiteral("llama")));
  QCOMPARE(QString::fromStdString(w->config().model.arch), QStringLiteral("llama"));
  for (const char* name : {"nKvHead", "headDim", "ffnDim", "ropeTheta", "tieEmbeddings", "qkvBias", "qkNorm"})
    QVERIFY2(child<QWidget>(page, name)->isVisibleTo(page), name);
  child<QSpinBox>(page, "nKvHead")->setValue(2);
  child<QSpinBox>(page, "headDim")->setValue(32);
  child<QSpinBox>(page, "ffnDim")->setValue(704);
  child<QCheckBox>(page, "tieEmbeddings")->setChecked(false);
  child<QCheckBox>(page, "qkvBias")->setChecked(true);
  child<QCheckBox>(page, "qkNorm")->setChecked(true);
  child<QDoubleSpinBox>(page, "ropeTheta")->setValue(500000);
  QVERIFY2(page->isComplete(), qPrintable(shownProblems(page)));
  const flotilla::ModelSection m = w->config().model;
  QCOMPARE(m.n_kv_head, 2);
  QCOMPARE(m.head_dim, 32);
  QCOMPARE(m.ffn_dim, 704);
  QVERIFY(!m.tie_embeddings && m.qkv_bias && m.qk_norm);
  QCOMPARE(m.rope_theta, 500000.0);
  const auto n = flotilla::count_parameters(flotilla::dims_from_config(m));
  QVERIFY2(page->parameterText().contains(QLocale().toString(static_cast<qulonglong>(n.total))),
           qPrintable(page->parameterText()));

  // A K/V head count that does not divide the heads: the engine's message, Next blocked.
  child<QSpinBox>(page, "nKvHead")->setValue(3);
  QVERIFY(!page->isComplete());
  QVERIFY2(shownProblems(page).contains(QStringLiteral("model.n_kv_head: 3 does not divide model.n_head 4")),
           qPrintable(shownProblems(page)));
  child<QSpinBox>(page, "nKvHead")->setValue(2);

  // The Review page's TOML holds them and parses back to the same model.
  w->advanceTo(RunWizard::Review);
  QCOMPARE(w->currentId(), int(RunWizard::Review));
  QPlainTextEdit* editor = w->reviewPage()->editor();
  QString text = editor->toPlainText();
  for (const char* line : {"arch = \"llama\"", "n_kv_head = 2", "head_dim = 32", "ffn_dim = 704",
                           "tie_embeddings = false", "qkv_bias = true", "qk_norm = true"})
    QVERIFY2(text.contains(QLatin1String(line)), line);
  const RunConfig parsed = flotilla::parse_config_toml(text.toStdString(), "review");
  QCOMPARE(parsed.model.rope_theta, 500000.0);
  QCOMPARE(QString::fromStdString(flotilla::config_to_toml(parsed)),
           QString::fromStdString(flotilla::config_to_toml(w->config())));

  // An edit in the TOML shows on the Model page.
  text.replace(QStringLiteral("n_kv_head = 2"), QStringLiteral("n_kv_head = 4"));
  editor->setPlainText(text);
  w->reviewPage()->applyText();
  QVERIFY2(w->reviewPage()->isComplete(), qPrintable(shownProblems(w->reviewPage())));
  while (w->currentId() != RunWizard::Model) w->back();
  QCOMPARE(child<QSpinBox>(page, "nKvHead")->value(), 4);
  QCOMPARE(page->source(), ModelPage::Custom);

  // Back to GPT-2: the Llama keys go back to their defaults (validate() refuses them on gpt2).
  arch->setCurrentIndex(arch->findData(QStringLiteral("gpt2")));
  QCOMPARE(w->config().model.n_kv_head, 0);
  QVERIFY(w->config().model.tie_embeddings && !w->config().model.qkv_bias);
  QVERIFY(!child<QSpinBox>(page, "nKvHead")->isVisibleTo(page));
  QVERIFY2(page->isComplete(), qPrintable(shownProblems(page)));
}

void TestWizardModels::llamaPresetsShowTheirArchitecture() {
  auto w = makeWizard();
  ModelPage* page = w->modelPage();
  auto* preset = child<QComboBox>(page, "preset");
  const int smol = preset->findData(QStringLiteral("smollm2-135m"));
  QVERIFY(smol >= 0);
  QVERIFY2(preset->itemText(smol).contains(QStringLiteral("Llama architecture")),
           qPrintable(preset->itemText(smol)));
  const QString qwen = preset->itemText(preset->findData(QStringLiteral("qwen2.5-0.5b")));
  QVERIFY2(qwen.contains(QStringLiteral("Llama family: Qwen2.5-0.5B")), qPrintable(qwen));
  QVERIFY(preset->itemText(preset->findData(QStringLiteral("gpt2-124m"))).contains(QStringLiteral("GPT-2")));
  preset->setCurrentIndex(smol);
  QCOMPARE(page->source(), ModelPage::Named);
  RunConfig expected = w->config();
  flotilla::apply_model_preset(expected, "smollm2-135m");
  QCOMPARE(QString::fromStdString(flotilla::config_to_toml(w->config())),
           QString::fromStdString(flotilla::config_to_toml(expected)));
  QCOMPARE(w->config().model.n_kv_head, 3);
  QCOMPARE(w->config().model.vocab_size, 49152);
  QCOMPARE(child<QSpinBox>(page, "nKvHead")->value(), 3);
  QVERIFY(child<QSpinBox>(page, "ffnDim")->isVisibleTo(page));
  QCOMPARE(child<QComboBox>(page, "arch")->currentData().toString(), QStringLiteral("llama"));
  // SmolLM2-135M's released total.
  QVERIFY2(page->parameterText().contains(QLocale().toString(134515008)), qPrintable(page->parameterText()));
  // Editing a Llama-only key makes it custom.
  child<QSpinBox>(page, "ffnDim")->setValue(1024);
  QCOMPARE(QString::fromStdString(w->config().model.preset), QStringLiteral("custom"));
  QCOMPARE(page->source(), ModelPage::Custom);
  QCOMPARE(w->config().model.n_kv_head, 3);
}

void TestWizardModels::theFitLineNamesOnlyWhatThePlannerConfirms() {
  // GPT-2 124M with 64 sequences of 1,024 tokens in fp32 on one of four 24 GiB GPUs: too big.
  auto w = makeWizard(gpuMachine(4, "NVIDIA L4", 24ull << 30));
  RunConfig c = w->config();
  c.run.device = "cuda";
  flotilla::apply_model_preset(c, "gpt2-124m");
  c.model.vocab_size = 50257;
  c.model.max_seq_len = 1024;
  c.train.seq_len = 1024;
  c.train.micro_batch = 64;
  w->setConfig(c);
  ModelPage* page = w->modelPage();
  const auto plan = w->draft()->plan();
  QVERIFY(plan && !plan->fits);
  const QString fit = page->fitText();
  QVERIFY2(fit.startsWith(QStringLiteral("Does not fit: %1 of %2 per device")
                              .arg(flotilla::ui::formatBytes(plan->peak().total()),
                                   flotilla::ui::formatBytes(plan->device.mem_bytes))),
           qPrintable(fit));
  // Each single change is named exactly when the planner says it fits.
  const auto fitsWith = [&](const std::function<void(RunConfig&)>& change, int ranks) {
    RunConfig alt = w->config();
    change(alt);
    if (!flotilla::validate(alt, ranks).empty()) return false;
    return flotilla::make_plan(alt, flotilla::ui::deviceProfileFor(w->draft()->target(), alt, ranks)).fits;
  };
  const int64_t tokens = flotilla::tokens_per_step(w->config());
  const bool recompute = fitsWith([](RunConfig& a) { a.train.recompute = true; }, 1);
  const bool microBatch = fitsWith(
      [&](RunConfig& a) {
        a.train.micro_batch = 1;
        a.train.global_batch_tokens = tokens;
      },
      1);
  const bool bf16 = fitsWith([](RunConfig& a) { a.train.dtype = "bf16"; }, 1);
  // Every device with ZeRO-2 (the global batch of one rank is not a multiple of 4 x 64 x 1,024:
  // the natural batch of four ranks).
  const bool allDevices = fitsWith(
      [](RunConfig& a) {
        a.parallel.dp = 4;
        a.parallel.zero = 2;
        a.train.global_batch_tokens = 0;
      },
      4);
  QVERIFY(recompute || microBatch || bf16);  // the case is meant to have an answer
  QVERIFY(!allDevices);                      // and one that does not help
  QCOMPARE(fit.contains(QStringLiteral("ZeRO-2 over all 4 devices (")), allDevices);
  QCOMPARE(fit.contains(QStringLiteral("recompute (")), recompute);
  QCOMPARE(fit.contains(QStringLiteral("micro-batch 1 with accumulation (")), microBatch);
  QCOMPARE(fit.contains(QStringLiteral("bf16 (")), bf16);
  QVERIFY2(fit.contains(QStringLiteral("4 × NVIDIA L4")), qPrintable(fit));
}

void TestWizardModels::theHuggingFaceExportIsForLlamaModelsOnly() {
  auto w = makeWizard();
  // The demo is GPT-2: the option is disabled, and says why.
  QCOMPARE(w->advanceTo(RunWizard::Checkpoints), int(RunWizard::Checkpoints));
  QWizardPage* page = w->checkpointPage();
  auto* exportHf = child<QCheckBox>(page, "exportHf");
  QVERIFY(!exportHf->isEnabled());
  const QString note = child<QLabel>(page, "exportNote")->text();
  QVERIFY2(note.contains(QStringLiteral("Only for Llama-family models")), qPrintable(note));
  // Issue 18 item 7's rule: the app's words first (where the weights are); a command only as an
  // aside addressed to terminal users, never as the instruction ("run flotilla-worker export").
  QVERIFY2(note.contains(QStringLiteral("kept in the run's checkpoints")), qPrintable(note));
  QVERIFY2(!note.contains(QStringLiteral("run flotilla-worker")), qPrintable(note));
  const qsizetype command = note.indexOf(QStringLiteral("flotilla-worker"));
  QVERIFY2(command < 0 || note.lastIndexOf(QStringLiteral("For terminal users:"), command) >= 0,
           qPrintable(note));

  // A Hugging Face model: on, into the run's folder by default, bf16 unless fp32 is chosen.
  while (w->currentId() != RunWizard::Model) w->back();
  w->modelPage()->chooseHfFolder(qwen2Folder(QStringLiteral("qwen2-export")));
  QTRY_VERIFY_WITH_TIMEOUT(!w->modelPage()->isReadingFolder(), 10000);
  QCOMPARE(w->advanceTo(RunWizard::Checkpoints), int(RunWizard::Checkpoints));
  QVERIFY(exportHf->isEnabled());
  QVERIFY(w->config().checkpoint.export_hf.empty());
  exportHf->setChecked(true);
  QCOMPARE(QString::fromStdString(w->config().checkpoint.export_hf), QStringLiteral("hf"));
  QCOMPARE(QString::fromStdString(w->config().checkpoint.export_dtype), QStringLiteral("source"));
  auto* dir = child<QLineEdit>(page, "exportHfDir");
  const QString target = m_tmp.filePath(QStringLiteral("exported"));
  dir->setText(target);
  emit dir->textEdited(target);
  auto* dtype = child<QComboBox>(page, "exportDtype");
  dtype->setCurrentIndex(dtype->findData(QStringLiteral("fp32")));
  QCOMPARE(QString::fromStdString(w->config().checkpoint.export_hf), target);
  QCOMPARE(QString::fromStdString(w->config().checkpoint.export_dtype), QStringLiteral("fp32"));
  QVERIFY2(page->isComplete(), qPrintable(shownProblems(page)));
  QVERIFY2(child<QLabel>(page, "exportNote")->text().contains(QStringLiteral("tokenizer files")),
           qPrintable(child<QLabel>(page, "exportNote")->text()));

  // The engine's rule: the folder is written from the final checkpoint.
  for (QCheckBox* box : page->findChildren<QCheckBox*>())
    if (box->text().startsWith(QStringLiteral("Save a checkpoint after the last step")))
      box->setChecked(false);
  QVERIFY(!page->isComplete());
  QVERIFY2(shownProblems(page).contains(
               QStringLiteral("checkpoint.export_hf: needs checkpoint.save_final = true")),
           qPrintable(shownProblems(page)));
  for (QCheckBox* box : page->findChildren<QCheckBox*>())
    if (box->text().startsWith(QStringLiteral("Save a checkpoint after the last step")))
      box->setChecked(true);
  // Checked with no folder: blocked until one is given.
  dir->clear();
  emit dir->textEdited(QString());
  QVERIFY(!page->isComplete());
  QVERIFY2(shownProblems(page).contains(QStringLiteral("checkpoint.export_hf: choose the folder")),
           qPrintable(shownProblems(page)));
  dir->setText(target);
  emit dir->textEdited(target);
  QVERIFY2(page->isComplete(), qPrintable(shownProblems(page)));

  // The keys reach the TOML the worker reads.
  QCOMPARE(w->advanceTo(RunWizard::Review), int(RunWizard::Review));
  const QString toml = w->reviewPage()->editor()->toPlainText();
  QVERIFY(toml.contains(QStringLiteral("export_hf = \"%1\"").arg(target)));
  QVERIFY(toml.contains(QStringLiteral("export_dtype = \"fp32\"")));

  // Back to a GPT-2 model with the export still on: the engine's message, and the box can be unticked.
  while (w->currentId() != RunWizard::Model) w->back();
  child<QAbstractButton>(w->modelPage(), "modelSource-preset")->click();
  QCOMPARE(QString::fromStdString(w->config().model.arch), QStringLiteral("gpt2"));
  QVERIFY(!page->isComplete());
  QVERIFY2(shownProblems(page).contains(
               QStringLiteral("checkpoint.export_hf: Hugging Face export at the end is for "
                              "model.arch = \"llama\"")),
           qPrintable(shownProblems(page)));
  QVERIFY(exportHf->isEnabled());
  exportHf->setChecked(false);
  QVERIFY(!exportHf->isEnabled());
  QVERIFY(w->config().checkpoint.export_hf.empty());
  QVERIFY2(page->isComplete(), qPrintable(shownProblems(page)));
}

void TestWizardModels::aRunFromAFolderTrainsAndExportsWithTheWorker() {
  const QString folder = qwen2Folder(QStringLiteral("qwen2-train"));
  auto w = makeWizard();
  w->modelPage()->chooseHfFolder(folder);
  QTRY_VERIFY_WITH_TIMEOUT(!w->modelPage()->isReadingFolder(), 10000);
  QCOMPARE(w->advanceTo(RunWizard::Checkpoints), int(RunWizard::Checkpoints));
  const QString exported = m_tmp.filePath(QStringLiteral("train-export"));
  child<QCheckBox>(w->checkpointPage(), "exportHf")->setChecked(true);
  auto* dir = child<QLineEdit>(w->checkpointPage(), "exportHfDir");
  dir->setText(exported);
  emit dir->textEdited(exported);
  auto* dtype = child<QComboBox>(w->checkpointPage(), "exportDtype");
  dtype->setCurrentIndex(dtype->findData(QStringLiteral("fp32")));
  QCOMPARE(w->advanceTo(RunWizard::Review), int(RunWizard::Review));
  // A short run: three steps of the synthetic corpus over the folder's 128-token vocabulary.
  RunConfig c = w->config();
  c.run.out_dir = m_tmp.filePath(QStringLiteral("train-run")).toStdString();
  c.train.steps = 3;
  c.data.synthetic_tokens = 20000;
  c.eval.every = 0;
  c.eval.batches = 1;
  c.checkpoint.every = 0;
  QVERIFY(flotilla::validate(c, 1).empty());
  const QString toml = m_tmp.filePath(QStringLiteral("train-run.toml"));
  QVERIFY(writeFile(toml, QByteArray::fromStdString(flotilla::config_to_toml(c))));

  QProcess worker;
  worker.setProcessChannelMode(QProcess::MergedChannels);
  worker.start(QStringLiteral(FLOTILLA_WORKER_PATH),
               {QStringLiteral("train"), QStringLiteral("--config"), toml, QStringLiteral("--quiet"),
                QStringLiteral("--no-stdout-metrics")});
  QVERIFY(worker.waitForFinished(120000));
  const QString log = QString::fromUtf8(worker.readAll());
  QVERIFY2(worker.exitStatus() == QProcess::NormalExit && worker.exitCode() == 0, qPrintable(log));

  // The export: the folder's architecture back, fp32 weights of the same tensors (tied: no lm_head).
  const flotilla::interop::HfConfig out = flotilla::interop::read_hf_config(exported.toStdString());
  QCOMPARE(QString::fromStdString(out.architecture), QStringLiteral("Qwen2ForCausalLM"));
  QCOMPARE(out.num_hidden_layers, 2);
  const flotilla::interop::HfCheckpoint weights(exported.toStdString());
  const flotilla::interop::HfCheckpoint source(folder.toStdString());
  QCOMPARE(weights.tensors().size(), source.tensors().size());
  for (const auto& t : weights.tensors()) {
    QCOMPARE(QString::fromStdString(t.dtype), QStringLiteral("F32"));
    const auto* s = source.find(t.name);
    QVERIFY2(s && s->shape == t.shape, t.name.c_str());
  }
}

QTEST_MAIN(TestWizardModels)
#include "test_wizard_models.moc"
