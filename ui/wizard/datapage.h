// Wizard page 2, Data: the deterministic synthetic corpus, existing llm.c shards (with the files
// and tokens they hold), or text/JSONL files (raw text, prompt/completion and chat records) to
// tokenize into shards here, with the model's Hugging Face tokenizer, a tokenizer folder or file,
// or one trained on the input; a chat format and packing; the result in records, tokens, loss
// targets and sequences at the run's train.seq_len.
//
// Decision: shard folders are read (headers only) and text files tokenized on worker threads;
// the page shows "reading…" meanwhile and blocks Next until the data it points at is known, so a
// run is never launched on a pattern that matches nothing. Only the chosen source's inputs reach
// the config: a path typed under another source stays in its field, not in data.* (issue 34 item 13).
// The page never dead-ends (issue 34 item 2): Prepare makes a validation split of one batch
// (ranks x micro-batch rows at the sequence length set here) by default, a share of the tokens, or
// none (then eval.every = 0); it prepares again when those change; and when the shards cannot feed
// a batch the fixes are buttons under the message: a micro-batch that fits, a validation split of
// one batch, or no validation. Unchosen sources are hidden, not disabled, so no message is greyed.
// The prepared tokenizer sets
// model.vocab_size unless the model comes from a Hugging Face folder: that vocabulary is the
// checkpoint's, so a larger tokenizer is a problem on this page instead.
#pragma once

#include <QFutureWatcher>

#include "engine/config/run_config.h"
#include "ui/wizard/dataprepare.h"
#include "ui/wizard/pagebase.h"
#include "ui/wizard/shardscan.h"

class QButtonGroup;
class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QFormLayout;
class QLabel;
class QLineEdit;
class QPushButton;
class QSpinBox;
class QTimer;

namespace flotilla::ui {

class DataPage : public WizardPageBase {
  Q_OBJECT

 public:
  enum Mode { Synthetic = 0, Shards = 1, Prepare = 2 };
  // Prepare's validation split: one batch of rows (ranks x micro-batch), a share of the tokens, none.
  enum Validation { ValidationBatch = 0, ValidationShare = 1, ValidationNone = 2 };
  explicit DataPage(ConfigDraft* draft, QWidget* parent = nullptr);
  ~DataPage() override;

  Mode mode() const { return m_mode; }
  void setMode(Mode mode);
  // The shard summaries shown now ("2 shards, 1.20 M tokens"); empty while reading.
  QString trainSummary() const;
  QString valSummary() const;
  bool isScanning() const;
  bool isPreparing() const;
  // Prepare mode: tokenizes the inputs into the output folder on a worker thread. A tokenizer
  // path given here chooses TokenizerSource::File.
  void setPrepareInputs(const QStringList& inputs, const QString& tokenizer, const QString& outDir);
  TokenizerSource tokenizerSource() const;
  void setTokenizerSource(TokenizerSource source);
  void startPrepare();
  QString prepareStatus() const;
  Validation validation() const;
  void setValidation(Validation v);  // prepares again when shards were prepared
  // Rows the "one batch" validation split holds: parallel.dp x train.micro_batch.
  qint64 batchRows() const;
  // The largest micro-batch below the current one that the shards can feed (0: none does); the
  // fix button under the message offers it.
  int fittingMicroBatch() const { return m_fitMicroBatch; }
  // The last preparation's figures (valid once prepareStatus() reports them).
  const PrepareSummary& prepared() const { return m_summary; }

 protected:
  void load() override;
  void refreshDerived() override;
  QStringList extraProblems() const override;
  QList<FieldProblem> extraFieldProblems() const override;

 private:
  void scheduleScan();
  void startScan();
  void onScanned();
  void onPrepared();
  void updateVisibility();
  void syncTokenizerSource();  // the Model entry offered exactly when the model has a HF folder
  // Writes the chosen source's inputs into c and clears the others' (and eval.every for "none").
  void applyChoice(flotilla::RunConfig& c);
  void updateFixes();
  void prepareAgainSoon();  // after a change of the validation or the sequence length

  Mode m_mode = Synthetic;
  QButtonGroup* m_modes;
  QWidget* m_syntheticBox;
  QWidget* m_shardsBox;
  QWidget* m_prepareBox;
  QSpinBox* m_tokens;
  QLineEdit* m_train;
  QLineEdit* m_val;
  QLabel* m_trainInfo;
  QLabel* m_valInfo;
  QLineEdit* m_inputs;
  QFormLayout* m_prepForm = nullptr;
  QComboBox* m_tokSource;
  QLineEdit* m_tokenizer;
  QWidget* m_tokenizerRow = nullptr;
  QSpinBox* m_trainVocab;
  QComboBox* m_chatFormat;
  QCheckBox* m_pack;
  QLineEdit* m_outDir;
  QPushButton* m_prepare;
  QLabel* m_prepareInfo;
  QSpinBox* m_seqLen;
  QComboBox* m_valChoice;
  QDoubleSpinBox* m_valPercent;
  QWidget* m_fixes;
  QPushButton* m_fixMicroBatch;
  QPushButton* m_fixValRows;
  QPushButton* m_fixNoVal;
  QLabel* m_fixNote;
  QTimer* m_scanDelay;
  QTimer* m_prepareAgain;
  int m_fitMicroBatch = 0;
  QString m_fitKey;
  int m_evalEveryBefore = -1;  // eval.every before "no validation" set it to 0 (-1: not set by it)
  QString m_preparedVal;       // data.val as the preparation set it

  QFutureWatcher<QList<ShardScan>> m_scanWatcher;
  QList<ShardScan> m_scans;    // [train, val] for the patterns scanned last
  bool m_scanPending = false;  // patterns changed and their scan result not handled yet
  bool m_scanning = false;     // a scan runs (its finished signal not handled yet)
  QFutureWatcher<PrepareSummary> m_prepareWatcher;
  QString m_prepareMessage;
  PrepareSummary m_summary;
  QString m_preparedTrain;  // data.train as the preparation set it
  bool m_prepared = false;
  bool m_preparing = false;
  bool m_tokSourceChosen = false;  // the user picked the tokenizer's source: no automatic default
};

}  // namespace flotilla::ui
