// The Evaluate dialog (run menu → "Evaluate…"): pick one of the run's checkpoints and a task file
// (its kind, few-shot examples from a dev file, a limit), run it, read the scores, and find them
// stored as the run's metrics "task/<task>/<score>" at that checkpoint's step, where Compare plots
// them and measures the cost to reach a score.
//
// Decision: the dialog builds a runs::EvalRequest (the struct `flotilla runs eval` builds too) and
// runs `flotilla-worker eval --json` on it as a QProcess, so the window never waits on a model; the
// worker's progress (stderr) shows as it comes, its one JSON line is parsed by runs::parse_eval_json
// and stored through the store's writer (StoreService::storeEval) by a hook the Runs view sets, so
// the app and the CLI store an evaluation the same way. A checkpoint elsewhere (a run on nodes or a
// cluster) is fetched first, also through a hook.
#pragma once

#include <QByteArray>
#include <QDialog>
#include <QElapsedTimer>
#include <QList>
#include <QString>
#include <QStringList>

#include <functional>
#include <optional>

#include "runs/quality.h"
#include "ui/runs/storerunsview.h"

class QComboBox;
class QLabel;
class QLineEdit;
class QProcess;
class QPushButton;
class QSpinBox;
class QTableWidget;

namespace flotilla::ui {

class EvaluateDialog : public QDialog {
  Q_OBJECT

 public:
  // `checkpoints`: the run's, newest first (CheckpointChoice: folder, step, label).
  EvaluateDialog(const QString& runName, const QString& worker, const QList<CheckpointChoice>& checkpoints,
                 QWidget* parent = nullptr);
  ~EvaluateDialog() override;

  // The run's tokenizer to pass the worker ("" = the one it finds for the checkpoint).
  void setTokenizer(const QString& path) { m_tokenizer = path; }
  // The worker's request from the fields (the checkpoint folder left empty: chosen when run).
  runs::EvalRequest request() const;
  bool isEvaluating() const { return m_process != nullptr; }
  const std::optional<runs::EvalOutcome>& outcome() const { return m_outcome; }
  qint64 storedStep() const { return m_storedStep; }
  QStringList storedMetrics() const { return m_stored; }

  QComboBox* checkpointBox() const { return m_checkpoint; }
  QLineEdit* taskEdit() const { return m_task; }
  QComboBox* kindBox() const { return m_kind; }  // data: "" (from the file) or the kind's name
  QSpinBox* fewshotBox() const { return m_fewshot; }
  QLineEdit* devEdit() const { return m_dev; }
  QSpinBox* limitBox() const { return m_limit; }
  QPushButton* evaluateButton() const { return m_evaluate; }
  QPushButton* stopButton() const { return m_stop; }
  QTableWidget* scoresTable() const { return m_scores; }
  QLabel* statusLabel() const { return m_status; }

  // Calls `then` with a folder of this machine holding the checkpoint at `step` (the choice's own
  // folder by default; the Runs view fetches one from elsewhere). An empty folder cancels.
  std::function<void(qint64 step, const QString& dir, std::function<void(const QString& dir)> then)>
      resolveCheckpoint;
  // Stores the scores at `step`: "" when stored (with the metric names in *names), else why not.
  std::function<QString(qint64 step, const runs::EvalOutcome& outcome, QStringList* names)> store;

 public slots:
  void evaluate();
  void stopEvaluating();

 signals:
  // An evaluation ended: ok (scores shown and stored), and the status line (or the reason).
  void finished(bool ok, const QString& textOrReason);

 private:
  void start(const QString& dir, qint64 step);
  void done(bool ok, const QString& text);
  void showScores(const runs::EvalOutcome& outcome);

  QString m_worker, m_tokenizer;
  QList<CheckpointChoice> m_choices;
  QComboBox* m_checkpoint;
  QLineEdit* m_task;
  QComboBox* m_kind;
  QSpinBox* m_fewshot;
  QLineEdit* m_dev;
  QSpinBox* m_limit;
  QPushButton* m_evaluate;
  QPushButton* m_stop;
  QTableWidget* m_scores;
  QLabel* m_status;
  QProcess* m_process = nullptr;
  QByteArray m_out, m_err;
  QElapsedTimer m_clock;
  std::optional<runs::EvalOutcome> m_outcome;
  qint64 m_storedStep = -1;
  QStringList m_stored;
  bool m_stopping = false;
};

}  // namespace flotilla::ui
