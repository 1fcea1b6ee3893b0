// The Export dialog (run menu → "Export weights…", and a LoRA run's two export entries): the
// format (a Hugging Face folder; for a LoRA run the PEFT adapter or the merged model; GPT-2
// safetensors for a GPT-2 run), which checkpoint (step), the dtype (by default the source's, said
// so) and the destination folder. It returns an ExportRequest; StoreRunsView runs
// `flotilla-worker export` on it (exportWorkerArgs) and reports the absolute folder, offering to
// open it.
#pragma once

#include <QDialog>
#include <QList>
#include <QString>
#include <QStringList>

#include "ui/runs/storerunsview.h"

class QComboBox;
class QLabel;
class QLineEdit;
class QPushButton;

namespace flotilla::ui {

// What to export: the plain struct the dialog returns.
struct ExportRequest {
  QString format;         // hf | peft | safetensors
  QString dtype;          // source | bf16 | fp32 (source: the worker keeps the source's)
  QString checkpointDir;  // the chosen checkpoint here ("" = fetched by step, or the newest)
  qint64 step = -1;       // the chosen checkpoint's step (-1 = the newest)
  QString folder;         // absolute
};

// What the dialog knows of the run.
struct ExportRun {
  QString name;
  bool llama = false, lora = false, qlora = false;
  QString sourceDtype;                  // interop::source_dtype: bf16 | fp32
  QString sourceWhy;                    // "the dtype of /models/qwen"
  QString tokenizer;                    // the run's tokenizer folder ("" none): written beside a HF folder
  QList<CheckpointChoice> checkpoints;  // newest first
};

// `flotilla-worker export` arguments for `request` of `run` (the checkpoint folder in place).
QStringList exportWorkerArgs(const ExportRun& run, const ExportRequest& request,
                             const QString& checkpointDir);

class ExportDialog : public QDialog {
  Q_OBJECT

 public:
  // `format`: the one to start on ("" = the run's usual: hf for Llama, safetensors for GPT-2).
  ExportDialog(const ExportRun& run, const QString& format, QWidget* parent = nullptr);

  ExportRequest request() const;
  bool canAccept() const;  // a folder is given and a checkpoint chosen

  QComboBox* formatBox() const { return m_format; }
  QComboBox* checkpointBox() const { return m_checkpoint; }
  QComboBox* dtypeBox() const { return m_dtype; }
  QLineEdit* folderEdit() const { return m_folder; }
  QLabel* noteLabel() const { return m_note; }

 private:
  void formatChanged();
  void update();

  ExportRun m_run;
  QComboBox* m_format;
  QComboBox* m_checkpoint;
  QComboBox* m_dtype;
  QLabel* m_fixedDtype;
  QLineEdit* m_folder;
  QLabel* m_note;
  QPushButton* m_ok = nullptr;
  QString m_suggested;  // the folder last suggested (replaced on a format change unless edited)
};

}  // namespace flotilla::ui
