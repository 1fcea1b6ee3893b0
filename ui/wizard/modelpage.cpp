// Model page (see modelpage.h).
#include "ui/wizard/modelpage.h"

#include <QComboBox>
#include <QFormLayout>
#include <QLabel>
#include <QLineEdit>
#include <QLocale>
#include <QSpinBox>

#include "engine/config/config_io.h"
#include "engine/config/presets.h"
#include "engine/model/gpt.h"
#include "engine/plan/planner.h"
#include "ui/wizard/configdraft.h"
#include "ui/wizard/templates.h"
#include "ui/wizard/wizardformat.h"

namespace flotilla::ui {

ModelPage::ModelPage(ConfigDraft* configDraft, TemplateStore* templates, QWidget* parent)
    : WizardPageBase(configDraft, {QStringLiteral("run.name"), QStringLiteral("run.seed"), QStringLiteral("model")}, parent),
      m_templates(templates),
      m_template(new QComboBox(this)),
      m_name(new QLineEdit(this)),
      m_preset(new QComboBox(this)),
      m_layers(new QSpinBox(this)),
      m_heads(new QSpinBox(this)),
      m_width(new QSpinBox(this)),
      m_vocab(new QSpinBox(this)),
      m_maxSeq(new QSpinBox(this)),
      m_params(new QLabel(this)) {
  setTitle(tr("Model"));
  setSubTitle(tr("Start from a template, name the run and choose the model's size."));
  m_template->setObjectName(QStringLiteral("template"));
  m_name->setObjectName(QStringLiteral("runName"));
  m_preset->setObjectName(QStringLiteral("preset"));
  m_layers->setObjectName(QStringLiteral("nLayer"));
  m_heads->setObjectName(QStringLiteral("nHead"));
  m_width->setObjectName(QStringLiteral("nEmbd"));
  m_vocab->setObjectName(QStringLiteral("vocabSize"));
  m_maxSeq->setObjectName(QStringLiteral("maxSeqLen"));
  m_params->setObjectName(QStringLiteral("parameterCount"));

  for (const auto& p : flotilla::model_presets())
    m_preset->addItem(tr("%1 — %2").arg(QLatin1String(p.name), QString::fromUtf8(p.description)),
                      QString::fromLatin1(p.name));
  m_preset->addItem(tr("custom — your own layers, heads and width"), QStringLiteral("custom"));
  // Ranges admit invalid values on purpose: validate() explains them better than a clamp would.
  m_layers->setRange(0, 256);
  m_heads->setRange(0, 256);
  m_width->setRange(0, 32768);
  m_width->setSingleStep(64);
  m_vocab->setRange(0, 1 << 20);
  m_maxSeq->setRange(0, 1 << 17);
  m_vocab->setGroupSeparatorShown(true);
  QFont big = m_params->font();
  big.setBold(true);
  m_params->setFont(big);

  QFormLayout* form = addForm();
  form->addRow(tr("Start from"), m_template);
  form->addRow(tr("Run name"), m_name);
  form->addRow(tr("Size"), m_preset);
  form->addRow(tr("Layers"), m_layers);
  form->addRow(tr("Attention heads"), m_heads);
  form->addRow(tr("Width (n_embd)"), m_width);
  form->addRow(tr("Vocabulary"), m_vocab);
  form->addRow(tr("Context (max_seq_len)"), m_maxSeq);
  form->addRow(tr("Parameters"), m_params);
  reloadTemplates();

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
  for (QSpinBox* box : {m_layers, m_heads, m_width})
    connect(box, &QSpinBox::valueChanged, this, &ModelPage::editDims);
  connect(m_vocab, &QSpinBox::valueChanged, this, [this](int v) {
    if (!loading()) draft()->edit([&](RunConfig& c) { c.model.vocab_size = v; });
  });
  connect(m_maxSeq, &QSpinBox::valueChanged, this, [this](int v) {
    if (!loading()) draft()->edit([&](RunConfig& c) { c.model.max_seq_len = v; });
  });
}

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
  draft()->replace(config);
}

void ModelPage::editDims() {
  if (loading()) return;
  draft()->edit([this](RunConfig& c) {
    c.model.n_layer = m_layers->value();
    c.model.n_head = m_heads->value();
    c.model.n_embd = m_width->value();
    // Dimensions that differ from the preset make the model custom (as the config file reads).
    const auto p = flotilla::find_model_preset(c.model.preset);
    if (p && (p->shape.n_layer != c.model.n_layer || p->shape.n_head != c.model.n_head ||
              p->shape.n_embd != c.model.n_embd))
      c.model.preset = "custom";
  });
  const QSignalBlocker block(m_preset);
  m_preset->setCurrentIndex(m_preset->findData(QString::fromStdString(draft()->config().model.preset)));
}

void ModelPage::load() {
  const RunConfig& c = draft()->config();
  m_name->setText(QString::fromStdString(c.run.name));
  const int preset = m_preset->findData(QString::fromStdString(c.model.preset));
  m_preset->setCurrentIndex(preset >= 0 ? preset : m_preset->count() - 1);
  m_layers->setValue(c.model.n_layer);
  m_heads->setValue(c.model.n_head);
  m_width->setValue(c.model.n_embd);
  m_vocab->setValue(c.model.vocab_size);
  m_maxSeq->setValue(c.model.max_seq_len);
}

QString ModelPage::parameterText() const { return m_params->text(); }

void ModelPage::refreshDerived() {
  if (!draft()->problemsUnder({QStringLiteral("model")}).isEmpty() || draft()->config().model.n_layer < 1 ||
      draft()->config().model.n_embd < 1) {
    m_params->setText(tr("— (fix the model's numbers below)"));
    return;
  }
  const flotilla::ParamCounts n = flotilla::count_parameters(flotilla::dims_from_config(draft()->config().model));
  m_params->setText(tr("%1 (%2 parameters; %3 in the embeddings)")
                        .arg(formatCount(static_cast<double>(n.total)),
                             QLocale().toString(static_cast<qulonglong>(n.total)),
                             formatCount(static_cast<double>(n.embedding))));
}

}  // namespace flotilla::ui
