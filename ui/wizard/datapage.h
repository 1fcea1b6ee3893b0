// Wizard page 2, Data: the deterministic synthetic corpus, existing llm.c shards (with the files
// and tokens they hold), or text/JSONL files to tokenize into shards here.
//
// Decision: shard folders are read (headers only) and text files tokenized on worker threads;
// the page shows "reading…" meanwhile and blocks Next until the data it points at is known, so a
// run is never launched on a pattern that matches nothing.
#pragma once

#include <QFutureWatcher>

#include "ui/wizard/pagebase.h"
#include "ui/wizard/shardscan.h"

class QButtonGroup;
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
  explicit DataPage(ConfigDraft* draft, QWidget* parent = nullptr);
  ~DataPage() override;

  Mode mode() const { return m_mode; }
  void setMode(Mode mode);
  // The shard summaries shown now ("2 shard(s), 1.20 M tokens"); empty while reading.
  QString trainSummary() const;
  QString valSummary() const;
  bool isScanning() const;
  bool isPreparing() const;
  // Prepare mode: tokenizes the inputs into the output folder on a worker thread.
  void setPrepareInputs(const QStringList& inputs, const QString& tokenizer, const QString& outDir);
  void startPrepare();
  QString prepareStatus() const;

 protected:
  void load() override;
  void refreshDerived() override;
  QStringList extraProblems() const override;

 private:
  struct Prepared {
    QString outDir;
    QString message;
    bool ok = false;
  };
  void scheduleScan();
  void startScan();
  void onScanned();
  void onPrepared();
  void updateVisibility();

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
  QLineEdit* m_tokenizer;
  QLineEdit* m_outDir;
  QPushButton* m_prepare;
  QLabel* m_prepareInfo;
  QTimer* m_scanDelay;

  QFutureWatcher<QList<ShardScan>> m_scanWatcher;
  QList<ShardScan> m_scans;  // [train, val] for the patterns scanned last
  bool m_scanPending = false;  // patterns changed and their scan result not handled yet
  bool m_scanning = false;     // a scan runs (its finished signal not handled yet)
  QFutureWatcher<Prepared> m_prepareWatcher;
  QString m_prepareMessage;
  bool m_prepared = false;
  bool m_preparing = false;
};

}  // namespace flotilla::ui
