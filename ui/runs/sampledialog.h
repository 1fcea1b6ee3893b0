// The Sample dialog (run menu → "Sample from the model…"): a prompt, the chat template on or off
// (on when the run's tokenizer has one), temperature (0 = greedy), top-k, top-p, most new tokens,
// stop strings and seed; the answer arrives in the dialog as the worker prints it, earlier answers
// stay below for comparison, and Copy puts the answer on the clipboard.
//
// Decision: the dialog builds a runs::SampleRequest (a plain struct, the one `flotilla runs sample`
// builds too) and runs `flotilla-worker sample` on it as a QProcess, so the window never waits; the
// worker flushes the answer token by token, and the dialog shows what has arrived. A run without a
// tokenizer (the synthetic demo) is never asked for text it cannot read: the prompt is token ids,
// and the dialog says so.
#pragma once

#include <QByteArray>
#include <QDialog>
#include <QElapsedTimer>
#include <QString>

#include "runs/sample_text.h"

class QCheckBox;
class QDoubleSpinBox;
class QLabel;
class QLineEdit;
class QPlainTextEdit;
class QProcess;
class QPushButton;
class QSpinBox;

namespace flotilla::ui {

class SampleDialog : public QDialog {
  Q_OBJECT

 public:
  // `checkpoint`: the folder to sample (a run folder here, or a fetched checkpoint); `tokenizer`:
  // the run's (runs::run_tokenizer_path; "" = none); `vocabSize`: the model's, for the ids hint.
  SampleDialog(const QString& runName, const QString& worker, const QString& checkpoint,
               const QString& tokenizer, int vocabSize, QWidget* parent = nullptr);
  ~SampleDialog() override;

  // What Generate asks the worker for, from the fields.
  runs::SampleRequest request() const;
  bool hasTokenizer() const { return !m_tokenizer.isEmpty(); }
  bool isGenerating() const { return m_process != nullptr; }
  QString answer() const;  // the current (or last) answer as shown

  QPlainTextEdit* promptEdit() const { return m_prompt; }
  QCheckBox* chatBox() const { return m_chat; }
  QDoubleSpinBox* temperatureBox() const { return m_temperature; }
  QSpinBox* topKBox() const { return m_topK; }
  QDoubleSpinBox* topPBox() const { return m_topP; }
  QSpinBox* tokensBox() const { return m_tokens; }
  QLineEdit* stopEdit() const { return m_stops; }
  QSpinBox* seedBox() const { return m_seed; }
  QPushButton* generateButton() const { return m_generate; }
  QPushButton* stopButton() const { return m_stop; }
  QPushButton* copyButton() const { return m_copy; }
  QPlainTextEdit* answerView() const { return m_answer; }
  QPlainTextEdit* historyView() const { return m_history; }
  QLabel* statusLabel() const { return m_status; }

 public slots:
  void generate();
  void stopGenerating();
  void copyAnswer();

 signals:
  // An answer ended: ok, and the answer (or the worker's reason).
  void finished(bool ok, const QString& answerOrReason);

 private:
  void showArrived();
  void done(bool ok, QString reason);

  QString m_worker, m_checkpoint, m_tokenizer;
  QPlainTextEdit* m_prompt;
  QCheckBox* m_chat = nullptr;
  QLineEdit* m_system = nullptr;
  QDoubleSpinBox* m_temperature;
  QSpinBox* m_topK;
  QDoubleSpinBox* m_topP;
  QSpinBox* m_tokens;
  QLineEdit* m_stops = nullptr;
  QSpinBox* m_seed;
  QCheckBox* m_special = nullptr;
  QPushButton* m_generate;
  QPushButton* m_stop;
  QPushButton* m_copy;
  QPlainTextEdit* m_answer;
  QPlainTextEdit* m_history;
  QLabel* m_status;
  QProcess* m_process = nullptr;
  QByteArray m_out;  // the worker's stdout so far (UTF-8, possibly cut inside a character)
  QByteArray m_err;
  QString m_settings;  // the running request in words, for the history
  QString m_askedPrompt;
  QElapsedTimer m_clock;
  int m_answers = 0;
  bool m_stopping = false;  // Stop was pressed: the process's end is not a failure
};

}  // namespace flotilla::ui
