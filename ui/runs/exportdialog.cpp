// The Export dialog (see exportdialog.h).
#include "ui/runs/exportdialog.h"

#include <QComboBox>
#include <QDialogButtonBox>
#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QVBoxLayout>

#include "runs/export_args.h"

namespace flotilla::ui {

namespace {

QString suffixOf(const ExportRun& run, const QString& format) {
  if (format == QLatin1String("peft")) return QStringLiteral("-adapter");
  if (format == QLatin1String("safetensors")) return QStringLiteral("-gpt2");
  return run.lora ? QStringLiteral("-merged-hf") : QStringLiteral("-hf");
}

}  // namespace

QStringList exportWorkerArgs(const ExportRun& run, const ExportRequest& r, const QString& checkpointDir) {
  runs::ExportRequest request;  // the same builder as `flotilla runs export-model`
  request.checkpoint = checkpointDir.toStdString();
  request.format = r.format.toStdString();
  request.out = r.folder.toStdString();
  request.dtype = r.dtype.toStdString();
  if (run.llama) request.tokenizer = run.tokenizer.toStdString();
  QStringList args;
  for (const std::string& a : runs::export_worker_args(request)) args << QString::fromStdString(a);
  return args;
}

ExportDialog::ExportDialog(const ExportRun& run, const QString& format, QWidget* parent)
    : QDialog(parent),
      m_run(run),
      m_format(new QComboBox(this)),
      m_checkpoint(new QComboBox(this)),
      m_dtype(new QComboBox(this)),
      m_fixedDtype(new QLabel(this)),
      m_folder(new QLineEdit(this)),
      m_note(new QLabel(this)) {
  setObjectName(QStringLiteral("exportDialog"));
  setWindowTitle(tr("Export %1").arg(run.name));
  auto* layout = new QVBoxLayout(this);
  auto* form = new QFormLayout;

  m_format->setObjectName(QStringLiteral("format"));
  if (run.lora) {
    m_format->addItem(tr("PEFT adapter (small; PeftModel.from_pretrained(base, folder))"),
                      QStringLiteral("peft"));
    m_format->addItem(run.qlora
                          ? tr("Hugging Face folder: the adapter merged into its base (dequantised from NF4)")
                          : tr("Hugging Face folder: the adapter merged into its base"),
                      QStringLiteral("hf"));
  } else if (run.llama) {
    m_format->addItem(tr("Hugging Face folder (AutoModelForCausalLM.from_pretrained)"), QStringLiteral("hf"));
  } else {
    m_format->addItem(tr("GPT-2 safetensors and config.json (GPT2LMHeadModel.from_pretrained)"),
                      QStringLiteral("safetensors"));
  }
  if (const int at = m_format->findData(format); at >= 0) m_format->setCurrentIndex(at);
  form->addRow(tr("Format"), m_format);

  m_checkpoint->setObjectName(QStringLiteral("checkpoint"));
  for (const CheckpointChoice& c : run.checkpoints) m_checkpoint->addItem(c.label, c.step);
  m_checkpoint->setToolTip(tr("The checkpoint to export; the newest is first"));
  form->addRow(tr("Checkpoint"), m_checkpoint);

  m_dtype->setObjectName(QStringLiteral("dtype"));
  m_fixedDtype->setObjectName(QStringLiteral("fixedDtype"));
  auto* dtypeRow = new QHBoxLayout;
  dtypeRow->addWidget(m_dtype, 1);
  dtypeRow->addWidget(m_fixedDtype, 1);
  form->addRow(tr("Weights"), dtypeRow);

  m_folder->setObjectName(QStringLiteral("folder"));
  auto* choose = new QPushButton(tr("Choose…"), this);
  auto* folderRow = new QHBoxLayout;
  folderRow->addWidget(m_folder, 1);
  folderRow->addWidget(choose);
  form->addRow(tr("Folder"), folderRow);
  layout->addLayout(form);

  m_note->setObjectName(QStringLiteral("exportNote"));
  m_note->setWordWrap(true);
  layout->addWidget(m_note);
  auto* buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, this);
  m_ok = buttons->button(QDialogButtonBox::Ok);
  m_ok->setText(tr("Export"));
  connect(buttons, &QDialogButtonBox::accepted, this, [this] {
    if (canAccept()) accept();
  });
  connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
  layout->addWidget(buttons);

  connect(choose, &QPushButton::clicked, this, [this] {
    const QString picked = QFileDialog::getSaveFileName(this, tr("Export to a folder"), m_folder->text());
    if (!picked.isEmpty()) m_folder->setText(picked);
  });
  connect(m_format, &QComboBox::currentIndexChanged, this, &ExportDialog::formatChanged);
  connect(m_folder, &QLineEdit::textChanged, this, &ExportDialog::update);
  connect(m_dtype, &QComboBox::currentIndexChanged, this, &ExportDialog::update);
  connect(m_checkpoint, &QComboBox::currentIndexChanged, this, &ExportDialog::update);
  formatChanged();
  setMinimumWidth(620);
}

void ExportDialog::formatChanged() {
  const QString format = m_format->currentData().toString();
  // The dtype: the source's first (said what it is), then each one outright.
  m_dtype->blockSignals(true);
  m_dtype->clear();
  if (format == QLatin1String("peft")) {
    m_dtype->addItem(tr("fp32 (the adapter's trained values)"), QStringLiteral("source"));
    m_dtype->addItem(tr("bf16 (half the size)"), QStringLiteral("bf16"));
  } else {
    m_dtype->addItem(tr("%1, as the source (%2)").arg(m_run.sourceDtype, m_run.sourceWhy),
                     QStringLiteral("source"));
    m_dtype->addItem(tr("bf16 (half the size, as models are usually shared)"), QStringLiteral("bf16"));
    m_dtype->addItem(tr("fp32 (the master weights exactly)"), QStringLiteral("fp32"));
  }
  m_dtype->blockSignals(false);
  const bool fixed = format == QLatin1String("safetensors");
  m_dtype->setVisible(!fixed);
  m_fixedDtype->setVisible(fixed);
  m_fixedDtype->setText(tr("fp32 (GPT-2 safetensors are written in fp32)"));
  // The suggested folder follows the format until the user types one.
  const QString suggested = QDir::home().filePath(m_run.name + suffixOf(m_run, format));
  if (m_folder->text().isEmpty() || m_folder->text() == m_suggested) m_folder->setText(suggested);
  m_suggested = suggested;
  update();
}

void ExportDialog::update() {
  const ExportRequest r = request();
  QString what;
  if (r.format == QLatin1String("peft"))
    what = tr("adapter_config.json and adapter_model.safetensors (loaded over the run's base model)");
  else if (r.format == QLatin1String("safetensors"))
    what = tr("config.json and model.safetensors");
  else
    what = tr("config.json, generation_config.json, the weights as safetensors and the tokenizer files");
  if (r.folder.isEmpty())
    m_note->setText(
        tr("Give the folder to write (it is created; an existing one is replaced once the new one "
           "is complete)."));
  else if (m_checkpoint->count() == 0)
    m_note->setText(
        tr("This run has no checkpoint to export yet: train it until one is saved, then export."));
  else
    m_note->setText(tr("Writes %1 into %2.").arg(what, r.folder));
  if (m_ok) m_ok->setEnabled(canAccept());
}

ExportRequest ExportDialog::request() const {
  ExportRequest r;
  r.format = m_format->currentData().toString();
  r.dtype =
      r.format == QLatin1String("safetensors") ? QStringLiteral("fp32") : m_dtype->currentData().toString();
  const int at = m_checkpoint->currentIndex();
  if (at >= 0 && at < m_run.checkpoints.size()) {
    r.checkpointDir = m_run.checkpoints[at].dir;
    r.step = m_run.checkpoints[at].step;
  }
  const QString folder = m_folder->text().trimmed();
  r.folder = folder.isEmpty() ? QString() : QDir::cleanPath(QFileInfo(folder).absoluteFilePath());
  return r;
}

bool ExportDialog::canAccept() const {
  return !m_folder->text().trimmed().isEmpty() && m_checkpoint->count() > 0;
}

}  // namespace flotilla::ui
