// Model page (see modelpage.h).
#include "ui/wizard/modelpage.h"

#include <QButtonGroup>
#include <QCheckBox>
#include <QColor>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QLocale>
#include <QPalette>
#include <QPushButton>
#include <QRadioButton>
#include <QSpinBox>
#include <QtConcurrent/QtConcurrentRun>

#include "engine/config/config_io.h"
#include "engine/config/presets.h"
#include "engine/interop/hf_model.h"
#include "engine/interop/hub.h"
#include "engine/model/gpt.h"
#include "engine/plan/planner.h"
#include "ui/wizard/configdraft.h"
#include "ui/wizard/hubpicker.h"
#include "ui/wizard/loracontrols.h"
#include "ui/wizard/modelfit.h"
#include "ui/wizard/templates.h"
#include "ui/wizard/wizardformat.h"

namespace flotilla::ui {
namespace {

// The shape keys of two model sections agree (vocabulary, context, init_from and the name aside).
bool sameShape(const flotilla::ModelSection& a, const flotilla::ModelSection& b) {
  return a.arch == b.arch && a.n_layer == b.n_layer && a.n_head == b.n_head && a.n_embd == b.n_embd &&
         a.n_kv_head == b.n_kv_head && a.head_dim == b.head_dim && a.ffn_dim == b.ffn_dim &&
         a.norm_eps == b.norm_eps && a.tie_embeddings == b.tie_embeddings && a.qkv_bias == b.qkv_bias &&
         a.qk_norm == b.qk_norm && a.rope_theta == b.rope_theta && a.rope_scaling == b.rope_scaling &&
         a.rope_factor == b.rope_factor && a.rope_low_freq_factor == b.rope_low_freq_factor &&
         a.rope_high_freq_factor == b.rope_high_freq_factor &&
         a.rope_original_max_position == b.rope_original_max_position;
}

// A folder's summary rows; a name's start with where it was found.
QList<QPair<QString, QString>> hubRows(const HfFolderInfo& info) {
  QList<QPair<QString, QString>> rows = describeHfFolder(info);
  if (!info.commit.isEmpty())
    rows.prepend({ModelPage::tr("Snapshot"),
                  ModelPage::tr("commit %1 in the Hugging Face cache; the run pins this commit")
                      .arg(info.commit.left(7))});
  return rows;
}

QString archLabel(const std::string& arch) {
  return arch == "llama" ? ModelPage::tr("Llama family") : ModelPage::tr("GPT-2");
}

// A line edit with a button beside it.
QWidget* withButton(QLineEdit* edit, QPushButton* button, QWidget* parent) {
  auto* row = new QWidget(parent);
  auto* layout = new QHBoxLayout(row);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addWidget(edit, 1);
  layout->addWidget(button);
  return row;
}

}  // namespace

ModelPage::ModelPage(ConfigDraft* configDraft, TemplateStore* templates, QWidget* parent)
    : WizardPageBase(configDraft,
                     {QStringLiteral("run.name"), QStringLiteral("run.seed"), QStringLiteral("model"),
                      QStringLiteral("lora")},
                     parent),
      m_templates(templates),
      m_sources(new QButtonGroup(this)),
      m_template(new QComboBox(this)),
      m_name(new QLineEdit(this)),
      m_preset(new QComboBox(this)),
      m_arch(new QComboBox(this)),
      m_layers(new QSpinBox(this)),
      m_heads(new QSpinBox(this)),
      m_width(new QSpinBox(this)),
      m_kvHeads(new QSpinBox(this)),
      m_headDim(new QSpinBox(this)),
      m_ffn(new QSpinBox(this)),
      m_llamaFlags(new QWidget(this)),
      m_tied(new QCheckBox(tr("LM head tied to the embedding"), this)),
      m_qkvBias(new QCheckBox(tr("q/k/v biases (Qwen 2)"), this)),
      m_qkNorm(new QCheckBox(tr("q/k RMSNorm (Qwen 3)"), this)),
      m_ropeTheta(new QDoubleSpinBox(this)),
      m_vocab(new QSpinBox(this)),
      m_maxSeq(new QSpinBox(this)),
      m_hfRow(nullptr),
      m_hfPath(new QLineEdit(this)),
      m_hfInfo(new QLabel(this)),
      m_hub(new HubPicker(this)),
      m_loraControls(new LoraControls(configDraft, this)),
      m_params(new QLabel(this)),
      m_trainable(new QLabel(this)),
      m_fit(new QLabel(this)) {
  setTitle(tr("Model"));
  setSubTitle(
      tr("Start from a template, name the run and choose the model: a named size, your own dimensions, "
         "or a Hugging Face model (a folder, or by name from the cache or the Hub) to continue training, "
         "fully or with LoRA adapters."));
  m_template->setObjectName(QStringLiteral("template"));
  m_name->setObjectName(QStringLiteral("runName"));
  m_preset->setObjectName(QStringLiteral("preset"));
  m_arch->setObjectName(QStringLiteral("arch"));
  m_layers->setObjectName(QStringLiteral("nLayer"));
  m_heads->setObjectName(QStringLiteral("nHead"));
  m_width->setObjectName(QStringLiteral("nEmbd"));
  m_kvHeads->setObjectName(QStringLiteral("nKvHead"));
  m_headDim->setObjectName(QStringLiteral("headDim"));
  m_ffn->setObjectName(QStringLiteral("ffnDim"));
  m_tied->setObjectName(QStringLiteral("tieEmbeddings"));
  m_qkvBias->setObjectName(QStringLiteral("qkvBias"));
  m_qkNorm->setObjectName(QStringLiteral("qkNorm"));
  m_ropeTheta->setObjectName(QStringLiteral("ropeTheta"));
  m_vocab->setObjectName(QStringLiteral("vocabSize"));
  m_maxSeq->setObjectName(QStringLiteral("maxSeqLen"));
  m_hfPath->setObjectName(QStringLiteral("hfFolder"));
  m_hfInfo->setObjectName(QStringLiteral("hfInfo"));
  m_params->setObjectName(QStringLiteral("parameterCount"));
  m_trainable->setObjectName(QStringLiteral("trainableCount"));
  m_fit->setObjectName(QStringLiteral("fitText"));

  auto* sourceRow = new QWidget(this);
  auto* sourceLayout = new QHBoxLayout(sourceRow);
  sourceLayout->setContentsMargins(0, 0, 0, 0);
  const char* sourceNames[] = {"preset", "custom", "hf", "hub"};
  const QString sourceLabels[] = {tr("A named size"), tr("Custom dimensions"), tr("Hugging Face folder"),
                                  tr("Hugging Face by name")};
  for (int i = 0; i < 4; ++i) {
    auto* radio = new QRadioButton(sourceLabels[i], sourceRow);
    radio->setObjectName(QStringLiteral("modelSource-%1").arg(QLatin1String(sourceNames[i])));
    m_sources->addButton(radio, i);
    sourceLayout->addWidget(radio);
  }
  sourceLayout->addStretch();

  for (const auto& p : flotilla::model_presets()) {
    // The architecture, unless the description already names it ("GPT-2 small", "Llama architecture").
    const QString description = QString::fromUtf8(p.description);
    const bool named =
        description.contains(QLatin1String("GPT-2")) || description.contains(QLatin1String("Llama"));
    m_preset->addItem(
        tr("%1 — %2").arg(QLatin1String(p.name),
                          named ? description : archLabel(p.shape.arch) + tr(": ") + description),
        QString::fromLatin1(p.name));
  }
  m_preset->addItem(tr("custom — your own layers, heads and width"), QStringLiteral("custom"));
  m_arch->addItem(tr("GPT-2 (learned positions, LayerNorm, GELU MLP, tied head)"), QStringLiteral("gpt2"));
  m_arch->addItem(tr("Llama family (RoPE, RMSNorm, SwiGLU MLP, grouped-query attention)"),
                  QStringLiteral("llama"));
  // Ranges admit invalid values on purpose: validate() explains them better than a clamp would.
  m_layers->setRange(0, 256);
  m_heads->setRange(0, 256);
  m_width->setRange(0, 32768);
  m_width->setSingleStep(64);
  m_kvHeads->setRange(0, 256);
  m_kvHeads->setSpecialValueText(tr("as many as the heads"));
  m_headDim->setRange(0, 4096);
  m_headDim->setSpecialValueText(tr("width / heads"));
  m_ffn->setRange(0, 1 << 20);
  m_ffn->setSingleStep(64);
  m_ffn->setSpecialValueText(tr("4 × width"));
  m_ffn->setGroupSeparatorShown(true);
  m_ropeTheta->setRange(0, 1e9);
  m_ropeTheta->setDecimals(1);
  m_ropeTheta->setSingleStep(10000);
  m_ropeTheta->setGroupSeparatorShown(true);
  m_vocab->setRange(0, 1 << 20);
  m_maxSeq->setRange(0, 1 << 20);
  m_vocab->setGroupSeparatorShown(true);
  m_maxSeq->setGroupSeparatorShown(true);
  // What each shape field means and what it changes (issue 34 item 27): the config key, the rule
  // it must follow, and its effect on size and speed.
  m_layers->setToolTip(
      tr("Transformer blocks (model.n_layer). Parameters and time per step grow in "
         "proportion; pipeline parallelism (pp) splits them into stages."));
  m_heads->setToolTip(
      tr("Attention heads (model.n_head). Must divide the width; tensor parallelism "
         "(tp) splits them, so tp must divide them too."));
  m_width->setToolTip(
      tr("Hidden size (model.n_embd): the width of every token's vector. Parameters "
         "grow with its square."));
  m_kvHeads->setToolTip(
      tr("Key/value heads (model.n_kv_head, grouped-query attention). Fewer than the "
         "attention heads shrinks the K/V projections and cache; must divide the "
         "attention heads. \"as many as the heads\" (0) is ordinary multi-head attention."));
  m_headDim->setToolTip(
      tr("Width of one attention head (model.head_dim). 0 takes width / heads; "
         "Qwen 3 and some Llama models set it apart from that."));
  m_ffn->setToolTip(
      tr("Inner width of the feed-forward block (model.ffn_dim): SwiGLU's gate/up "
         "projections for Llama-family models, the MLP's hidden layer for GPT-2. 0 takes "
         "4 × width. Usually the largest share of the parameters."));
  m_ropeTheta->setToolTip(
      tr("Base of the rotary position embedding (model.rope_theta). Larger values "
         "suit longer contexts (Llama 3: 500,000; Qwen 2: 1,000,000). A fine-tune "
         "keeps its base model's value."));
  m_tied->setToolTip(
      tr("Use the token embedding as the output layer's weights (model.tie_embeddings): "
         "fewer parameters, common in small models."));
  m_qkvBias->setToolTip(
      tr("Add a bias to the query, key and value projections (model.qkv_bias), as "
         "Qwen 2 / 2.5 do."));
  m_qkNorm->setToolTip(
      tr("RMS-normalise each head's queries and keys before attention "
         "(model.qk_norm), as Qwen 3 does."));
  m_vocab->setToolTip(
      tr("Token ids the model has embeddings for (model.vocab_size). Must cover every id "
         "the data's tokenizer produces; rounded up to a multiple of 128 inside."));
  m_maxSeq->setToolTip(
      tr("The longest sequence the model is built for (model.max_seq_len); "
         "train.seq_len may not exceed it."));
  auto* flags = new QHBoxLayout(m_llamaFlags);
  flags->setContentsMargins(0, 0, 0, 0);
  for (QCheckBox* box : {m_tied, m_qkvBias, m_qkNorm}) flags->addWidget(box);
  flags->addStretch();
  m_hfPath->setPlaceholderText(tr("a folder with config.json and safetensors weights"));
  auto* browse = new QPushButton(tr("Browse…"), this);
  browse->setObjectName(QStringLiteral("hfBrowse"));
  m_hfRow = withButton(m_hfPath, browse, this);
  for (QLabel* l : {m_hfInfo, m_fit}) {
    l->setWordWrap(true);
    l->setTextInteractionFlags(Qt::TextSelectableByMouse);
  }
  QFont big = m_params->font();
  big.setBold(true);
  m_params->setFont(big);

  QFormLayout* form = addForm();
  m_form = form;
  form->addRow(tr("Start from"), m_template);
  form->addRow(tr("Run name"), m_name);
  form->addRow(tr("Model"), sourceRow);
  form->addRow(tr("Size"), m_preset);
  form->addRow(tr("Architecture"), m_arch);
  form->addRow(tr("Layers"), m_layers);
  form->addRow(tr("Attention heads"), m_heads);
  form->addRow(tr("Width (n_embd)"), m_width);
  form->addRow(tr("K/V heads"), m_kvHeads);
  form->addRow(tr("Head width (head_dim)"), m_headDim);
  form->addRow(tr("FFN width"), m_ffn);
  form->addRow(QString(), m_llamaFlags);
  form->addRow(tr("RoPE theta"), m_ropeTheta);
  form->addRow(tr("Vocabulary"), m_vocab);
  form->addRow(tr("Context (max_seq_len)"), m_maxSeq);
  form->addRow(tr("Folder"), m_hfRow);
  m_hub->addRows(form);
  form->addRow(QString(), m_hfInfo);
  m_loraControls->addRows(form);
  form->addRow(tr("Parameters"), m_params);
  form->addRow(tr("Trainable"), m_trainable);
  form->addRow(tr("What fits"), m_fit);
  bindField(QStringLiteral("run.name"), m_name);
  bindField(QStringLiteral("model.arch"), m_arch);
  bindField(QStringLiteral("model.n_layer"), m_layers);
  bindField(QStringLiteral("model.n_head"), m_heads);
  bindField(QStringLiteral("model.n_embd"), m_width);
  bindField(QStringLiteral("model.n_kv_head"), m_kvHeads);
  bindField(QStringLiteral("model.head_dim"), m_headDim);
  bindField(QStringLiteral("model.ffn_dim"), m_ffn);
  bindField(QStringLiteral("model.rope_theta"), m_ropeTheta);
  bindField(QStringLiteral("model.vocab_size"), m_vocab);
  bindField(QStringLiteral("model.max_seq_len"), m_maxSeq);
  bindField(QStringLiteral("model.init_from"), m_hfRow);
  for (const auto& [path, widget] : m_loraControls->fields()) bindField(path, widget);
  reloadTemplates();

  connect(&m_watcher, &QFutureWatcher<HfFolderInfo>::finished, this, &ModelPage::onRead);
  connect(m_hub, &HubPicker::chosen, this, &ModelPage::chooseHfName);
  connect(m_hub, &HubPicker::stateChanged, this, [this] {
    recheck();
    emit modelStateChanged();
  });
  connect(m_loraControls, &LoraControls::reloadRequested, this, &ModelPage::reload);
  connect(m_loraControls, &LoraControls::recheckRequested, this, &ModelPage::recheck);
  connect(m_sources, &QButtonGroup::idClicked, this, [this](int id) { setSource(static_cast<Source>(id)); });
  connect(m_template, &QComboBox::activated, this, &ModelPage::applyTemplate);
  connect(m_name, &QLineEdit::textEdited, this, [this](const QString& text) {
    draft()->edit([&](RunConfig& c) { c.run.name = text.toStdString(); });
  });
  connect(m_preset, &QComboBox::currentIndexChanged, this, [this] {
    if (loading()) return;
    const std::string name = m_preset->currentData().toString().toStdString();
    draft()->edit([&](RunConfig& c) { flotilla::apply_model_preset(c, name); });
    reload();
  });
  connect(m_arch, &QComboBox::currentIndexChanged, this, &ModelPage::editArch);
  for (QSpinBox* box : {m_layers, m_heads, m_width, m_kvHeads, m_headDim, m_ffn})
    connect(box, &QSpinBox::valueChanged, this, &ModelPage::editDims);
  for (QCheckBox* box : {m_tied, m_qkvBias, m_qkNorm})
    connect(box, &QCheckBox::toggled, this, &ModelPage::editDims);
  connect(m_ropeTheta, &QDoubleSpinBox::valueChanged, this, &ModelPage::editDims);
  connect(m_vocab, &QSpinBox::valueChanged, this, [this](int v) {
    if (!loading()) draft()->edit([&](RunConfig& c) { c.model.vocab_size = v; });
  });
  connect(m_maxSeq, &QSpinBox::valueChanged, this, [this](int v) {
    if (!loading()) draft()->edit([&](RunConfig& c) { c.model.max_seq_len = v; });
  });
  connect(browse, &QPushButton::clicked, this, [this] {
    const QString dir =
        QFileDialog::getExistingDirectory(this, tr("Hugging Face model folder"), m_hfPath->text());
    if (!dir.isEmpty()) chooseHfFolder(dir);
  });
  connect(m_hfPath, &QLineEdit::editingFinished, this, [this] {
    const QString text = m_hfPath->text().trimmed();
    if (text != QString::fromStdString(draft()->config().model.init_from)) chooseHfFolder(text);
  });
}

ModelPage::~ModelPage() { m_watcher.waitForFinished(); }

void ModelPage::reloadTemplates() {
  const QString current = m_template->currentData().toString();
  m_template->clear();
  for (const RunTemplate& t : m_templates->list()) m_template->addItem(t.description, t.name);
  const int at = m_template->findData(current);
  m_template->setCurrentIndex(at >= 0 ? at : 0);
}

void ModelPage::applyTemplate(int index) {
  const QList<RunTemplate> all = m_templates->list();
  if (index < 0 || index >= all.size()) return;
  RunConfig config;
  QString error;
  if (!TemplateStore::load(all[index], &config, &error)) {
    m_templateError = tr("Template %1 does not load: %2").arg(all[index].name, error);
    recheck();
    return;
  }
  m_templateError.clear();
  m_source = Named;  // load() decides from the template's model
  draft()->replace(config);
}

void ModelPage::setSource(Source source) {
  m_source = source;
  if (source == HfName) m_hub->refreshCache();  // another tool may have downloaded since
  if (source == HfFolder) {
    const QString path = m_hfPath->text().trimmed();
    if (!path.isEmpty()) {
      chooseHfFolder(path);
      return;
    }
    draft()->edit([&](RunConfig& c) {  // a name chosen before is not a folder
      if (flotilla::interop::hub::is_model_ref(c.model.init_from)) c.model.init_from.clear();
    });
  } else if (source == HfName) {
    const QString name = m_hub->nameEdit()->text().trimmed();
    if (!name.isEmpty() && m_hub->nameProblem().isEmpty()) {
      chooseHfName(name);
      return;
    }
    draft()->edit([&](RunConfig& c) {
      if (initFromIsFolder(c.model.init_from)) c.model.init_from.clear();
    });
  } else {
    draft()->edit([&](RunConfig& c) {
      if (initFromIsFolder(c.model.init_from)) c.model.init_from.clear();
      if (source == Custom) {
        c.model.preset = "custom";
      } else if (c.model.preset == "custom") {
        const QString shown = m_preset->currentData().toString();
        flotilla::apply_model_preset(c, shown == QLatin1String("custom") ? "tiny" : shown.toStdString());
      }
    });
  }
  reload();
}

void ModelPage::chooseHfFolder(const QString& folder) {
  m_source = HfFolder;
  const QString path =
      folder.trimmed().isEmpty() ? QString() : QFileInfo(folder.trimmed()).absoluteFilePath();
  m_hfPath->setText(path);
  draft()->edit([&](RunConfig& c) {
    c.model.init_from = path.toStdString();
    if (!path.isEmpty()) {
      // A folder holds a Llama-family model (or is refused): the worker reads its shape from config.json.
      c.model.arch = "llama";
      c.model.preset = "custom";
    }
  });
  startRead();
  reload();
}

void ModelPage::chooseHfName(const QString& name) {
  m_source = HfName;
  const QString text = name.trimmed();
  m_hub->showChosen(text);
  draft()->edit([&](RunConfig& c) {
    c.model.init_from = text.toStdString();
    if (!text.isEmpty()) {
      c.model.arch = "llama";
      c.model.preset = "custom";
    }
  });
  startRead();
  reload();
  emit modelStateChanged();
}

void ModelPage::setWorkerPath(const QString& path) { m_hub->setWorkerPath(path); }

void ModelPage::startRead() {
  const std::string path = draft()->config().model.init_from;
  // onRead() reads again when it is stale.
  if (m_reading || !(flotilla::interop::is_hf_folder(path) || flotilla::interop::hub::is_model_ref(path)))
    return;
  m_reading = true;
  const QString folder = QString::fromStdString(path);
  m_watcher.setFuture(QtConcurrent::run([folder] { return readHfFolder(folder); }));
}

void ModelPage::onRead() {
  m_reading = false;
  const HfFolderInfo info = m_watcher.result();
  const QString now = QString::fromStdString(draft()->config().model.init_from);
  if (!hfSource() || info.folder != now) {  // the choice moved on while it was read
    startRead();
    recheck();
    return;
  }
  m_info = info;
  emit modelStateChanged();
  if (!info.ok) {
    recheck();
    return;
  }
  draft()->edit([&](RunConfig& c) { c.model = info.model; });
  reload();
}

void ModelPage::editArch() {
  if (loading()) return;
  const std::string arch = m_arch->currentData().toString().toStdString();
  draft()->edit([&](RunConfig& c) {
    if (c.model.arch == arch) return;
    flotilla::ModelSection fresh;  // GPT-2 has no use for the Llama keys: back to their defaults
    if (arch == "gpt2") {
      fresh.n_layer = c.model.n_layer;
      fresh.n_head = c.model.n_head;
      fresh.n_embd = c.model.n_embd;
      fresh.vocab_size = c.model.vocab_size;
      fresh.max_seq_len = c.model.max_seq_len;
      fresh.init_from = c.model.init_from;
      c.model = fresh;
    }
    c.model.arch = arch;
    c.model.preset = "custom";
  });
  m_source = Custom;
  reload();
}

void ModelPage::editDims() {
  if (loading()) return;
  draft()->edit([this](RunConfig& c) {
    c.model.n_layer = m_layers->value();
    c.model.n_head = m_heads->value();
    c.model.n_embd = m_width->value();
    if (c.model.arch == "llama") {
      c.model.n_kv_head = m_kvHeads->value();
      c.model.head_dim = m_headDim->value();
      c.model.ffn_dim = m_ffn->value();
      c.model.tie_embeddings = m_tied->isChecked();
      c.model.qkv_bias = m_qkvBias->isChecked();
      c.model.qk_norm = m_qkNorm->isChecked();
      c.model.rope_theta = m_ropeTheta->value();
    }
    // Dimensions that differ from the preset make the model custom (as the config file reads).
    if (c.model.preset != "custom") {
      RunConfig preset = c;
      flotilla::apply_model_preset(preset, c.model.preset);
      if (!sameShape(preset.model, c.model)) c.model.preset = "custom";
    }
  });
  if (draft()->config().model.preset == "custom" && m_source == Named) {
    m_source = Custom;
    if (QAbstractButton* b = m_sources->button(m_source)) b->setChecked(true);
    updateRows();
  }
  const QSignalBlocker block(m_preset);
  m_preset->setCurrentIndex(m_preset->findData(QString::fromStdString(draft()->config().model.preset)));
}

void ModelPage::updateRows() {
  const bool hf = hfSource();
  const bool llama = draft()->config().model.arch == "llama";
  m_form->setRowVisible(m_preset, m_source == Named);
  for (QWidget* w : std::initializer_list<QWidget*>{m_arch, m_layers, m_heads, m_width, m_vocab, m_maxSeq})
    m_form->setRowVisible(w, !hf);
  for (QWidget* w : std::initializer_list<QWidget*>{m_kvHeads, m_headDim, m_ffn, m_llamaFlags, m_ropeTheta})
    m_form->setRowVisible(w, !hf && llama);
  m_form->setRowVisible(m_hfRow, m_source == HfFolder);
  m_form->setRowVisible(m_hfInfo, hf);
  m_hub->setRowsVisible(m_source == HfName);
}

void ModelPage::load() {
  const RunConfig& c = draft()->config();
  const flotilla::ModelSection& m = c.model;
  m_name->setText(QString::fromStdString(c.run.name));
  if (initFromIsFolder(m.init_from) && flotilla::interop::hub::is_model_ref(m.init_from)) {
    const QString name = QString::fromStdString(m.init_from);
    if (m_source != HfName) m_hub->refreshCache();
    m_source = HfName;
    m_hub->showChosen(name);
    if (m_info.folder != name) startRead();
  } else if (initFromIsFolder(m.init_from)) {
    m_source = HfFolder;
    m_hfPath->setText(QString::fromStdString(m.init_from));
    if (m_info.folder != m_hfPath->text()) startRead();
  } else if (!(m_source == HfFolder && m.init_from.empty() && m_hfPath->text().isEmpty()) &&
             !(m_source == HfName && m.init_from.empty())) {
    m_source = m.preset == "custom" ? Custom : Named;
  }
  if (QAbstractButton* b = m_sources->button(m_source)) b->setChecked(true);
  const int preset = m_preset->findData(QString::fromStdString(m.preset));
  m_preset->setCurrentIndex(preset >= 0 ? preset : m_preset->count() - 1);
  m_arch->setCurrentIndex(std::max(0, m_arch->findData(QString::fromStdString(m.arch))));
  m_layers->setValue(m.n_layer);
  m_heads->setValue(m.n_head);
  m_width->setValue(m.n_embd);
  m_kvHeads->setValue(m.n_kv_head);
  m_headDim->setValue(m.head_dim);
  m_ffn->setValue(m.ffn_dim);
  m_tied->setChecked(m.tie_embeddings);
  m_qkvBias->setChecked(m.qkv_bias);
  m_qkNorm->setChecked(m.qk_norm);
  m_ropeTheta->setValue(m.rope_theta);
  m_vocab->setValue(m.vocab_size);
  m_maxSeq->setValue(m.max_seq_len);
  m_loraControls->load();
  updateRows();
}

QString ModelPage::parameterText() const { return m_params->text(); }
QString ModelPage::trainableText() const { return m_trainable->text(); }
QString ModelPage::fitText() const { return m_fit->text(); }
QString ModelPage::hfSummary() const {
  QStringList lines;
  if (m_info.ok)
    for (const auto& [heading, text] : hubRows(m_info)) lines << heading + QStringLiteral(": ") + text;
  return lines.join(QLatin1Char('\n'));
}

QStringList ModelPage::extraProblems() const {
  QStringList out;
  if (!m_templateError.isEmpty()) out << m_templateError;
  out << m_loraControls->problems();
  if (!hfSource()) return out;
  const std::string& path = draft()->config().model.init_from;
  const QString folder = QString::fromStdString(path);
  if (m_source == HfName) {
    if (const QString blocker = launchBlocker(); !blocker.isEmpty())
      out << blocker;
    else if (path.empty())
      out << tr("model.init_from: pick a model in the table, or type its name (org/name) and download it.");
    else if (m_reading || m_info.folder != folder)
      out << tr("Reading %1 from the Hugging Face cache…").arg(folder);
    else if (!m_info.ok)
      out << QStringLiteral("model.init_from: ") + m_info.error;
    return out;
  }
  if (path.empty())
    out << tr(
        "model.init_from: choose a Hugging Face model folder (config.json and safetensors weights), or "
        "another way to choose the model.");
  else if (m_reading || (flotilla::interop::is_hf_folder(path) && m_info.folder != folder))
    out << tr("Reading the Hugging Face folder…");
  else if (m_info.folder == folder && !m_info.ok)
    out << QStringLiteral("model.init_from: ") + m_info.error;
  return out;
}

QList<WizardPageBase::FieldProblem> ModelPage::extraFieldProblems() const {
  return m_loraControls->fieldProblems();
}

void ModelPage::refreshDerived() {
  emit modelStateChanged();  // the Review page's model line follows every change
  const RunConfig& c = draft()->config();
  const QString folder = QString::fromStdString(c.model.init_from);
  const bool hf = hfSource();
  m_loraControls->refresh(hf);
  const bool folderKnown = m_info.ok && m_info.folder == folder && !m_reading;
  if (m_source == HfName) {
    if (folderKnown)
      m_hfInfo->setText(summaryTable(hubRows(m_info), faintText(palette())));
    else if (m_reading)
      m_hfInfo->setText(tr("Reading %1…").arg(folder));
    else
      m_hfInfo->clear();
  } else if (hf) {
    if (folder.isEmpty())
      m_hfInfo->setText(
          tr("Choose a model folder as downloaded from the Hugging Face Hub (config.json, "
             "safetensors weights, tokenizer.json): Llama 3.x, Qwen 2 / 2.5 / 3, SmolLM2, Mistral."));
    else if (folderKnown)
      m_hfInfo->setText(summaryTable(describeHfFolder(m_info), faintText(palette())));
    else if (m_reading)
      m_hfInfo->setText(tr("Reading %1…").arg(folder));
    else
      m_hfInfo->clear();  // the problem below says why
  }
  if ((hf && !folderKnown) || !draft()->problemsUnder({QStringLiteral("model")}).isEmpty() ||
      c.model.n_layer < 1 || c.model.n_embd < 1) {
    const QString where = whereToFix({QStringLiteral("model")});
    if (!launchBlocker().isEmpty())
      m_params->setText(tr("— (known once the download ends)"));
    else
      m_params->setText(where.isEmpty() ? tr("—") : tr("— (%1)").arg(where));
    m_trainable->setText(tr("—"));
    m_fit->setText(tr("—"));
    return;
  }
  const flotilla::ParamCounts n = flotilla::count_parameters(flotilla::dims_from_config(c.model));
  m_params->setText(tr("%1 (%2 parameters; %3 in the embeddings)")
                        .arg(formatCount(static_cast<double>(n.total)),
                             QLocale().toString(static_cast<qulonglong>(n.total)),
                             formatCount(static_cast<double>(n.embedding))));
  if (c.lora.enabled) {
    const QString trainable = loraTrainableText(c);
    m_trainable->setText(trainable.isEmpty() ? tr("— (fix the LoRA settings above)")
                                             : trainable + tr(" (the adapters; the model stays frozen)"));
  } else {
    m_trainable->setText(
        tr("All %1 (full %2)")
            .arg(formatCount(static_cast<double>(n.total)), hf ? tr("fine-tuning") : tr("training")));
  }
  const FitCheck fit = checkFit(c, draft()->target(), draft()->ranks());
  const int ranks = draft()->ranks();
  m_fit->setText(fit.text + QLatin1Char('\n') +
                 tr("Planned for: %1, %2, %3 (the Hardware page changes them).")
                     .arg(draft()->target().label, ranks == 1 ? tr("1 rank") : tr("%1 ranks").arg(ranks),
                          QString::fromStdString(c.train.dtype)));
}

QString ModelPage::modelNote() const {
  const QString name = QString::fromStdString(draft()->config().model.init_from);
  if (m_source != HfName || name.isEmpty()) return QString();
  if (m_info.ok && m_info.folder == name && !m_info.commit.isEmpty())
    return tr("Model: %1 from the Hugging Face cache, commit %2 (the run pins it when it starts).")
        .arg(name, m_info.commit.left(7));
  return tr("Model: %1 from the Hugging Face cache.").arg(name);
}

QString ModelPage::launchBlocker() const {
  const std::string& path = draft()->config().model.init_from;
  if (!m_hub->isDownloading() || path.empty()) return QString();
  try {
    const auto ref = flotilla::interop::hub::parse_model_ref(path, "model.init_from");
    if (QString::fromStdString(ref.repo_id) != m_hub->downloadingRepo()) return QString();
  } catch (const std::exception&) {
    return QString();
  }
  return tr("Downloading %1: the run can start once the download ends.").arg(QString::fromStdString(path));
}

}  // namespace flotilla::ui
