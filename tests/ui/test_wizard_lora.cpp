// The wizard's LoRA choices (issue 31 item 5), driven through the widgets over the golden Llama
// folder (tests/engine/golden/hf/llama, copied) and its PEFT adapter (golden/lora/llama/adapter):
//  - LoRA is unavailable for a named size or custom dimensions, with the reason shown in place; a
//    draft that has LoRA on anyway keeps the choice, validate()'s problem under it, until turned off.
//  - Over a folder, each control writes its [lora] key at once: rank, alpha (with the scale α/r or,
//    with rsLoRA, α/√r), dropout, the target presets and per-projection boxes (a custom set reads
//    "Custom"); no targets is a problem under the field, never a dead end.
//  - The trainable count is the adapters' parameters, counted here by hand from the shapes.
//  - "Continue from a PEFT adapter" reads adapter_config.json off the UI thread and sets rank, alpha,
//    rsLoRA and targets to the adapter's (read-only); a refused adapter shows the engine's message.
//  - The fit line re-plans the draft (the planner's LoRA memory arrives with it); the Review page's
//    TOML holds the [lora] section; the Checkpoints page offers checkpoint.export_peft under LoRA and
//    labels the Hugging Face export as merged.
//  - Recommend: a candidate with other [lora] settings is applied whole and described; with a planner
//    that weighs full fine-tuning against LoRA, an 8B folder on one 24 GB GPU, where only LoRA fits,
//    gets LoRA from Recommend with the planner's note on why (skipped by a planner that does not).
//  - QLoRA (issue 38) beside Full and LoRA: it writes lora.enabled and lora.base_quant = "nf4" with
//    double quantisation, its row says what it trades with the planner's numbers (bits per base
//    parameter, the base's size against LoRA's, slower matmuls, a merged export from the quantised
//    base), and the fit line is the planner's QLoRA plan: an 8B folder at 4096 tokens on one 24 GB
//    GPU does not fit as LoRA and fits as QLoRA.
#include <QAbstractButton>
#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QSpinBox>
#include <QTemporaryDir>
#include <QtTest>

#include <algorithm>

#include "engine/config/config_io.h"
#include "engine/config/config_validate.h"
#include "engine/interop/peft.h"
#include "engine/model/lora.h"
#include "engine/model/model_dims.h"
#include "engine/plan/planner.h"
#include "engine/plan/recommend.h"
#include "ui/nodes/machinefacts.h"
#include "ui/wizard/checkpointpage.h"
#include "ui/wizard/hardwarepage.h"
#include "ui/wizard/layoutadvice.h"
#include "ui/wizard/loracontrols.h"
#include "ui/wizard/modelpage.h"
#include "ui/wizard/reviewpage.h"
#include "ui/wizard/runwizard.h"
#include "wizard_helpers.h"

using flotilla::RunConfig;
using flotilla::ui::ModelPage;
using flotilla::ui::RunWizard;
using namespace wizard_helpers;

class TestWizardLora : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase();
  void loraIsUnavailableWithoutAFolderAndSaysWhy();
  void eachControlWritesItsLoraKey();
  void theTrainableCountIsTheAdapters();
  void anAdapterFolderSetsTheValuesReadOnly();
  void anAdapterTheEngineRefusesShowsWhyBesideTheField();
  void theReviewTomlAndTheCheckpointsPageFollowLora();
  void recommendAppliesTheCandidatesLoraSettings();
  void recommendSwitchesTo8bLoraWhenOnlyLoraFits();
  void qloraIsAThirdChoiceWithThePlannersFigures();

 private:
  std::unique_ptr<RunWizard> makeWizard();
  // A wizard on the golden Llama folder (copied under `name`), LoRA chosen.
  std::unique_ptr<RunWizard> loraWizard(const QString& name);
  QString llamaFolder(const QString& name);
  QString adapterFolder(const QString& name);
  QTemporaryDir m_tmp{QStringLiteral(FLOTILLA_TEST_TMP "/wizard_lora-XXXXXX")};
};

void TestWizardLora::initTestCase() { QVERIFY(m_tmp.isValid()); }

std::unique_ptr<RunWizard> TestWizardLora::makeWizard() {
  auto w = std::make_unique<RunWizard>(nullptr, m_tmp.filePath(QStringLiteral("templates")));
  w->setMachine(cpuMachine());
  w->resize(900, 720);
  w->show();
  if (!QTest::qWaitForWindowExposed(w.get())) qWarning("wizard not exposed");
  return w;
}

QString TestWizardLora::llamaFolder(const QString& name) {
  const QString dir = m_tmp.filePath(name);
  if (!copyFiles(
          QStringLiteral(FLOTILLA_SOURCE_DIR "/tests/engine/golden/hf/llama"), dir,
          {QStringLiteral("config.json"), QStringLiteral("generation_config.json"),
           QStringLiteral("model.safetensors.index.json"), QStringLiteral("model-00001-of-00003.safetensors"),
           QStringLiteral("model-00002-of-00003.safetensors"),
           QStringLiteral("model-00003-of-00003.safetensors")}))
    qFatal("cannot copy the llama golden folder");
  return dir;
}

QString TestWizardLora::adapterFolder(const QString& name) {
  const QString dir = m_tmp.filePath(name);
  if (!copyFiles(QStringLiteral(FLOTILLA_SOURCE_DIR "/tests/engine/golden/lora/llama/adapter"), dir,
                 {QStringLiteral("adapter_config.json"), QStringLiteral("adapter_model.safetensors")}))
    qFatal("cannot copy the golden adapter");
  return dir;
}

std::unique_ptr<RunWizard> TestWizardLora::loraWizard(const QString& name) {
  auto w = makeWizard();
  ModelPage* page = w->modelPage();
  page->chooseHfFolder(llamaFolder(name));
  if (!QTest::qWaitFor([&] { return !page->isReadingFolder() && page->isComplete(); }, 10000))
    qWarning("folder not read: %s", qPrintable(shownProblems(page)));
  child<QAbstractButton>(page, "trainingLora")->click();
  return w;
}

void TestWizardLora::loraIsUnavailableWithoutAFolderAndSaysWhy() {
  auto w = makeWizard();
  ModelPage* page = w->modelPage();
  QCOMPARE(page->source(), ModelPage::Named);  // the demo: a named GPT-2 size
  auto* lora = child<QAbstractButton>(page, "trainingLora");
  auto* unavailable = child<QLabel>(page, "loraUnavailable");
  QVERIFY(child<QAbstractButton>(page, "trainingFull")->isChecked());
  QVERIFY(lora->isVisibleTo(page));  // shown, not hidden silently
  QVERIFY(!lora->isEnabled());
  QVERIFY(unavailable->isVisibleTo(page));
  QVERIFY2(unavailable->text().contains(QStringLiteral("needs a Hugging Face folder (model.init_from)")),
           qPrintable(unavailable->text()));
  QVERIFY(!child<QSpinBox>(page, "loraRank")->isVisibleTo(page));
  QVERIFY(page->trainableText().startsWith(QStringLiteral("All ")));

  child<QAbstractButton>(page, "modelSource-custom")->click();
  QCOMPARE(page->source(), ModelPage::Custom);
  QVERIFY(!lora->isEnabled());
  QVERIFY(unavailable->isVisibleTo(page));

  // A config with LoRA on but no folder (a template, an edited TOML): the choice stays, enabled,
  // with validate()'s reason under it, and Full fine-tune clears it.
  RunConfig c = w->config();
  c.lora.enabled = true;
  w->setConfig(c);
  QVERIFY(lora->isEnabled() && lora->isChecked());
  QVERIFY(!page->isComplete());
  QVERIFY2(
      page->problemBeside(QStringLiteral("lora.enabled")).contains(QStringLiteral("needs model.init_from")),
      qPrintable(shownProblems(page)));
  child<QAbstractButton>(page, "trainingFull")->click();
  QVERIFY(!w->config().lora.enabled);
  QVERIFY2(page->isComplete(), qPrintable(shownProblems(page)));
  QVERIFY(!lora->isEnabled());

  // Over a folder the reason goes away and LoRA can be chosen.
  page->chooseHfFolder(llamaFolder(QStringLiteral("unavailable")));
  QTRY_VERIFY_WITH_TIMEOUT(!page->isReadingFolder(), 10000);
  QVERIFY(lora->isEnabled());
  QVERIFY(!unavailable->isVisibleTo(page));
}

void TestWizardLora::eachControlWritesItsLoraKey() {
  auto w = loraWizard(QStringLiteral("controls"));
  ModelPage* page = w->modelPage();
  const flotilla::LoraSection& l = w->config().lora;
  QVERIFY(l.enabled);
  QVERIFY2(page->isComplete(), qPrintable(shownProblems(page)));
  auto* rank = child<QSpinBox>(page, "loraRank");
  auto* alpha = child<QDoubleSpinBox>(page, "loraAlpha");
  auto* rslora = child<QCheckBox>(page, "loraRslora");
  auto* scale = child<QLabel>(page, "loraScale");
  QVERIFY(rank->isVisibleTo(page));
  QCOMPARE(rank->value(), 16);
  QCOMPARE(scale->text(), QStringLiteral("scale α/r = 32/16 = 2"));

  rank->setValue(8);
  QCOMPARE(l.rank, 8);
  QCOMPARE(scale->text(), QStringLiteral("scale α/r = 32/8 = 4"));
  alpha->setValue(16);
  QCOMPARE(l.alpha, 16.0);
  rslora->click();
  QVERIFY(l.use_rslora);
  QCOMPARE(scale->text(),
           QStringLiteral("scale α/√r = 16/√8 = %1").arg(QLocale().toString(16 / std::sqrt(8.0), 'g', 6)));
  child<QDoubleSpinBox>(page, "loraDropout")->setValue(0.1);
  QCOMPARE(l.dropout, 0.1);

  // Presets and boxes.
  auto* preset = child<QComboBox>(page, "loraTargets");
  const auto box = [&](const char* name) {
    return child<QCheckBox>(page, qPrintable(QStringLiteral("loraTarget-") + QLatin1String(name)));
  };
  QCOMPARE(preset->currentData().toString(), QStringLiteral("all-linear"));
  QCOMPARE(l.targets, std::string("all-linear"));
  const int attention = preset->findData(QStringLiteral("attention"));
  preset->setCurrentIndex(attention);
  emit preset->activated(attention);
  QCOMPARE(l.targets, std::string("attention"));
  QVERIFY(box("q_proj")->isChecked() && box("o_proj")->isChecked() && !box("gate_proj")->isChecked());
  box("gate_proj")->click();
  QCOMPARE(l.targets, std::string("q_proj,k_proj,v_proj,o_proj,gate_proj"));
  QCOMPARE(preset->currentData().toString(), QStringLiteral("custom"));
  box("gate_proj")->click();
  QCOMPARE(l.targets, std::string("attention"));
  QCOMPARE(preset->currentData().toString(), QStringLiteral("attention"));
  for (const char* name : {"q_proj", "k_proj", "v_proj"}) box(name)->click();
  QCOMPARE(l.targets, std::string("o_proj"));
  // No projection at all: the engine's problem under the field, and Next waits.
  box("o_proj")->click();
  QVERIFY(!page->isComplete());
  QVERIFY2(page->problemBeside(QStringLiteral("lora.targets")).startsWith(QStringLiteral("lora.targets")),
           qPrintable(shownProblems(page)));
  const int all = preset->findData(QStringLiteral("all-linear"));
  preset->setCurrentIndex(all);
  emit preset->activated(all);
  QCOMPARE(l.targets, std::string("all-linear"));
  QVERIFY2(page->isComplete(), qPrintable(shownProblems(page)));

  // A bad rank: under its field, and the fit line (the planner, run again on each edit) waits for it.
  rank->setValue(0);
  QVERIFY(page->problemBeside(QStringLiteral("lora.rank")).contains(QStringLiteral("at least 1")));
  QVERIFY2(page->fitText().contains(QStringLiteral("lora.rank")), qPrintable(page->fitText()));
  rank->setValue(8);
  QVERIFY2(page->fitText().startsWith(QStringLiteral("Fits:")), qPrintable(page->fitText()));
  const std::optional<flotilla::Plan> plan = w->draft()->plan();
  QVERIFY(plan);
  QVERIFY(flotilla::validate(w->config(), 1).empty());

  // Another page changing [lora] (the Hardware page's Recommend): the Model page shows the draft's.
  w->draft()->edit([](RunConfig& c) {
    c.lora.rank = 32;
    c.lora.targets = "attention";
  });
  QCOMPARE(rank->value(), 32);
  QCOMPARE(preset->currentData().toString(), QStringLiteral("attention"));
  w->draft()->edit([](RunConfig& c) { c.lora.enabled = false; });
  QVERIFY(child<QAbstractButton>(page, "trainingFull")->isChecked());
  QVERIFY(!rank->isVisibleTo(page));
}

void TestWizardLora::theTrainableCountIsTheAdapters() {
  auto w = loraWizard(QStringLiteral("count"));
  ModelPage* page = w->modelPage();
  child<QSpinBox>(page, "loraRank")->setValue(8);
  // The golden model: 2 layers, width 32, q 4 x 8 = 32, k/v 2 x 8 = 16, FFN 64. Each adapter holds
  // r x (in + out): q 64r, k 48r, v 48r, o 64r, gate, up and down 96r each = 512r per layer.
  const qint64 adapters = 2 * 512 * 8;
  const RunConfig& c = w->config();
  const auto dims = flotilla::dims_from_config(c.model);
  QCOMPARE(static_cast<qint64>(flotilla::lora_parameter_count(dims, flotilla::lora_spec(c))), adapters);
  const double total = static_cast<double>(flotilla::count_parameters(dims).total);
  const QString expected = QStringLiteral("8.19 k trainable, %1% of %2")
                               .arg(QLocale().toString(100.0 * adapters / total, 'f', 1),
                                    page->parameterText().section(QLatin1Char(' '), 0, 1));
  QVERIFY2(page->trainableText().startsWith(expected), qPrintable(page->trainableText() + " vs " + expected));

  auto* preset = child<QComboBox>(page, "loraTargets");
  const int attention = preset->findData(QStringLiteral("attention"));
  preset->setCurrentIndex(attention);
  emit preset->activated(attention);
  QVERIFY2(page->trainableText().startsWith(QStringLiteral("3.58 k trainable")),  // 2 x (64+48+48+64) x 8
           qPrintable(page->trainableText()));
  child<QAbstractButton>(page, "trainingFull")->click();
  QVERIFY2(page->trainableText().startsWith(QStringLiteral("All ")), qPrintable(page->trainableText()));
  QVERIFY(!child<QSpinBox>(page, "loraRank")->isVisibleTo(page));
}

void TestWizardLora::anAdapterFolderSetsTheValuesReadOnly() {
  auto w = loraWizard(QStringLiteral("continue"));
  ModelPage* page = w->modelPage();
  const QString adapter = adapterFolder(QStringLiteral("continue-adapter"));
  auto* path = child<QLineEdit>(page, "loraInitFrom");
  QVERIFY(path->isVisibleTo(page));
  path->setText(adapter);
  emit path->editingFinished();
  QVERIFY(page->loraControls()->isReadingAdapter());
  QVERIFY(!page->isComplete());  // Next waits for the read
  QTRY_VERIFY_WITH_TIMEOUT(!page->loraControls()->isReadingAdapter(), 10000);
  QTRY_VERIFY2(page->isComplete(), qPrintable(shownProblems(page)));

  const flotilla::LoraSection& l = w->config().lora;
  QCOMPARE(QString::fromStdString(l.init_from), adapter);
  QCOMPARE(l.rank, 4);
  QCOMPARE(l.alpha, 8.0);
  QVERIFY(!l.use_rslora);
  QCOMPARE(l.targets, std::string("all-linear"));
  // What the worker makes of it is what the wizard shows.
  RunConfig worker = w->config();
  QVERIFY(flotilla::interop::apply_lora_init_from(worker));
  QCOMPARE(worker.lora.rank, l.rank);
  QCOMPARE(flotilla::parse_lora_targets(worker.lora.targets), flotilla::parse_lora_targets(l.targets));
  auto* rank = child<QSpinBox>(page, "loraRank");
  QCOMPARE(rank->value(), 4);
  QVERIFY(!rank->isEnabled());
  QVERIFY(!child<QDoubleSpinBox>(page, "loraAlpha")->isEnabled());
  QVERIFY(!child<QComboBox>(page, "loraTargets")->isEnabled());
  QVERIFY(child<QDoubleSpinBox>(page, "loraDropout")->isEnabled());  // the adapter does not set it
  QVERIFY(child<QLabel>(page, "loraAdapterInfo")->isVisibleTo(page));
  const QString info = page->loraControls()->adapterText();
  QVERIFY2(info.contains(QStringLiteral("r 4, alpha 8")) && info.contains(QStringLiteral("All linear")) &&
               info.contains(QStringLiteral("scale α/r = 8/4 = 2")),
           qPrintable(info));

  // Full fine-tune drops the adapter from the config (validate refuses one without LoRA); LoRA
  // again brings it back from the field.
  child<QAbstractButton>(page, "trainingFull")->click();
  QVERIFY(!l.enabled && l.init_from.empty());
  QVERIFY(page->isComplete());
  child<QAbstractButton>(page, "trainingLora")->click();
  QCOMPARE(QString::fromStdString(l.init_from), adapter);
  QTRY_VERIFY_WITH_TIMEOUT(!page->loraControls()->isReadingAdapter() && page->isComplete(), 10000);
  QVERIFY(!rank->isEnabled());

  // Cleared: the controls are the user's again, with the adapter's values to start from.
  path->clear();
  emit path->editingFinished();
  QVERIFY(l.init_from.empty());
  QVERIFY(rank->isEnabled());
  QCOMPARE(rank->value(), 4);
}

void TestWizardLora::anAdapterTheEngineRefusesShowsWhyBesideTheField() {
  auto w = loraWizard(QStringLiteral("refused"));
  ModelPage* page = w->modelPage();
  const QString adapter = adapterFolder(QStringLiteral("refused-adapter"));
  QFile cfg(adapter + QStringLiteral("/adapter_config.json"));
  QVERIFY(cfg.open(QIODevice::ReadOnly));
  QByteArray json = cfg.readAll();
  cfg.close();
  json.replace("\"peft_type\": \"LORA\"", "\"peft_type\": \"IA3\"");
  QVERIFY(writeFile(adapter + QStringLiteral("/adapter_config.json"), json));
  page->loraControls()->chooseAdapter(adapter);
  QTRY_VERIFY_WITH_TIMEOUT(!page->loraControls()->isReadingAdapter(), 10000);
  QVERIFY(!page->isComplete());
  const QString beside = page->problemBeside(QStringLiteral("lora.init_from"));
  QVERIFY2(beside.startsWith(QStringLiteral("lora.init_from: ")) &&
               beside.contains(QStringLiteral("\"peft_type\"")),
           qPrintable(shownProblems(page)));

  // A folder with no adapter_config.json: validate()'s own words, under the same field.
  page->loraControls()->chooseAdapter(m_tmp.filePath(QStringLiteral("refused")));
  QVERIFY2(page->problemBeside(QStringLiteral("lora.init_from"))
               .contains(QStringLiteral("no adapter_config.json")),
           qPrintable(shownProblems(page)));
  page->loraControls()->chooseAdapter(QString());
  QVERIFY2(page->isComplete(), qPrintable(shownProblems(page)));
}

void TestWizardLora::theReviewTomlAndTheCheckpointsPageFollowLora() {
  auto w = loraWizard(QStringLiteral("review"));
  child<QSpinBox>(w->modelPage(), "loraRank")->setValue(8);
  QCOMPARE(w->advanceTo(RunWizard::Checkpoints), int(RunWizard::Checkpoints));
  QWizardPage* page = w->checkpointPage();
  auto* exportHf = child<QCheckBox>(page, "exportHf");
  auto* exportPeft = child<QCheckBox>(page, "exportPeft");
  QVERIFY(exportHf->text().contains(QStringLiteral("(merged with the adapter)")));
  QVERIFY(exportPeft->isVisibleTo(page));
  QCOMPARE(exportPeft->text(), QStringLiteral("Export the LoRA adapter (PEFT) at the end"));
  exportPeft->click();
  QCOMPARE(w->config().checkpoint.export_peft, std::string("adapter"));
  auto* dir = child<QLineEdit>(page, "exportPeftDir");
  const QString out = m_tmp.filePath(QStringLiteral("review-adapter"));
  dir->setText(out);
  emit dir->textEdited(out);
  QCOMPARE(QString::fromStdString(w->config().checkpoint.export_peft), out);
  exportHf->click();
  QVERIFY2(child<QLabel>(page, "exportNote")->text().contains(QStringLiteral("merged")),
           qPrintable(child<QLabel>(page, "exportNote")->text()));
  QVERIFY2(page->isComplete(), qPrintable(shownProblems(page)));

  QCOMPARE(w->advanceTo(RunWizard::Review), int(RunWizard::Review));
  const QString toml = w->reviewPage()->editor()->toPlainText();
  const qsizetype at = toml.indexOf(QStringLiteral("\n[lora]\n"));
  QVERIFY2(at >= 0, qPrintable(toml));
  const QString section = toml.mid(at, toml.indexOf(QStringLiteral("\n["), at + 2) - at);
  for (const QString& line : {QStringLiteral("enabled = true"), QStringLiteral("rank = 8"),
                              QStringLiteral("alpha = 32"), QStringLiteral("targets = \"all-linear\"")})
    QVERIFY2(section.contains(line), qPrintable(section));
  QVERIFY(toml.contains(QStringLiteral("export_peft = \"%1\"").arg(out)));

  // LoRA turned off on the Model page with the adapter export still set: the Checkpoints page keeps
  // it shown, the engine's problem beside it, so it can be cleared there.
  child<QAbstractButton>(w->modelPage(), "trainingFull")->click();
  QVERIFY(!w->config().lora.enabled);
  auto* checkpoints = w->checkpointPage();
  QVERIFY(exportPeft->isVisibleTo(page));
  QVERIFY2(checkpoints->problemBeside(QStringLiteral("checkpoint.export_peft"))
               .contains(QStringLiteral("lora.enabled")),
           qPrintable(shownProblems(page)));
  QVERIFY(!exportHf->text().contains(QStringLiteral("merged")));
  exportPeft->click();
  QVERIFY(w->config().checkpoint.export_peft.empty());
  QVERIFY(!exportPeft->isVisibleTo(page));
}

void TestWizardLora::recommendAppliesTheCandidatesLoraSettings() {
  RunConfig before;
  before.model.arch = "llama";
  before.model.init_from = "/models/base";
  RunConfig candidate = before;
  candidate.parallel.zero = 1;
  candidate.lora.enabled = true;
  candidate.lora.rank = 16;
  candidate.lora.alpha = 32;
  candidate.lora.targets = "all-linear";
  RunConfig after = before;
  flotilla::ui::applyLayout(candidate, after);
  QVERIFY(after.lora.enabled);
  QCOMPARE(after.lora.rank, 16);
  QCOMPARE(after.lora.targets, std::string("all-linear"));
  const QString text = flotilla::ui::describeLayoutChange(before, 1, std::nullopt, after, 1, std::nullopt);
  QVERIFY2(text.contains(QStringLiteral("training full fine-tune → LoRA r 16, alpha 32, all-linear")),
           qPrintable(text));
  QVERIFY2(!text.contains(QStringLiteral("so the training is the same")), qPrintable(text));

  // Back to full training, and a candidate that keeps the draft's [lora] leaves it alone.
  RunConfig full = after;
  full.lora.enabled = false;
  flotilla::ui::applyLayout(full, after);
  QVERIFY(!after.lora.enabled);
  after.lora.dropout = 0.05;
  RunConfig same = after;
  same.parallel.zero = 2;
  flotilla::ui::applyLayout(same, after);
  QCOMPARE(after.lora.dropout, 0.05);
  const QString kept = flotilla::ui::describeLayoutChange(full, 1, std::nullopt, after, 1, std::nullopt);
  QVERIFY2(!kept.contains(QStringLiteral("fine-tune")) && !kept.contains(QStringLiteral("LoRA")),
           qPrintable(kept));
}

void TestWizardLora::recommendSwitchesTo8bLoraWhenOnlyLoraFits() {
  // Llama 3.1 8B's shape (headers only) on one 24 GB GPU in bf16: full fine-tuning's weights,
  // gradients and AdamW state alone are far past 24 GB; LoRA's frozen bf16 base is 16 GB.
  const QString dir = m_tmp.filePath(QStringLiteral("llama-8b"));
  QVERIFY(writeSparseLlamaFolder(dir, 32, 4096, 14336, 32, 8, 128256, false));
  auto w = std::make_unique<RunWizard>(nullptr, m_tmp.filePath(QStringLiteral("templates")));
  w->setMachine(gpuMachine(1, "NVIDIA A10", 24ull << 30));
  w->resize(900, 720);
  w->show();
  QVERIFY(QTest::qWaitForWindowExposed(w.get()));
  ModelPage* page = w->modelPage();
  page->chooseHfFolder(dir);
  QTRY_VERIFY_WITH_TIMEOUT(!page->isReadingFolder(), 10000);
  RunConfig c = w->config();
  c.run.device = "cuda";
  c.train.dtype = "bf16";
  c.train.micro_batch = 1;
  c.train.seq_len = 1024;
  c.train.global_batch_tokens = 0;
  c.train.recompute = true;
  w->setConfig(c);
  QVERIFY2(page->isComplete(), qPrintable(shownProblems(page)));
  QVERIFY(!w->config().lora.enabled);
  const auto layouts = flotilla::recommend_layouts(w->config(), 1, w->draft()->device());
  const auto lora = std::find_if(layouts.begin(), layouts.end(),
                                 [](const flotilla::LayoutCandidate& l) { return l.config.lora.enabled; });
  if (lora == layouts.end()) QSKIP("the planner in this tree does not weigh LoRA for a fine-tune yet");
  QVERIFY(!lora->note.empty());

  QCOMPARE(w->advanceTo(RunWizard::Hardware), int(RunWizard::Hardware));
  flotilla::ui::HardwarePage* hw = w->hardwarePage();
  hw->recommend();
  QTRY_VERIFY_WITH_TIMEOUT(!hw->isSearching(), 60000);
  const flotilla::LoraSection& l = w->config().lora;
  QVERIFY2(l.enabled, qPrintable(hw->recommendationText()));
  QCOMPARE(l.rank, lora->config.lora.rank);
  QCOMPARE(l.targets, lora->config.lora.targets);
  const QString text = hw->recommendationText();
  qInfo("Recommend: %s", qPrintable(text));
  QVERIFY2(text.contains(QStringLiteral("training full fine-tune → LoRA")), qPrintable(text));
  QVERIFY2(!text.contains(QStringLiteral("so the training is the same")), qPrintable(text));
  const QString note = QString::fromStdString(lora->note);  // shown as a sentence: capitalised
  QVERIFY2(text.contains(note.left(1).toUpper() + note.mid(1)), qPrintable(text));
  const std::optional<flotilla::Plan> plan = w->draft()->plan();
  QVERIFY(plan && plan->fits);
  // The Model page shows the choice the planner made.
  QVERIFY(child<QAbstractButton>(page, "trainingLora")->isChecked());
  QVERIFY2(page->trainableText().contains(QStringLiteral("trainable")), qPrintable(page->trainableText()));
}

void TestWizardLora::qloraIsAThirdChoiceWithThePlannersFigures() {
  const QString dir = m_tmp.filePath(QStringLiteral("llama-8b-qlora"));
  QVERIFY(writeSparseLlamaFolder(dir, 32, 4096, 14336, 32, 8, 128256, false));
  auto w = std::make_unique<RunWizard>(nullptr, m_tmp.filePath(QStringLiteral("templates")));
  w->setMachine(gpuMachine(1, "NVIDIA A10", 24ull << 30));
  w->resize(900, 720);
  w->show();
  QVERIFY(QTest::qWaitForWindowExposed(w.get()));
  ModelPage* page = w->modelPage();
  page->chooseHfFolder(dir);
  QTRY_VERIFY_WITH_TIMEOUT(!page->isReadingFolder(), 10000);
  RunConfig c = w->config();
  c.run.device = "cuda";
  c.train.dtype = "bf16";
  c.train.micro_batch = 1;
  c.train.seq_len = 4096;
  c.train.global_batch_tokens = 0;
  c.train.recompute = false;
  w->setConfig(c);
  QVERIFY2(page->isComplete(), qPrintable(shownProblems(page)));

  auto* full = child<QAbstractButton>(page, "trainingFull");
  auto* lora = child<QAbstractButton>(page, "trainingLora");
  auto* qlora = child<QAbstractButton>(page, "trainingQlora");
  auto* info = child<QLabel>(page, "qloraInfo");
  QVERIFY(qlora->isEnabled() && qlora->isVisibleTo(page));
  QCOMPARE(qlora->text(), QStringLiteral("QLoRA (4-bit base)"));
  QVERIFY(!info->isVisibleTo(page));

  // LoRA: the bf16 base and activations are past 24 GB.
  lora->click();
  QVERIFY(w->config().lora.enabled && w->config().lora.base_quant == "none");
  const std::optional<flotilla::Plan> lp = w->draft()->plan();
  QVERIFY(lp && !lp->fits && !lp->lora.nf4);
  QVERIFY2(page->fitText().startsWith(QStringLiteral("Does not fit: ") +
                                      flotilla::ui::formatBytes(lp->peak().total())),
           qPrintable(page->fitText()));

  // QLoRA: written to the draft, with double quantisation.
  qlora->click();
  const flotilla::LoraSection& l = w->config().lora;
  QVERIFY(qlora->isChecked() && !lora->isChecked());
  QVERIFY(l.enabled && l.base_quant == "nf4" && l.double_quant);
  QVERIFY2(page->isComplete(), qPrintable(shownProblems(page)));
  // The fit line is the planner's QLoRA plan of the draft, which fits.
  const flotilla::Plan qp = flotilla::make_plan(w->config(), w->draft()->device());
  QVERIFY(qp.lora.nf4 && qp.fits && qp.peak().frozen_nf4 > 0);
  QVERIFY2(
      page->fitText().startsWith(QStringLiteral("Fits: ") + flotilla::ui::formatBytes(qp.peak().total())),
      qPrintable(page->fitText()));
  // What it trades, in the planner's numbers.
  RunConfig plain = w->config();
  plain.lora.base_quant = "none";
  const flotilla::Plan pp = flotilla::make_plan(plain, w->draft()->device());
  QVERIFY(info->isVisibleTo(page));
  const QString why = info->text().replace(QLatin1Char('\n'), QLatin1Char(' '));
  QVERIFY2(
      why.contains(QStringLiteral("4-bit NormalFloat (NF4, double quantisation): 4.13 bits per parameter")),
      qPrintable(why));
  QVERIFY2(why.contains(QStringLiteral("the base takes %1 instead of %2")
                            .arg(flotilla::ui::formatBytes(qp.peak().frozen_weights),
                                 flotilla::ui::formatBytes(pp.peak().frozen_weights))),
           qPrintable(why));
  QVERIFY2(why.contains(QStringLiteral("slower matmuls")) &&
               why.contains(QStringLiteral("merged Hugging Face export comes from the quantised base")),
           qPrintable(why));
  // A config that asks for QLoRA loads as QLoRA; LoRA and Full take the 4-bit base away again.
  w->setConfig(w->config());
  QVERIFY(qlora->isChecked());
  lora->click();
  QVERIFY(w->config().lora.enabled && w->config().lora.base_quant == "none");
  QVERIFY(!info->isVisibleTo(page));
  qlora->click();
  full->click();
  QVERIFY(!w->config().lora.enabled && w->config().lora.base_quant == "none");
  QVERIFY2(flotilla::validate(w->config(), 1, flotilla::ValidateFor::kPlan).empty(),
           "full fine-tune refused");
}

QTEST_MAIN(TestWizardLora)
#include "test_wizard_lora.moc"
