// The Model page's LoRA rows (see loracontrols.h).
#include "ui/wizard/loracontrols.h"

#include <QButtonGroup>
#include <QCheckBox>
#include <QComboBox>
#include <QCoreApplication>
#include <QDir>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QLocale>
#include <QPushButton>
#include <QRadioButton>
#include <QSpinBox>
#include <QStandardItemModel>
#include <QtConcurrent/QtConcurrentRun>

#include <exception>
#include <optional>

#include "engine/config/config_validate.h"
#include "engine/model/lora.h"
#include "engine/model/model_dims.h"
#include "engine/plan/planner.h"
#include "ui/nodes/machinefacts.h"
#include "ui/wizard/configdraft.h"
#include "ui/wizard/wizardformat.h"

namespace flotilla::ui {
namespace {

QString tr(const char* text) { return QCoreApplication::translate("LoraControls", text); }

constexpr uint32_t kAllTargets = (1u << flotilla::kNumLoraTargets) - 1;
constexpr uint32_t kAttentionTargets =
    (1u << flotilla::kLoraQ) | (1u << flotilla::kLoraK) | (1u << flotilla::kLoraV) | (1u << flotilla::kLoraO);
constexpr uint32_t kMlpTargets =
    (1u << flotilla::kLoraGate) | (1u << flotilla::kLoraUp) | (1u << flotilla::kLoraDown);

// The projection's short name ("q" of q_proj, "gate" of gate_proj).
QString shortName(int target) {
  QString name = QString::fromLatin1(flotilla::lora_target_name(target));
  name.chop(5);  // "_proj"
  return name;
}

QString shortList(uint32_t targets) {
  QStringList names;
  for (int t = 0; t < flotilla::kNumLoraTargets; ++t)
    if ((targets >> t) & 1u) names << shortName(t);
  return names.join(QStringLiteral(", "));
}

// The set lora.targets names, or nullopt when it does not parse (validate() says why).
std::optional<uint32_t> parsedTargets(const std::string& text) {
  try {
    return flotilla::parse_lora_targets(text);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

QString number(double v) { return QLocale().toString(v, 'g', 6); }

// Widgets side by side in one form row.
QWidget* rowOf(QWidget* parent, std::initializer_list<QWidget*> widgets, bool stretch) {
  auto* row = new QWidget(parent);
  auto* layout = new QHBoxLayout(row);
  layout->setContentsMargins(0, 0, 0, 0);
  for (QWidget* w : widgets) layout->addWidget(w);
  if (stretch) layout->addStretch(1);
  return row;
}

}  // namespace

PeftAdapterInfo readPeftAdapter(const QString& folder) {
  PeftAdapterInfo info;
  info.folder = folder;
  try {
    info.config = flotilla::interop::read_peft_adapter_config(folder.toStdString());
    info.ok = true;
  } catch (const std::exception& e) {
    info.error = QString::fromUtf8(e.what());
  }
  return info;
}

std::string loraTargetsText(uint32_t targets) {
  if (targets == kAllTargets) return "all-linear";
  if (targets == kAttentionTargets) return "attention";
  if (targets == kMlpTargets) return "mlp";
  return flotilla::lora_targets_text(targets);
}

QString loraTargetsLabel(uint32_t targets) {
  if (targets == kAllTargets) return tr("All linear (%1)").arg(shortList(targets));
  if (targets == kAttentionTargets) return tr("Attention (%1)").arg(shortList(targets));
  return tr("Custom (%1)").arg(targets ? shortList(targets) : tr("none"));
}

QString loraScaleText(int rank, double alpha, bool rslora) {
  if (rank < 1) return tr("scale: — (the rank must be at least 1)");
  flotilla::LoraSpec spec;
  spec.rank = rank;
  spec.alpha = alpha;
  spec.rslora = rslora;
  const QString value = number(spec.scale());
  return rslora ? tr("scale α/√r = %1/√%2 = %3").arg(number(alpha)).arg(rank).arg(value)
                : tr("scale α/r = %1/%2 = %3").arg(number(alpha)).arg(rank).arg(value);
}

QString loraTrainableText(const flotilla::RunConfig& config) {
  if (!config.lora.enabled || config.lora.rank < 1 || config.model.n_layer < 1 || config.model.n_embd < 1)
    return {};
  try {
    const flotilla::ModelDims dims = flotilla::dims_from_config(config.model);
    const double adapters =
        static_cast<double>(flotilla::lora_parameter_count(dims, flotilla::lora_spec(config)));
    const double total = static_cast<double>(flotilla::count_parameters(dims).total);
    if (adapters <= 0 || total <= 0) return {};
    const double percent = 100.0 * adapters / total;
    return tr("%1 trainable, %2% of %3")
        .arg(formatCount(adapters), QLocale().toString(percent, 'f', percent < 1 ? 2 : 1),
             formatCount(total));
  } catch (const std::exception&) {
    return {};
  }
}

QString qloraTradeText(const flotilla::RunConfig& config) {
  if (!config.lora.enabled || config.lora.base_quant != "nf4") return {};
  if (!flotilla::validate(config, 0, flotilla::ValidateFor::kPlan).empty()) return {};
  try {
    // The same run over a base in the compute dtype, for the comparison.
    flotilla::RunConfig plain = config;
    plain.lora.base_quant = "none";
    const flotilla::DeviceProfile none;
    const flotilla::Plan q = flotilla::make_plan(config, none), l = flotilla::make_plan(plain, none);
    const QString bits = QLocale().toString(q.nf4_bits, 'f', 2);
    // Short lines, unwrapped, as the other rows of this form (a word-wrapped label was laid out taller).
    return tr("The frozen base's projections in 4-bit NormalFloat (NF4%1):\n"
              "%2 bits per parameter, so the base takes %3 instead of %4 per device.\n"
              "The price: slower matmuls (they dequantise the weights as they go), and a merged\n"
              "Hugging Face export comes from the quantised base, not from the original weights.")
        .arg(config.lora.double_quant ? tr(", double quantisation") : QString(), bits,
             formatBytes(q.peak().frozen_weights), formatBytes(l.peak().frozen_weights));
  } catch (const std::exception&) {
    return {};
  }
}

LoraControls::LoraControls(ConfigDraft* draft, QWidget* page)
    : QObject(page),
      m_draft(draft),
      m_page(page),
      m_training(new QButtonGroup(this)),
      m_full(new QRadioButton(tr("Full fine-tune"), page)),
      m_lora(new QRadioButton(tr("LoRA"), page)),
      m_qlora(new QRadioButton(tr("QLoRA (4-bit base)"), page)),
      m_qloraInfo(new QLabel(page)),
      m_unavailable(new QLabel(page)),
      m_rank(new QSpinBox(page)),
      m_alpha(new QDoubleSpinBox(page)),
      m_rslora(new QCheckBox(tr("rsLoRA"), page)),
      m_scale(new QLabel(page)),
      m_dropout(new QDoubleSpinBox(page)),
      m_targetPreset(new QComboBox(page)),
      m_adapterPath(new QLineEdit(page)),
      m_adapterInfo(new QLabel(page)) {
  m_full->setObjectName(QStringLiteral("trainingFull"));
  m_lora->setObjectName(QStringLiteral("trainingLora"));
  m_qlora->setObjectName(QStringLiteral("trainingQlora"));
  m_qloraInfo->setObjectName(QStringLiteral("qloraInfo"));
  m_unavailable->setObjectName(QStringLiteral("loraUnavailable"));
  m_rank->setObjectName(QStringLiteral("loraRank"));
  m_alpha->setObjectName(QStringLiteral("loraAlpha"));
  m_rslora->setObjectName(QStringLiteral("loraRslora"));
  m_scale->setObjectName(QStringLiteral("loraScale"));
  m_dropout->setObjectName(QStringLiteral("loraDropout"));
  m_targetPreset->setObjectName(QStringLiteral("loraTargets"));
  m_adapterPath->setObjectName(QStringLiteral("loraInitFrom"));
  m_adapterInfo->setObjectName(QStringLiteral("loraAdapterInfo"));
  m_unavailable->setToolTip(
      tr("A named size or custom dimensions start from random weights, which LoRA cannot adapt: choose "
         "\"Hugging Face folder\" above to fine-tune with LoRA."));
  m_training->addButton(m_full, 0);
  m_training->addButton(m_lora, 1);
  m_training->addButton(m_qlora, 2);
  m_qlora->setToolTip(
      tr("QLoRA (Dettmers et al. 2023): LoRA adapters over a frozen base quantised to 4-bit NormalFloat "
         "(lora.base_quant = \"nf4\", bit-compatible with bitsandbytes), about 4.1 bits per base parameter "
         "instead of 16 or 32. Fits far larger models; the matmuls are slower."));
  m_lora->setToolTip(
      tr("Low-rank adapters (Hu et al. 2021): the model's weights stay frozen and small matrices B·A "
         "beside the chosen projections are trained. Needs far less memory for gradients and AdamW state."));
  // Short lines, unwrapped: a word-wrapped label in these rows was laid out a few lines taller than
  // its text (its height asked for a narrower width than the form gives it), leaving gaps around it.
  for (QLabel* l : {m_unavailable, m_adapterInfo, m_qloraInfo})
    l->setTextInteractionFlags(Qt::TextSelectableByMouse);
  // Ranges admit invalid values on purpose: validate() explains them better than a clamp would.
  m_rank->setRange(0, 65536);
  m_rank->setToolTip(tr("The adapters' rank r (lora.rank): typical 8 to 64"));
  m_alpha->setRange(0, 1e6);
  m_alpha->setDecimals(2);
  m_alpha->setToolTip(tr("The scaling numerator (lora.alpha): the adapters' update is scaled by alpha / r"));
  m_rslora->setToolTip(
      tr("Rank-stabilised LoRA (lora.use_rslora): scale by alpha / √r instead of alpha / r"));
  m_dropout->setRange(0, 1);
  m_dropout->setDecimals(2);
  m_dropout->setSingleStep(0.05);
  m_dropout->setToolTip(tr("Dropout on the adapters' input while training (lora.dropout)"));
  m_targetPreset->addItem(tr("All linear (q, k, v, o, gate, up, down)"), QStringLiteral("all-linear"));
  m_targetPreset->addItem(tr("Attention (q, k, v, o)"), QStringLiteral("attention"));
  m_targetPreset->addItem(tr("Custom"), QStringLiteral("custom"));
  // Custom is what the boxes say, never a choice of its own.
  if (auto* model = qobject_cast<QStandardItemModel*>(m_targetPreset->model()))
    model->item(2)->setFlags(model->item(2)->flags() & ~Qt::ItemIsEnabled);
  QList<QWidget*> targetWidgets{m_targetPreset};
  for (int t = 0; t < flotilla::kNumLoraTargets; ++t) {
    auto* box = new QCheckBox(shortName(t), page);
    box->setObjectName(QStringLiteral("loraTarget-%1").arg(QLatin1String(flotilla::lora_target_name(t))));
    box->setToolTip(QLatin1String(flotilla::lora_target_name(t)));
    m_targets << box;
  }
  m_adapterPath->setPlaceholderText(
      tr("optional: a PEFT adapter folder (adapter_config.json) to continue training"));

  m_trainingRow = rowOf(page, {m_full, m_lora, m_qlora}, true);
  m_adaptersRow = rowOf(
      page, {new QLabel(tr("rank"), page), m_rank, new QLabel(tr("alpha"), page), m_alpha, m_rslora, m_scale},
      true);
  auto* targetsRow = new QWidget(page);
  auto* targetsLayout = new QHBoxLayout(targetsRow);
  targetsLayout->setContentsMargins(0, 0, 0, 0);
  targetsLayout->addWidget(m_targetPreset);
  for (QCheckBox* box : m_targets) targetsLayout->addWidget(box);
  targetsLayout->addStretch(1);
  m_targetsRow = targetsRow;
  m_dropoutRow = rowOf(page, {m_dropout}, true);  // a number: as wide as the rank's
  auto* browse = new QPushButton(tr("Browse…"), page);
  browse->setObjectName(QStringLiteral("loraBrowse"));
  m_adapterRow = new QWidget(page);
  auto* adapterLayout = new QHBoxLayout(m_adapterRow);
  adapterLayout->setContentsMargins(0, 0, 0, 0);
  adapterLayout->addWidget(m_adapterPath, 1);
  adapterLayout->addWidget(browse);

  connect(&m_watcher, &QFutureWatcher<PeftAdapterInfo>::finished, this, &LoraControls::onRead);
  connect(m_training, &QButtonGroup::idClicked, this, [this](int id) { setMethod(id); });
  connect(m_rank, &QSpinBox::valueChanged, this, [this](int v) {
    if (!m_loading) m_draft->edit([&](RunConfig& c) { c.lora.rank = v; });
  });
  connect(m_alpha, &QDoubleSpinBox::valueChanged, this, [this](double v) {
    if (!m_loading) m_draft->edit([&](RunConfig& c) { c.lora.alpha = v; });
  });
  connect(m_rslora, &QCheckBox::toggled, this, [this](bool on) {
    if (!m_loading) m_draft->edit([&](RunConfig& c) { c.lora.use_rslora = on; });
  });
  connect(m_dropout, &QDoubleSpinBox::valueChanged, this, [this](double v) {
    if (!m_loading) m_draft->edit([&](RunConfig& c) { c.lora.dropout = v; });
  });
  connect(m_targetPreset, &QComboBox::activated, this, [this](int index) {
    const QString preset = m_targetPreset->itemData(index).toString();
    if (preset == QLatin1String("all-linear")) editTargets(kAllTargets);
    if (preset == QLatin1String("attention")) editTargets(kAttentionTargets);
  });
  for (QCheckBox* box : m_targets)
    connect(box, &QCheckBox::toggled, this, [this] {
      if (!m_loading) editTargets(checkedTargets());
    });
  connect(browse, &QPushButton::clicked, this, [this] {
    const QString dir =
        QFileDialog::getExistingDirectory(m_page, tr("PEFT adapter folder"), m_adapterPath->text());
    if (!dir.isEmpty()) chooseAdapter(dir);
  });
  connect(m_adapterPath, &QLineEdit::editingFinished, this, [this] {
    const QString text = m_adapterPath->text().trimmed();
    if (text != QString::fromStdString(m_draft->config().lora.init_from)) chooseAdapter(text);
  });
}

LoraControls::~LoraControls() { m_watcher.waitForFinished(); }

void LoraControls::addRows(QFormLayout* form) {
  m_form = form;
  form->addRow(tr("Training"), m_trainingRow);
  form->addRow(QString(), m_unavailable);
  form->addRow(QString(), m_qloraInfo);
  form->addRow(tr("Adapters"), m_adaptersRow);
  form->addRow(tr("Adapter dropout"), m_dropoutRow);
  form->addRow(tr("Adapted projections"), m_targetsRow);
  form->addRow(tr("Continue from"), m_adapterRow);
  form->addRow(QString(), m_adapterInfo);
}

QList<QPair<QString, QWidget*>> LoraControls::fields() const {
  return {{QStringLiteral("lora.enabled"), m_trainingRow},
          {QStringLiteral("lora.base_quant"), m_trainingRow},
          {QStringLiteral("lora.double_quant"), m_trainingRow},
          {QStringLiteral("lora.rank"), m_rank},
          {QStringLiteral("lora.alpha"), m_alpha},
          {QStringLiteral("lora.use_rslora"), m_rslora},
          {QStringLiteral("lora.dropout"), m_dropout},
          {QStringLiteral("lora.targets"), m_targetsRow},
          {QStringLiteral("lora.init_from"), m_adapterRow}};
}

void LoraControls::setMethod(int method) {
  if (m_loading) return;
  const bool on = method != 0;
  const QString kept = m_adapterPath->text().trimmed();
  m_draft->edit([&](RunConfig& c) {
    c.lora.enabled = on;
    // QLoRA is LoRA over a 4-bit base; validate() refuses a quantised base without LoRA.
    c.lora.base_quant = method == 2 ? "nf4" : "none";
    if (method == 2) c.lora.double_quant = true;  // QLoRA's 4.127 bits (else 4.5)
    // An adapter only applies under LoRA (validate refuses one without it); its path stays in the
    // field and comes back with LoRA, as a Hugging Face folder does with its choice.
    if (!on) {
      // Full training: the adapters' settings are not this choice's inputs (issue 34 item 13), so
      // they go back to the defaults instead of riding along in the config and Compare.
      const flotilla::LoraSection defaults;
      c.lora.init_from.clear();
      c.lora.rank = defaults.rank;
      c.lora.alpha = defaults.alpha;
      c.lora.dropout = defaults.dropout;
      c.lora.use_rslora = defaults.use_rslora;
      c.lora.targets = defaults.targets;
      c.lora.double_quant = defaults.double_quant;
    } else if (c.lora.init_from.empty()) {
      c.lora.init_from = kept.toStdString();
    }
  });
  if (on) startRead();
}

void LoraControls::editTargets(uint32_t targets) {
  m_draft->edit([&](RunConfig& c) { c.lora.targets = loraTargetsText(targets); });
  showTargets(targets);
}

uint32_t LoraControls::checkedTargets() const {
  uint32_t bits = 0;
  for (int t = 0; t < m_targets.size(); ++t)
    if (m_targets[t]->isChecked()) bits |= 1u << t;
  return bits;
}

void LoraControls::showTargets(uint32_t targets) {
  const bool was = m_loading;
  m_loading = true;
  for (int t = 0; t < m_targets.size(); ++t) m_targets[t]->setChecked((targets >> t) & 1u);
  const QString preset = targets == kAllTargets         ? QStringLiteral("all-linear")
                         : targets == kAttentionTargets ? QStringLiteral("attention")
                                                        : QStringLiteral("custom");
  m_targetPreset->setCurrentIndex(m_targetPreset->findData(preset));
  m_loading = was;
}

void LoraControls::chooseAdapter(const QString& folder) {
  const QString path =
      folder.trimmed().isEmpty() ? QString() : QFileInfo(folder.trimmed()).absoluteFilePath();
  m_adapterPath->setText(path);
  m_draft->edit([&](RunConfig& c) {
    c.lora.init_from = path.toStdString();
    if (!path.isEmpty()) c.lora.enabled = true;
  });
  startRead();
  emit reloadRequested();
}

void LoraControls::startRead() {
  const QString folder = QString::fromStdString(m_draft->config().lora.init_from);
  // onRead() reads again when the choice moved on meanwhile; validate() names a folder without one.
  if (m_reading || folder.isEmpty() ||
      !QFileInfo::exists(QDir(folder).filePath(QStringLiteral("adapter_config.json"))))
    return;
  m_reading = true;
  m_watcher.setFuture(QtConcurrent::run([folder] { return readPeftAdapter(folder); }));
}

void LoraControls::onRead() {
  m_reading = false;
  const PeftAdapterInfo info = m_watcher.result();
  if (info.folder != QString::fromStdString(m_draft->config().lora.init_from)) {
    startRead();
    emit recheckRequested();
    return;
  }
  m_adapter = info;
  if (!info.ok) {
    emit recheckRequested();
    return;
  }
  // What the worker's apply_lora_init_from sets, so the plan and the TOML are the run's.
  m_draft->edit([&](RunConfig& c) {
    c.lora.rank = info.config.r;
    c.lora.alpha = info.config.lora_alpha;
    c.lora.use_rslora = info.config.use_rslora;
    c.lora.targets = loraTargetsText(info.config.targets);
  });
  emit reloadRequested();
}

bool LoraControls::adapterApplied() const {
  const RunConfig& c = m_draft->config();
  return !c.lora.init_from.empty() && !m_reading && m_adapter.ok &&
         m_adapter.folder == QString::fromStdString(c.lora.init_from);
}

void LoraControls::showValues() {
  const bool was = m_loading;
  m_loading = true;
  const flotilla::LoraSection& l = m_draft->config().lora;
  m_full->setChecked(!l.enabled);
  m_lora->setChecked(l.enabled && l.base_quant != "nf4");
  m_qlora->setChecked(l.enabled && l.base_quant == "nf4");
  m_rank->setValue(l.rank);
  m_alpha->setValue(l.alpha);
  m_rslora->setChecked(l.use_rslora);
  m_dropout->setValue(l.dropout);
  if (const std::optional<uint32_t> targets = parsedTargets(l.targets)) showTargets(*targets);
  m_loading = was;
}

void LoraControls::load() {
  showValues();
  const flotilla::LoraSection& l = m_draft->config().lora;
  if (l.enabled || !l.init_from.empty()) m_adapterPath->setText(QString::fromStdString(l.init_from));
  if (!l.init_from.empty() && m_adapter.folder != QString::fromStdString(l.init_from)) startRead();
}

void LoraControls::refresh(bool hfFolder) {
  // Another page may have changed [lora] (Recommend applies a LoRA candidate): show the draft's.
  showValues();
  const RunConfig& c = m_draft->config();
  const bool on = c.lora.enabled;
  m_full->setText(hfFolder || on ? tr("Full fine-tune") : tr("Full training"));
  // Off without a folder, unless the draft has LoRA on: then it stays to be turned off (never a dead end).
  m_lora->setEnabled(hfFolder || on);
  m_qlora->setEnabled(hfFolder || on);
  m_unavailable->setText(unavailableText());
  m_form->setRowVisible(m_unavailable, !hfFolder);
  m_qloraInfo->setText(qloraTradeText(c));
  m_form->setRowVisible(m_qloraInfo, !m_qloraInfo->text().isEmpty());
  for (QWidget* row : {m_adaptersRow, m_dropoutRow, m_targetsRow, m_adapterRow})
    m_form->setRowVisible(row, on);
  const bool fromAdapter = adapterApplied();
  for (QWidget* w : std::initializer_list<QWidget*>{m_rank, m_alpha, m_rslora, m_targetPreset})
    w->setEnabled(!fromAdapter);
  for (QCheckBox* box : m_targets) box->setEnabled(!fromAdapter);
  m_scale->setText(scaleText());
  const QList<QPair<QString, QString>> rows = adapterRows();
  m_adapterInfo->setText(rows.isEmpty() ? adapterText() : summaryTable(rows, faintText(m_page->palette())));
  m_form->setRowVisible(m_adapterInfo, on && !m_adapterInfo->text().isEmpty());
}

QString LoraControls::unavailableText() const {
  return tr(
      "LoRA needs a Hugging Face folder (model.init_from): it trains adapters on pretrained, frozen "
      "weights.");
}

QString LoraControls::scaleText() const {
  const flotilla::LoraSection& l = m_draft->config().lora;
  return loraScaleText(l.rank, l.alpha, l.use_rslora);
}

QList<QPair<QString, QString>> LoraControls::adapterRows() const {
  const QString folder = QString::fromStdString(m_draft->config().lora.init_from);
  if (folder.isEmpty() || m_reading || m_adapter.folder != folder || !m_adapter.ok) return {};
  const flotilla::interop::PeftAdapterConfig& a = m_adapter.config;
  QList<QPair<QString, QString>> rows;
  rows.append({tr("This adapter"), tr("r %1, alpha %2%3: %4")
                                       .arg(a.r)
                                       .arg(number(a.lora_alpha), a.use_rslora ? tr(", rsLoRA") : QString(),
                                            loraScaleText(a.r, a.lora_alpha, a.use_rslora))});
  rows.append({tr("Projections"), loraTargetsLabel(a.targets)});
  if (!a.base_model_name_or_path.empty())  // a local path can be long: its middle goes
    rows.append(
        {tr("Trained on"), m_adapterInfo->fontMetrics().elidedText(
                               QString::fromStdString(a.base_model_name_or_path), Qt::ElideMiddle, 420)});
  rows.append({tr("Continues"), tr("from its weights, with its rank, alpha and projections")});
  return rows;
}

QString LoraControls::adapterText() const {
  const QString folder = QString::fromStdString(m_draft->config().lora.init_from);
  if (folder.isEmpty()) return {};
  if (m_reading || m_adapter.folder != folder) return tr("Reading %1…").arg(folder);
  QStringList lines;
  for (const auto& [heading, text] : adapterRows())
    lines << (heading.isEmpty() ? text : heading + QStringLiteral(": ") + text);
  return lines.join(QLatin1Char('\n'));  // empty when refused: the problem under the field says why
}

QStringList LoraControls::problems() const {
  const RunConfig& c = m_draft->config();
  const QString folder = QString::fromStdString(c.lora.init_from);
  if (!c.lora.enabled || folder.isEmpty()) return {};
  const bool readable = QFileInfo::exists(QDir(folder).filePath(QStringLiteral("adapter_config.json")));
  if (m_reading || (readable && m_adapter.folder != folder)) return {tr("Reading the PEFT adapter…")};
  return {};
}

QList<WizardPageBase::FieldProblem> LoraControls::fieldProblems() const {
  const QString folder = QString::fromStdString(m_draft->config().lora.init_from);
  if (folder.isEmpty() || m_reading || m_adapter.folder != folder || m_adapter.ok) return {};
  return {{QStringLiteral("lora.init_from"), QStringLiteral("lora.init_from: ") + m_adapter.error}};
}

}  // namespace flotilla::ui
