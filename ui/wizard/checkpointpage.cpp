// Checkpoints & evaluation page (see checkpointpage.h).
#include "ui/wizard/checkpointpage.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSpinBox>

#include <algorithm>

#include "engine/config/eval_tasks.h"
#include "ui/wizard/configdraft.h"

namespace flotilla::ui {

CheckpointPage::CheckpointPage(ConfigDraft* configDraft, QWidget* parent)
    : WizardPageBase(configDraft, {QStringLiteral("checkpoint"), QStringLiteral("eval")}, parent),
      m_every(new QSpinBox(this)),
      m_keep(new QSpinBox(this)),
      m_final(new QCheckBox(tr("Save a checkpoint after the last step"), this)),
      m_resume(new QComboBox(this)),
      m_grace(new QDoubleSpinBox(this)),
      m_restarts(new QSpinBox(this)),
      m_evalEvery(new QSpinBox(this)),
      m_evalBatches(new QSpinBox(this)),
      m_sampleEvery(new QSpinBox(this)),
      m_sampleTokens(new QSpinBox(this)),
      m_summary(new QLabel(this)),
      m_export(new QCheckBox(tr("Export a Hugging Face folder at the end"), this)),
      m_exportRow(new QWidget(this)),
      m_exportDir(new QLineEdit(this)),
      m_exportDtype(new QComboBox(this)),
      m_exportNote(new QLabel(this)),
      m_exportPeft(new QCheckBox(tr("Export the LoRA adapter (PEFT) at the end"), this)),
      m_peftRow(new QWidget(this)),
      m_peftDir(new QLineEdit(this)),
      m_peftNote(new QLabel(this)),
      m_tasksRow(new QWidget(this)),
      m_tasks(new QLineEdit(this)),
      m_taskLimit(new QSpinBox(this)),
      m_keepBest(new QComboBox(this)) {
  setTitle(tr("Checkpoints & evaluation"));
  setSubTitle(
      tr("When the run saves its state (to resume, fork or export it) and measures validation loss."));
  m_every->setObjectName(QStringLiteral("checkpointEvery"));
  m_keep->setObjectName(QStringLiteral("keepLast"));
  m_evalEvery->setObjectName(QStringLiteral("evalEvery"));
  m_evalBatches->setObjectName(QStringLiteral("evalBatches"));
  m_summary->setObjectName(QStringLiteral("checkpointSummary"));
  m_summary->setWordWrap(true);
  m_export->setObjectName(QStringLiteral("exportHf"));
  m_exportDir->setObjectName(QStringLiteral("exportHfDir"));
  m_exportDtype->setObjectName(QStringLiteral("exportDtype"));
  m_exportNote->setObjectName(QStringLiteral("exportNote"));
  m_exportNote->setWordWrap(true);
  m_exportPeft->setObjectName(QStringLiteral("exportPeft"));
  m_peftDir->setObjectName(QStringLiteral("exportPeftDir"));
  m_peftNote->setObjectName(QStringLiteral("peftNote"));
  m_peftNote->setWordWrap(true);
  m_peftNote->setText(
      tr("Writes adapter_config.json and adapter_model.safetensors after the last step: "
         "PeftModel.from_pretrained(base, folder) loads it over the base model."));
  m_peftDir->setPlaceholderText(tr("a folder (a relative one is inside the run's folder)"));
  auto* choosePeft = new QPushButton(tr("Folder…"), this);
  auto* peftLayout = new QHBoxLayout(m_peftRow);
  peftLayout->setContentsMargins(0, 0, 0, 0);
  peftLayout->addWidget(m_peftDir, 1);
  peftLayout->addWidget(choosePeft);
  m_exportDir->setPlaceholderText(tr("a folder (a relative one is inside the run's folder)"));
  m_exportDtype->addItem(tr("source's dtype"), QStringLiteral("source"));
  m_exportDtype->addItem(tr("bf16 weights"), QStringLiteral("bf16"));
  m_exportDtype->addItem(tr("fp32 weights"), QStringLiteral("fp32"));
  m_exportDtype->setToolTip(
      tr("source's dtype: that of the model folder the run starts from (else fp32, the checkpoint's); "
         "bf16: half the size, as models are usually shared; fp32: the master weights exactly"));
  auto* chooseExport = new QPushButton(tr("Folder…"), this);
  auto* exportLayout = new QHBoxLayout(m_exportRow);
  exportLayout->setContentsMargins(0, 0, 0, 0);
  exportLayout->addWidget(m_exportDir, 1);
  exportLayout->addWidget(chooseExport);
  exportLayout->addWidget(m_exportDtype);
  for (QSpinBox* b : {m_every, m_evalEvery, m_sampleEvery}) {
    b->setRange(-1, 2'000'000'000);
    b->setGroupSeparatorShown(true);
  }
  // -1 is checkpoint.every = "auto" (kCheckpointEveryAuto): Daly's interval (docs/scheduling.md).
  m_every->setSpecialValueText(tr("auto"));
  m_every->setToolTip(
      tr("auto (below 0): the worker chooses the interval from the measured save time and the "
         "place's mean time between interruptions (Daly 2006)"));
  m_keep->setRange(0, 1000);
  m_evalBatches->setRange(0, 100000);
  m_sampleTokens->setRange(0, 100000);
  m_grace->setRange(0, 86400);
  m_grace->setSuffix(tr(" s"));
  m_restarts->setObjectName(QStringLiteral("maxRestarts"));
  m_restarts->setRange(0, 100);
  m_restarts->setToolTip(
      tr("When a rank crashes (killed, out of memory on one host, a lost peer), every rank restarts "
         "from the newest verified checkpoint, at most this many times (run.max_restarts). "
         "Preemptions do not count; config and data errors never restart."));
  m_resume->addItem(tr("from the newest verified checkpoint in the run folder (auto)"),
                    QStringLiteral("auto"));
  m_resume->addItem(tr("never: always start fresh (none)"), QStringLiteral("none"));

  // Evaluation tasks (docs/config.md "Evaluation tasks during training"; formats: docs/eval.md).
  m_tasks->setObjectName(QStringLiteral("evalTasks"));
  m_tasks->setPlaceholderText(tr("none (task files scored with the validation loss)"));
  m_tasks->setToolTip(
      tr("Task files scored every validation, split across the data-parallel ranks: entries separated by "
         "';', each [kind:]path[?option=value&...], e.g. resources/eval/arc-mini.jsonl or "
         "perplexity:wiki.txt?stride=128. Options: name, dev, fewshot, limit, stride, regex, max_tokens, "
         "batch. Scores are plotted on Live and stored as task/<task>/<score>."));
  auto* addTask = new QPushButton(tr("Add task file…"), this);
  addTask->setObjectName(QStringLiteral("addEvalTask"));
  auto* tasksLayout = new QHBoxLayout(m_tasksRow);
  tasksLayout->setContentsMargins(0, 0, 0, 0);
  tasksLayout->addWidget(m_tasks, 1);
  tasksLayout->addWidget(addTask);
  m_taskLimit->setObjectName(QStringLiteral("evalTaskLimit"));
  m_taskLimit->setRange(0, 100'000'000);
  m_taskLimit->setSpecialValueText(tr("all"));
  m_taskLimit->setToolTip(tr("Examples (perplexity: windows) of each task per evaluation; 0 = all"));
  m_keepBest->setObjectName(QStringLiteral("keepBest"));
  m_keepBest->setEditable(true);
  m_keepBest->addItem(QStringLiteral("auto"));
  m_keepBest->addItem(QStringLiteral("none"));
  m_keepBest->setToolTip(
      tr("The checkpoint with the best score so far is never purged by 'Keep the newest': auto = the first "
         "task's headline score (acc_norm, bits_per_byte or exact_match), none, or task/<task>/<score>"));

  QFormLayout* form = addForm();
  m_form = form;
  form->addRow(tr("Save every (steps; 0 = at the end)"), m_every);
  form->addRow(tr("Keep the newest"), m_keep);
  form->addRow(QString(), m_final);
  form->addRow(tr("On restart, resume"), m_resume);
  form->addRow(tr("Preemption grace"), m_grace);
  form->addRow(tr("Crash restarts"), m_restarts);
  form->addRow(tr("Validation every (steps; 0 = at the end)"), m_evalEvery);
  form->addRow(tr("Validation micro-batches"), m_evalBatches);
  form->addRow(tr("Text sample every (steps; 0 = off)"), m_sampleEvery);
  form->addRow(tr("Sample length (tokens)"), m_sampleTokens);
  form->addRow(tr("Evaluation tasks"), m_tasksRow);
  form->addRow(tr("Task examples per evaluation"), m_taskLimit);
  form->addRow(tr("Also keep the best checkpoint by"), m_keepBest);
  form->addRow(QString(), m_summary);
  form->addRow(QString(), m_export);
  form->addRow(tr("Hugging Face folder"), m_exportRow);
  form->addRow(QString(), m_exportNote);
  form->addRow(QString(), m_exportPeft);
  form->addRow(tr("Adapter folder"), m_peftRow);
  form->addRow(QString(), m_peftNote);
  bindField(QStringLiteral("checkpoint.every"), m_every);
  bindField(QStringLiteral("checkpoint.keep_last"), m_keep);
  bindField(QStringLiteral("checkpoint.save_final"), m_final);
  bindField(QStringLiteral("checkpoint.resume"), m_resume);
  bindField(QStringLiteral("checkpoint.preempt_grace_s"), m_grace);
  bindField(QStringLiteral("eval.every"), m_evalEvery);
  bindField(QStringLiteral("eval.batches"), m_evalBatches);
  bindField(QStringLiteral("eval.sample_every"), m_sampleEvery);
  bindField(QStringLiteral("eval.sample_tokens"), m_sampleTokens);
  bindField(QStringLiteral("checkpoint.export_hf"), m_exportRow);
  bindField(QStringLiteral("checkpoint.export_peft"), m_peftRow);
  bindField(QStringLiteral("eval.tasks"), m_tasksRow);
  bindField(QStringLiteral("eval.task_limit"), m_taskLimit);
  bindField(QStringLiteral("checkpoint.keep_best"), m_keepBest);

  for (QSpinBox* b : {m_every, m_keep, m_restarts, m_evalEvery, m_evalBatches, m_sampleEvery, m_sampleTokens})
    connect(b, &QSpinBox::valueChanged, this, &CheckpointPage::editValues);
  connect(m_final, &QCheckBox::toggled, this, &CheckpointPage::editValues);
  connect(m_tasks, &QLineEdit::textEdited, this, &CheckpointPage::editTasks);
  connect(m_taskLimit, &QSpinBox::valueChanged, this, &CheckpointPage::editTasks);
  connect(m_keepBest, &QComboBox::currentTextChanged, this, &CheckpointPage::editTasks);
  connect(addTask, &QPushButton::clicked, this, [this] {
    const QString f = QFileDialog::getOpenFileName(this, tr("Add an evaluation task"), QString(),
                                                   tr("Task files (*.jsonl *.txt);;All files (*)"));
    if (f.isEmpty()) return;
    const QString now = m_tasks->text().trimmed();
    m_tasks->setText(now.isEmpty() ? f : now + QStringLiteral("; ") + f);
    editTasks();
  });
  connect(m_resume, &QComboBox::currentIndexChanged, this, &CheckpointPage::editValues);
  connect(m_grace, &QDoubleSpinBox::valueChanged, this, &CheckpointPage::editValues);
  connect(m_export, &QCheckBox::toggled, this, [this](bool on) {
    if (loading()) return;
    // The run's own folder is where the worker runs: a relative path lands inside it.
    if (on && m_exportDir->text().trimmed().isEmpty()) m_exportDir->setText(QStringLiteral("hf"));
    editExport();
  });
  connect(m_exportDir, &QLineEdit::textEdited, this, &CheckpointPage::editExport);
  connect(m_exportDtype, &QComboBox::currentIndexChanged, this, &CheckpointPage::editExport);
  connect(m_exportPeft, &QCheckBox::toggled, this, [this](bool on) {
    if (loading()) return;
    if (on && m_peftDir->text().trimmed().isEmpty()) m_peftDir->setText(QStringLiteral("adapter"));
    editPeft();
  });
  connect(m_peftDir, &QLineEdit::textEdited, this, &CheckpointPage::editPeft);
  connect(choosePeft, &QPushButton::clicked, this, [this] {
    const QString d = QFileDialog::getExistingDirectory(this, tr("Export the adapter to"), m_peftDir->text());
    if (d.isEmpty()) return;
    m_peftDir->setText(d);
    editPeft();
  });
  connect(chooseExport, &QPushButton::clicked, this, [this] {
    const QString d = QFileDialog::getExistingDirectory(this, tr("Export the model to"), m_exportDir->text());
    if (d.isEmpty()) return;
    m_exportDir->setText(d);
    editExport();
  });
}

void CheckpointPage::editExport() {
  if (loading()) return;
  draft()->edit([this](RunConfig& c) {
    c.checkpoint.export_hf =
        m_export->isChecked() ? m_exportDir->text().trimmed().toStdString() : std::string();
    c.checkpoint.export_dtype = m_exportDtype->currentData().toString().toStdString();
  });
}

void CheckpointPage::editTasks() {
  if (loading()) return;
  draft()->edit([this](RunConfig& c) {
    c.eval.tasks = m_tasks->text().trimmed().toStdString();
    c.eval.task_limit = m_taskLimit->value();
    const QString keep = m_keepBest->currentText().trimmed();
    c.checkpoint.keep_best = keep.isEmpty() ? std::string("auto") : keep.toStdString();
  });
}

void CheckpointPage::editPeft() {
  if (loading()) return;
  draft()->edit([this](RunConfig& c) {
    c.checkpoint.export_peft =
        m_exportPeft->isChecked() ? m_peftDir->text().trimmed().toStdString() : std::string();
  });
}

QStringList CheckpointPage::extraProblems() const {
  QStringList out;
  if (m_export->isChecked() && m_exportDir->text().trimmed().isEmpty())
    out << tr("checkpoint.export_hf: choose the folder the Hugging Face model is written to.");
  if (m_exportPeft->isChecked() && m_peftDir->text().trimmed().isEmpty())
    out << tr("checkpoint.export_peft: choose the folder the adapter is written to.");
  return out;
}

void CheckpointPage::editValues() {
  if (loading()) return;
  draft()->edit([this](RunConfig& c) {
    c.checkpoint.every = m_every->value();
    c.checkpoint.keep_last = m_keep->value();
    c.checkpoint.save_final = m_final->isChecked();
    const QString resume = m_resume->currentData().toString();
    if (!resume.isEmpty()) c.checkpoint.resume = resume.toStdString();
    if (m_grace->value() !=
        QString::number(c.checkpoint.preempt_grace_s, 'f', m_grace->decimals()).toDouble())
      c.checkpoint.preempt_grace_s = m_grace->value();
    c.run.max_restarts = m_restarts->value();
    c.eval.every = m_evalEvery->value();
    c.eval.batches = m_evalBatches->value();
    c.eval.sample_every = m_sampleEvery->value();
    c.eval.sample_tokens = m_sampleTokens->value();
  });
}

void CheckpointPage::load() {
  const RunConfig& c = draft()->config();
  const auto clamp = [](int64_t v) { return static_cast<int>(std::min<int64_t>(v, 2'000'000'000)); };
  m_every->setValue(clamp(c.checkpoint.every));
  m_keep->setValue(c.checkpoint.keep_last);
  m_final->setChecked(c.checkpoint.save_final);
  const QString resume = QString::fromStdString(c.checkpoint.resume);
  if (m_resume->findData(resume) < 0) m_resume->addItem(tr("from %1").arg(resume), resume);
  m_resume->setCurrentIndex(m_resume->findData(resume));
  m_grace->setValue(c.checkpoint.preempt_grace_s);
  m_restarts->setValue(std::clamp(c.run.max_restarts, 0, 100));
  m_evalEvery->setValue(clamp(c.eval.every));
  m_evalBatches->setValue(c.eval.batches);
  m_sampleEvery->setValue(clamp(c.eval.sample_every));
  m_sampleTokens->setValue(c.eval.sample_tokens);
  m_export->setChecked(!c.checkpoint.export_hf.empty());
  if (!c.checkpoint.export_hf.empty()) m_exportDir->setText(QString::fromStdString(c.checkpoint.export_hf));
  m_exportDtype->setCurrentIndex(
      std::max(0, m_exportDtype->findData(QString::fromStdString(c.checkpoint.export_dtype))));
  m_tasks->setText(QString::fromStdString(c.eval.tasks));
  m_taskLimit->setValue(std::clamp(c.eval.task_limit, 0, 100'000'000));
  m_keepBest->setCurrentText(QString::fromStdString(c.checkpoint.keep_best));
  m_exportPeft->setChecked(!c.checkpoint.export_peft.empty());
  if (!c.checkpoint.export_peft.empty()) m_peftDir->setText(QString::fromStdString(c.checkpoint.export_peft));
}

void CheckpointPage::refreshDerived() {
  const RunConfig& c = draft()->config();
  const bool llama = c.model.arch == "llama";
  const bool lora = c.lora.enabled;
  m_export->setText(lora ? tr("Export a Hugging Face folder at the end (merged with the adapter)")
                         : tr("Export a Hugging Face folder at the end"));
  // Still set with LoRA off (the Model page changed since): shown so validate()'s problem sits under it.
  const bool peftShown = lora || !c.checkpoint.export_peft.empty();
  for (QWidget* w : {static_cast<QWidget*>(m_exportPeft), m_peftRow, static_cast<QWidget*>(m_peftNote)})
    m_form->setRowVisible(w, peftShown);
  m_peftRow->setEnabled(m_exportPeft->isChecked());
  // Still checked on a GPT-2 model (the model changed since): left enabled so it can be unticked.
  m_export->setEnabled(llama || m_export->isChecked());
  m_exportRow->setEnabled(llama && m_export->isChecked());
  if (!llama)
    m_exportNote->setText(
        tr("Only for Llama-family models (model.arch = \"llama\"): the folder is what transformers "
           "loads as LlamaForCausalLM, Qwen2ForCausalLM or Qwen3ForCausalLM. This GPT-2 model's weights "
           "are kept in the run's checkpoints (on the Runs page: its checkpoints folder). For terminal "
           "users: flotilla-worker export --format safetensors converts one."));
  else if (m_export->isChecked() && lora)
    m_exportNote->setText(tr(
        "After the last step: the base model with the adapter merged in (W + scale · B·A), as config.json, "
        "safetensors and tokenizer files, for AutoModelForCausalLM.from_pretrained."));
  else if (m_export->isChecked())
    m_exportNote->setText(
        c.model.init_from.empty()
            ? tr("After the last step the final checkpoint is written there as config.json and safetensors, "
                 "for "
                 "AutoModelForCausalLM.from_pretrained. The model has no Hugging Face folder, so no "
                 "tokenizer files "
                 "are copied: add your tokenizer's to the folder.")
            : tr("After the last step the final checkpoint is written there as config.json, safetensors and "
                 "the "
                 "model folder's tokenizer files, for AutoModelForCausalLM.from_pretrained."));
  else
    m_exportNote->setText(
        tr("Writes config.json, safetensors and the tokenizer files after the last step, for "
           "transformers' from_pretrained."));
  const bool autoEvery = c.checkpoint.every == kCheckpointEveryAuto;
  if (c.train.steps < 1 || (c.checkpoint.every < 0 && !autoEvery)) {
    m_summary->clear();
    return;
  }
  const int64_t saves =
      (c.checkpoint.every > 0 ? c.train.steps / c.checkpoint.every : 0) + (c.checkpoint.save_final ? 1 : 0);
  const QString saved = autoEvery    ? tr("checkpoints at Daly's interval, chosen while it runs")
                        : saves == 1 ? tr("about 1 checkpoint saved")
                                     : tr("about %1 checkpoints saved").arg(saves);
  const QString checkpoints =
      tr("Over %1 steps: %2, the newest %3 kept; ").arg(c.train.steps).arg(saved).arg(c.checkpoint.keep_last);
  // Shards without validation shards: no measurement at all (the worker skips it), said so with
  // where the choice was made; the fields are held while they can only be 0.
  // Evaluation tasks run at the same steps as the validation loss (and at the end).
  QString tasks;
  try {
    const size_t n = parse_eval_tasks(c.eval.tasks).size();
    if (n > 0)
      tasks = tr(" %n evaluation task(s) scored at the same steps (plotted on Live).", nullptr,
                 static_cast<int>(n));
  } catch (const std::exception&) {
    // the problem is shown under the field (validate())
  }
  const bool noValData = c.data.source == "shards" && c.data.val.empty();
  // Held while it can only be 0; evaluation tasks need no validation data, so with them it is free.
  const bool held =
      noValData && c.eval.every == 0 && c.eval.tasks.find_first_not_of(" ;") == std::string::npos;
  m_evalEvery->setEnabled(!held);
  m_evalBatches->setEnabled(!held);
  if (noValData) {
    m_summary->setText(checkpoints +
                       tr("no validation loss: the data has no validation split (Data page: "
                          "Validation split, or Validation shards).") +
                       tasks);
    return;
  }
  const int64_t evals = c.eval.every > 0 ? c.train.steps / c.eval.every : 1;
  m_summary->setText(checkpoints +
                     (c.eval.every <= 0 ? tr("validation loss once, after the last step.")
                      : evals == 1
                          ? tr("validation loss once, at step %1.").arg(c.eval.every)
                          : tr("validation loss %1 times, every %2 steps.").arg(evals).arg(c.eval.every)) +
                     tasks);
}

}  // namespace flotilla::ui
