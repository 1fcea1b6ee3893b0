// Screenshots of every view at 1280×800 over a realistic workspace (tests/ui/store_workspace.h:
// four runs with metrics and costs, one still running), saved as PNGs into FLOTILLA_SCREENSHOT_DIR
// for docs/screenshots/ (scripts/refresh-screenshots). Asserts that each image is real (big, many
// colours) and that the Compare and Costs plots hold data when grabbed. The wizard is also shot
// fine-tuning a Hugging Face model: the Model page with a SmolLM2-135M-shaped folder chosen (its
// config.json and a sparse model.safetensors whose header lists the real tensors: only headers are
// read) and the Data page after preparing chat records with the folder's tokenizer; and LoRA over that
// folder: the Model page (rank, alpha and its scale, the projections, the trainable count, what
// fits), the same continuing a PEFT adapter (its values read-only), and the Checkpoints page
// exporting the merged model and the adapter. And a model by name (issue 40): the Model page's
// table of a Hugging Face cache (SmolLM2, Llama 3.2 and a GPT-2 it cannot train, laid out as
// huggingface_hub writes it, with sparse weights) with SmolLM2-135M-Instruct picked.
#include <QAbstractButton>
#include <QApplication>
#include <QDir>
#include <QFile>
#include <QImage>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLineEdit>
#include <QProgressBar>
#include <QSet>
#include <QSettings>
#include <QSignalSpy>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QtTest>

#include "db/database.h"
#include "db/queue.h"
#include "db/sql.h"
#include "store_workspace.h"
#include "tests/engine/hub_server_util.h"
#include "ui/compare/comparepage.h"
#include "ui/compare/runpickermodel.h"
#include "ui/costs/costspage.h"
#include "ui/main/mainwindow.h"
#include "ui/plot/compareplot.h"
#include "ui/plot/costplot.h"
#include "ui/queue/queuemodel.h"
#include "ui/queue/queuepage.h"
#include "ui/wizard/checkpointpage.h"
#include "ui/wizard/datapage.h"
#include "ui/wizard/hubpicker.h"
#include "ui/wizard/loracontrols.h"
#include "ui/wizard/modelpage.h"
#include "ui/wizard/runwizard.h"
#include "wizard_helpers.h"

using namespace flotilla;
using namespace flotilla::ui;

namespace {

int colourCount(const QImage& image) {
  QSet<QRgb> colours;
  for (int y = 0; y < image.height(); y += 3)
    for (int x = 0; x < image.width(); x += 3) colours.insert(image.pixel(x, y));
  return static_cast<int>(colours.size());
}

void save(QWidget* w, const QString& name) {
  const QImage image = w->grab().toImage();
  const QString path = QStringLiteral(FLOTILLA_SCREENSHOT_DIR "/") + name + QStringLiteral(".png");
  QVERIFY2(image.save(path), qPrintable(path));
  QVERIFY2(colourCount(image) > 40, qPrintable(name));
  qInfo("screenshot: %s", qPrintable(path));
}

// A SmolLM2-135M-shaped Hugging Face folder: its config.json values, and a model.safetensors whose
// header lists every tensor in BF16 with the data left as a hole in a sparse file (270 MB that take
// no disk), which is all HfCheckpoint reads.
bool writeSmolLm2Folder(const QString& dir) {
  if (!QDir().mkpath(dir)) return false;
  const int C = 576, F = 1536, KV = 192, V = 49152, L = 30;
  const QJsonObject config{{QStringLiteral("architectures"), QJsonArray{QStringLiteral("LlamaForCausalLM")}},
                           {QStringLiteral("model_type"), QStringLiteral("llama")},
                           {QStringLiteral("hidden_size"), C},
                           {QStringLiteral("intermediate_size"), F},
                           {QStringLiteral("num_hidden_layers"), L},
                           {QStringLiteral("num_attention_heads"), 9},
                           {QStringLiteral("num_key_value_heads"), 3},
                           {QStringLiteral("hidden_act"), QStringLiteral("silu")},
                           {QStringLiteral("max_position_embeddings"), 8192},
                           {QStringLiteral("rms_norm_eps"), 1e-5},
                           {QStringLiteral("rope_theta"), 100000.0},
                           {QStringLiteral("tie_word_embeddings"), true},
                           {QStringLiteral("attention_bias"), false},
                           {QStringLiteral("bos_token_id"), 0},
                           {QStringLiteral("eos_token_id"), 0},
                           {QStringLiteral("vocab_size"), V},
                           {QStringLiteral("torch_dtype"), QStringLiteral("bfloat16")}};
  QFile cfg(dir + QStringLiteral("/config.json"));
  if (!cfg.open(QIODevice::WriteOnly) || cfg.write(QJsonDocument(config).toJson()) <= 0) return false;
  cfg.close();
  QJsonObject header;
  qint64 offset = 0;
  const auto add = [&](const QString& name, qint64 rows, qint64 cols) {
    const qint64 bytes = rows * (cols > 0 ? cols : 1) * 2;
    const QJsonArray shape = cols > 0 ? QJsonArray{rows, cols} : QJsonArray{rows};
    header[name] = QJsonObject{{QStringLiteral("dtype"), QStringLiteral("BF16")},
                               {QStringLiteral("shape"), shape},
                               {QStringLiteral("data_offsets"), QJsonArray{offset, offset + bytes}}};
    offset += bytes;
  };
  add(QStringLiteral("model.embed_tokens.weight"), V, C);
  for (int l = 0; l < L; ++l) {
    const QString p = QStringLiteral("model.layers.%1.").arg(l);
    add(p + QStringLiteral("input_layernorm.weight"), C, 0);
    add(p + QStringLiteral("self_attn.q_proj.weight"), C, C);
    add(p + QStringLiteral("self_attn.k_proj.weight"), KV, C);
    add(p + QStringLiteral("self_attn.v_proj.weight"), KV, C);
    add(p + QStringLiteral("self_attn.o_proj.weight"), C, C);
    add(p + QStringLiteral("post_attention_layernorm.weight"), C, 0);
    add(p + QStringLiteral("mlp.gate_proj.weight"), F, C);
    add(p + QStringLiteral("mlp.up_proj.weight"), F, C);
    add(p + QStringLiteral("mlp.down_proj.weight"), C, F);
  }
  add(QStringLiteral("model.norm.weight"), C, 0);
  QByteArray json = QJsonDocument(header).toJson(QJsonDocument::Compact);
  while (json.size() % 8 != 0) json += ' ';
  QFile st(dir + QStringLiteral("/model.safetensors"));
  if (!st.open(QIODevice::WriteOnly)) return false;
  const quint64 n = static_cast<quint64>(json.size());
  QByteArray prefix(8, '\0');
  for (int i = 0; i < 8; ++i) prefix[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  if (st.write(prefix) != 8 || st.write(json) != json.size()) return false;
  return st.resize(8 + json.size() + offset);  // the tensor data: a hole
}

// A few chat records in the SmolLM2 (ChatML) style.
QByteArray chatRecords() {
  const char* turns[][3] = {
      {"You are a helpful assistant.", "What is the capital of France?", "Paris."},
      {"", "Translate 'good morning' into German.", "Guten Morgen."},
      {"You answer in one sentence.", "Why is the sky blue?",
       "Air scatters blue sunlight more than red light, so the sky looks blue from every direction."},
      {"", "Give me a prime number above 100.", "101 is prime."},
      {"", "Write a haiku about boats.",
       "Sails lean on the wind,\nharbour lights fade into fog,\nthe sea keeps our wake."},
  };
  QByteArray out;
  for (const auto& t : turns) {
    QJsonArray messages;
    if (*t[0])
      messages.append(QJsonObject{{QStringLiteral("role"), QStringLiteral("system")},
                                  {QStringLiteral("content"), QLatin1String(t[0])}});
    messages.append(QJsonObject{{QStringLiteral("role"), QStringLiteral("user")},
                                {QStringLiteral("content"), QLatin1String(t[1])}});
    messages.append(QJsonObject{{QStringLiteral("role"), QStringLiteral("assistant")},
                                {QStringLiteral("content"), QLatin1String(t[2])}});
    out += QJsonDocument(QJsonObject{{QStringLiteral("messages"), messages}}).toJson(QJsonDocument::Compact) +
           '\n';
  }
  out +=
      QJsonDocument(QJsonObject{{QStringLiteral("prompt"), QStringLiteral("The three primary colours are")},
                                {QStringLiteral("completion"), QStringLiteral(" red, yellow and blue.")}})
          .toJson(QJsonDocument::Compact) +
      '\n';
  return out;
}

// Queue entries waiting for the running run (so the window's scheduler starts none of them), one
// with the decision it would take: every place weighed, predicted time and cost, why not.
qint64 queueForScreenshot(const std::string& path, double now) {
  db::Database d(path);
  const std::string place1 =
      R"J({"key":"node:gpu-box","label":"node gpu-box","fits":true,"why_not":"","layout":"dp=8",)J"
      R"J("tokens_per_s":32768,"basis":"measured: 4 runs, median 32768 tok/s","wait_s":0,"seconds":11400,)J"
      R"J("usd":25.33,"usd_per_hour":8.0,"meets_deadline":true,"within_budget":true})J";
  const std::string place2 =
      R"J({"key":"local","label":"this machine","fits":true,"why_not":"","layout":"dp=1","tokens_per_s":900,)J"
      R"J("basis":"planner (uncalibrated)","wait_s":0,"seconds":415000,"usd":0,"usd_per_hour":0,)J"
      R"J("meets_deadline":false,"within_budget":true})J";
  const std::string place3 =
      R"J({"key":"cluster:hpc/gpu","label":"cluster hpc (partition gpu)","fits":false,)J"
      R"J("why_not":"2 jobs ahead and 40 GiB per device needed, 32 GiB there","layout":"","tokens_per_s":0,)J"
      R"J("basis":"","wait_s":0,"seconds":0,"usd":null,"usd_per_hour":null,"meets_deadline":false,"within_budget":true})J";
  const std::string decision =
      R"J({"time":)J" + std::to_string(now - 30) +
      R"J(,"chosen":"node:gpu-box","words":"on node gpu-box: $25.33 and 3 h 10 min to finish; )J"
      R"J(this machine: $0 but 4 d 19 h, past the deadline; cluster hpc: 2 jobs ahead",)J"
      R"J("places":[)J" +
      place1 + "," + place2 + "," + place3 + "]}";
  auto add = [&](const std::string& name, int64_t priority, std::optional<double> deadline,
                 std::optional<double> max) {
    db::NewQueueEntry e;
    e.name = name;
    e.config_toml = "[run]\nname = \"" + name + "\"\n";
    e.config_path = "/home/ana/sweeps/" + name + ".toml";
    e.after_run = "live-tuning";
    e.priority = priority;
    e.deadline = deadline;
    e.max_usd = max;
    return db::add_queue_entry(d, e, now - 60);
  };
  const qint64 first = add("pretrain-350m", 1, now + 2 * 86400, 40.0);
  db::set_queue_entry_why(d, first,
                          "waits for live-tuning to complete; then on node gpu-box: $25.33 and 3 h 10 min",
                          decision, now - 30);
  const qint64 second = add("sweep-lr-3e-4", 0, std::nullopt, std::nullopt);
  db::set_queue_entry_why(d, second, "waits for live-tuning to complete", "{}", now - 30);
  const qint64 third = add("sweep-lr-1e-3", 0, std::nullopt, 5.0);
  db::pause_queue_entry(d, third, now - 20);
  return first;
}

}  // namespace

class TestScreenshots : public QObject {
  Q_OBJECT

 private slots:
  void everyView();
  void wizardFineTuningAHuggingFaceModel();
  void wizardLoraOnTheModelPage();
  void wizardAModelByName();
};

void TestScreenshots::everyView() {
  QTemporaryDir tmp;
  QStandardPaths::setTestModeEnabled(true);
  QSettings::setPath(QSettings::NativeFormat, QSettings::UserScope, tmp.filePath(QStringLiteral("config")));
  QSettings(QStringLiteral("Flotilla"), QStringLiteral("Flotilla")).clear();
  WorkspaceInfo ws;
  ws.directory = tmp.path();
  ws.databasePath = tmp.filePath(QStringLiteral("flotilla.db"));
  const auto ids = store_workspace::build(ws.databasePath.toStdString(), db::now_seconds());
  ws.schemaVersion = db::Database(ws.databasePath.toStdString()).schema_version();
  const qint64 queued = queueForScreenshot(ws.databasePath.toStdString(), db::now_seconds());
  // The queue as written above (a serving window would weigh the entries again and reword them).
  QSettings(QStringLiteral("Flotilla"), QStringLiteral("Flotilla"))
      .setValue(QStringLiteral("queue/serve"), false);

  MainWindow w(ws);
  w.resize(1280, 800);
  w.show();
  QVERIFY(QTest::qWaitForWindowExposed(&w));
  // MainWindow builds these pages without the database path (see the Compare/Costs constructors).
  auto* compare = qobject_cast<ComparePage*>(w.page(MainWindow::Compare));
  auto* costs = qobject_cast<CostsPage*>(w.page(MainWindow::Costs));
  QVERIFY(compare && costs);
  if (compare->databasePath().isEmpty()) compare->setDatabasePath(ws.databasePath);
  if (costs->databasePath().isEmpty()) costs->setDatabasePath(ws.databasePath);

  const char* names[] = {"runs", "queue", "live", "compare", "chat", "nodes", "costs", "clusters", "settings"};
  for (int i = 0; i < MainWindow::PageCount; ++i) {
    w.showPage(i);
    if (i == MainWindow::Compare) {
      QTRY_VERIFY_WITH_TIMEOUT(compare->runModel()->rowCount() == 4 && !compare->busy(), 10000);
      compare->runModel()->setChecked(ids[0], true);
      compare->runModel()->setChecked(ids[1], true);
      QTRY_VERIFY_WITH_TIMEOUT(!compare->busy() && compare->plot()->curveCount() == 2, 10000);
      QVERIFY(compare->plot()->pointCount(0) > 100);
    }
    if (i == MainWindow::Queue) {
      auto* queue = qobject_cast<flotilla::ui::QueuePage*>(w.page(MainWindow::Queue));
      QVERIFY(queue);
      QTRY_VERIFY_WITH_TIMEOUT(queue->model()->rowCount() >= 3, 10000);
      queue->selectEntry(queued);
      QTRY_COMPARE_WITH_TIMEOUT(queue->selectedId(), queued, 10000);
    }
    if (i == MainWindow::Costs) {
      QTRY_VERIFY_WITH_TIMEOUT(!costs->busy() && costs->dayChart()->barCount() >= 3, 10000);
    }
    QTest::qWait(50);
    save(&w, QStringLiteral("view-%1").arg(QLatin1String(names[i])));
  }

  RunWizard wizard(w.machineProbe());
  wizard.resize(900, 700);
  wizard.show();
  QVERIFY(QTest::qWaitForWindowExposed(&wizard));
  for (int page = 0; page < RunWizard::PageCount; ++page) {
    QTest::qWait(50);
    save(&wizard, QStringLiteral("wizard-%1").arg(page + 1));
    if (page + 1 < RunWizard::PageCount) wizard.next();
  }
  wizard.reject();
}

void TestScreenshots::wizardFineTuningAHuggingFaceModel() {
  QTemporaryDir tmp;
  const QString model = tmp.filePath(QStringLiteral("SmolLM2-135M-Instruct"));
  QVERIFY(writeSmolLm2Folder(model));
  const QString tokenizers = QStringLiteral(FLOTILLA_SOURCE_DIR "/tests/engine/golden/tokenizers/smollm2/");
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    QVERIFY(QFile::copy(tokenizers + QLatin1String(f), model + QLatin1Char('/') + QLatin1String(f)));
  const QString chats = tmp.filePath(QStringLiteral("chats.jsonl"));
  QFile f(chats);
  QVERIFY(f.open(QIODevice::WriteOnly));
  f.write(chatRecords());
  f.close();

  RunWizard wizard;
  wizard.resize(900, 700);
  wizard.show();
  QVERIFY(QTest::qWaitForWindowExposed(&wizard));
  wizard.modelPage()->chooseHfFolder(model);
  QTRY_VERIFY_WITH_TIMEOUT(!wizard.modelPage()->isReadingFolder(), 10000);
  QTRY_VERIFY_WITH_TIMEOUT(wizard.modelPage()->isComplete(), 10000);
  QVERIFY2(wizard.modelPage()->parameterText().contains(QLocale().toString(134515008)),
           qPrintable(wizard.modelPage()->parameterText()));
  QTest::qWait(50);
  save(&wizard, QStringLiteral("wizard-1-hf-folder"));

  // A few chats: a batch reads one row, so the one-batch validation split is one row (issue 34).
  flotilla::RunConfig c = wizard.config();
  c.train.micro_batch = 1;
  c.train.global_batch_tokens = 0;
  wizard.setConfig(c);
  wizard.next();
  DataPage* data = wizard.dataPage();
  data->setMode(DataPage::Prepare);
  data->setPrepareInputs({chats}, QString(), tmp.filePath(QStringLiteral("data/sft")));
  data->startPrepare();
  QTRY_VERIFY_WITH_TIMEOUT(!data->isPreparing(), 30000);
  QVERIFY2(data->prepared().ok, qPrintable(data->prepareStatus()));
  QTRY_VERIFY_WITH_TIMEOUT(!data->isScanning() && data->isComplete(), 10000);
  QTest::qWait(50);
  save(&wizard, QStringLiteral("wizard-2-chat-data"));
  wizard.reject();
}

void TestScreenshots::wizardLoraOnTheModelPage() {
  QTemporaryDir tmp;
  const QString model = tmp.filePath(QStringLiteral("SmolLM2-135M-Instruct"));
  QVERIFY(writeSmolLm2Folder(model));
  RunWizard wizard;
  flotilla::ProbeResult machine;
  machine.cpu_model = "AMD Ryzen 9 7950X 16-Core Processor";
  machine.physical_cores = 16;
  machine.logical_cpus = 32;
  machine.memory_total_bytes = 64ull << 30;
  wizard.setMachine(machine);
  wizard.resize(900, 700);
  wizard.show();
  QVERIFY(QTest::qWaitForWindowExposed(&wizard));
  ModelPage* page = wizard.modelPage();
  page->chooseHfFolder(model);
  QTRY_VERIFY_WITH_TIMEOUT(!page->isReadingFolder(), 10000);
  QTRY_VERIFY_WITH_TIMEOUT(page->isComplete(), 10000);
  auto* lora = page->findChild<QAbstractButton*>(QStringLiteral("trainingLora"));
  QVERIFY(lora);
  lora->click();
  QVERIFY2(page->isComplete(), qPrintable(page->shownProblems().join(QLatin1Char('\n'))));
  // r 16 on all seven projections of 30 layers: 30 x 16 x 10,176 = 4,884,480 adapter parameters.
  QVERIFY2(page->trainableText().startsWith(QStringLiteral("4.88 M trainable, 3.6% of 135 M")),
           qPrintable(page->trainableText()));
  QVERIFY2(page->fitText().startsWith(QStringLiteral("Fits:")), qPrintable(page->fitText()));
  QTest::qWait(50);
  save(&wizard, QStringLiteral("wizard-1-lora"));

  // QLoRA: the same adapters over a 4-bit NF4 base, with what it trades in the planner's numbers.
  auto* qlora = page->findChild<QAbstractButton*>(QStringLiteral("trainingQlora"));
  QVERIFY(qlora);
  qlora->click();
  QVERIFY2(page->isComplete(), qPrintable(page->shownProblems().join(QLatin1Char('\n'))));
  QVERIFY2(page->fitText().startsWith(QStringLiteral("Fits:")), qPrintable(page->fitText()));
  QTest::qWait(50);
  save(&wizard, QStringLiteral("wizard-1-qlora"));
  lora->click();

  // Continuing a PEFT adapter: its r, alpha and projections shown read-only.
  const QString adapter = tmp.filePath(QStringLiteral("smollm2-adapter"));
  QVERIFY(QDir().mkpath(adapter));
  QFile config(adapter + QStringLiteral("/adapter_config.json"));
  QVERIFY(config.open(QIODevice::WriteOnly));
  config.write(QJsonDocument(QJsonObject{{QStringLiteral("peft_type"), QStringLiteral("LORA")},
                                         {QStringLiteral("task_type"), QStringLiteral("CAUSAL_LM")},
                                         {QStringLiteral("r"), 8},
                                         {QStringLiteral("lora_alpha"), 16},
                                         {QStringLiteral("target_modules"),
                                          QJsonArray{QStringLiteral("q_proj"), QStringLiteral("v_proj")}},
                                         {QStringLiteral("base_model_name_or_path"),
                                          QStringLiteral("HuggingFaceTB/SmolLM2-135M-Instruct")}})
                   .toJson());
  config.close();
  page->loraControls()->chooseAdapter(adapter);
  QTRY_VERIFY_WITH_TIMEOUT(!page->loraControls()->isReadingAdapter(), 10000);
  QVERIFY2(page->isComplete(), qPrintable(page->shownProblems().join(QLatin1Char('\n'))));
  QVERIFY2(page->trainableText().startsWith(QStringLiteral("461 k trainable")),
           qPrintable(page->trainableText()));
  QTest::qWait(50);
  save(&wizard, QStringLiteral("wizard-1-lora-adapter"));

  // The Checkpoints page of that LoRA run: the merged Hugging Face folder and the adapter at the end.
  QCOMPARE(wizard.advanceTo(RunWizard::Checkpoints), int(RunWizard::Checkpoints));
  for (const char* name : {"exportHf", "exportPeft"}) {
    auto* box = wizard.checkpointPage()->findChild<QAbstractButton*>(QLatin1String(name));
    QVERIFY(box);
    box->click();
  }
  QVERIFY2(wizard.checkpointPage()->isComplete(),
           qPrintable(wizard.checkpointPage()->shownProblems().join(QLatin1Char('\n'))));
  QTest::qWait(50);
  save(&wizard, QStringLiteral("wizard-5-lora-exports"));
  wizard.reject();
}

void TestScreenshots::wizardAModelByName() {
  QTemporaryDir tmp;
  const QString hub = tmp.filePath(QStringLiteral("hf/hub"));
  const QString smol = tmp.filePath(QStringLiteral("staging/smol"));
  QVERIFY(writeSmolLm2Folder(smol));
  const QString tokenizers = QStringLiteral(FLOTILLA_SOURCE_DIR "/tests/engine/golden/tokenizers/smollm2/");
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    QVERIFY(QFile::copy(tokenizers + QLatin1String(f), smol + QLatin1Char('/') + QLatin1String(f)));
  QVERIFY(wizard_helpers::addToHfCache(hub, QStringLiteral("HuggingFaceTB/SmolLM2-135M-Instruct"),
                                       QStringLiteral("12fd25f77366fa6b3b4b768ec3050bf629380bac"), smol));
  const QString smol360 = tmp.filePath(QStringLiteral("staging/smol360"));
  QVERIFY(wizard_helpers::writeSparseLlamaFolder(smol360, 32, 960, 2560, 15, 5, 49152, true));
  QVERIFY(wizard_helpers::addToHfCache(hub, QStringLiteral("HuggingFaceTB/SmolLM2-360M"),
                                       QStringLiteral("3ea9a4e9d4c4a8d39b7a8f1b7dbb3e2ec0b1d7a4"), smol360));
  const QString llama = tmp.filePath(QStringLiteral("staging/llama"));
  QVERIFY(wizard_helpers::writeSparseLlamaFolder(llama, 16, 2048, 8192, 32, 8, 128256, true));
  QVERIFY(wizard_helpers::addToHfCache(hub, QStringLiteral("meta-llama/Llama-3.2-1B-Instruct"),
                                       QStringLiteral("9213176726f574b556790deb65791e0c5aa438b6"), llama));
  // GPT-2: a shape of its size, and its own config.json (Flotilla trains GPT-2 from scratch only).
  const QString gpt2 = tmp.filePath(QStringLiteral("staging/gpt2"));
  QVERIFY(wizard_helpers::writeSparseLlamaFolder(gpt2, 12, 768, 3072, 12, 12, 50257, true));
  QVERIFY(wizard_helpers::writeFile(
      gpt2 + QStringLiteral("/config.json"),
      R"({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_layer": 12, "n_head": 12,
          "n_embd": 768, "vocab_size": 50257, "n_positions": 1024})"));
  QVERIFY(wizard_helpers::addToHfCache(hub, QStringLiteral("openai-community/gpt2"),
                                       QStringLiteral("607a30d783dfa663caf39e06633721c8d4cfcd7e"), gpt2));
  const QByteArray saved = qgetenv("HF_HUB_CACHE");
  qputenv("HF_HUB_CACHE", hub.toUtf8());

  RunWizard wizard;
  wizard.resize(900, 700);
  wizard.show();
  QVERIFY(QTest::qWaitForWindowExposed(&wizard));
  ModelPage* page = wizard.modelPage();
  page->setSource(ModelPage::HfName);
  HubPicker* picker = page->hubPicker();
  QTRY_VERIFY_WITH_TIMEOUT(!picker->isListing(), 20000);
  QVERIFY2(picker->listing().error.isEmpty(), qPrintable(picker->listing().error));
  QVERIFY(picker->pick(QStringLiteral("HuggingFaceTB/SmolLM2-135M-Instruct")));
  QTRY_VERIFY_WITH_TIMEOUT(!page->isReadingFolder(), 10000);
  QVERIFY2(page->parameterText().contains(QLocale().toString(134515008)), qPrintable(page->parameterText()));
  QTest::qWait(50);
  save(&wizard, QStringLiteral("wizard-1-hub"));

  // A model the cache lacks, downloading from the stand-in Hub (throttled so the bar stops half-way).
  flotilla_test::HubServer server;
  const QString golden = QStringLiteral(FLOTILLA_SOURCE_DIR "/tests/engine/golden/hf/qwen2/");
  for (const char* file : {"config.json", "generation_config.json", "model.safetensors"}) {
    QFile f(golden + QLatin1String(file));
    QVERIFY(f.open(QIODevice::ReadOnly));
    server.add_file("flotilla-test/tiny-qwen2", file, f.readAll().toStdString());
  }
  server.start();
  server.apply_env();
  server.control(R"({"throttle_bps": 12000})");
  page->setWorkerPath(QStringLiteral(FLOTILLA_WORKER_PATH));
  picker->nameEdit()->setText(QStringLiteral("flotilla-test/tiny-qwen2"));
  picker->startDownload();
  QTRY_VERIFY_WITH_TIMEOUT(picker->progressBar()->value() > 450, 20000);
  save(&wizard, QStringLiteral("wizard-1-hub-download"));
  picker->cancelDownload();
  QTRY_VERIFY_WITH_TIMEOUT(!picker->isDownloading(), 5000);
  qunsetenv("HF_ENDPOINT");
  qunsetenv("FLOTILLA_HF_CA_FILE");
  wizard.reject();
  if (saved.isEmpty())
    qunsetenv("HF_HUB_CACHE");
  else
    qputenv("HF_HUB_CACHE", saved);
}

QTEST_MAIN(TestScreenshots)
#include "test_screenshots.moc"
