// The stored runs as the Runs page shows them: a filter bar (status, text, tag), the table over
// StoreRunsModel, and the per-run actions (open live, resume, fork from a checkpoint, duplicate
// config, export CSV, delete, evaluate on a task file).
//
// Decision: each action is a public method taking the run id, and the context menu only calls
// them, so tests drive exactly what a click does without menus or modal dialogs (runMenu() builds
// the menu a right-click shows, so tests read its entries too). The questions
// the actions ask (which checkpoint, where to save, are you sure) go through replaceable hooks.
// What reads the database or the disk at length (the CSV export, the fork's checkpoint list) runs
// on the thread pool; the view shows a busy bar meanwhile and reports as the other actions do.
// Every action works the same for a run of any place (this machine, SSH nodes, a Slurm cluster):
// the runs service answers what a run can do now, lists and fetches its checkpoints, and resumes,
// forks, attaches or checkpoints it. A run going on that nobody here watches is offered for
// attaching, never shown as an empty folder. Resume and Fork can move a run to another place or
// layout through RelaunchDialog (with the planner's fit).
#pragma once

#include <QList>
#include <QString>
#include <QWidget>

#include <functional>
#include <memory>
#include <optional>

#include "engine/config/run_config.h"
#include "ui/runs/relaunchdialog.h"

class QComboBox;
class QLabel;
class QMenu;
class QLineEdit;
class QProgressBar;
class QTableView;

namespace flotilla::db {
struct Run;
}

namespace flotilla::ui {

class ServiceRun;
class EvaluateDialog;
class ExportDialog;
struct ExportRequest;
class MachineProbe;
class LocalRuns;
class RunHandle;
class RunsFilterModel;
class StoreRunsModel;
class StoreService;

// Writes every metric of a stored run as CSV (step, then one column per metric name, sorted) from
// a read connection of its own. False with *error on failure. Safe to call off the UI thread.
bool exportRunCsv(const QString& databasePath, qint64 runId, const QString& path, QString* error);

// A checkpoint Fork offers: its folder, and what a user picks by (step, loss, validation loss,
// when it was written, its size and why).
struct CheckpointChoice {
  QString dir;
  qint64 step = 0;
  QString label;  // "step 30 · loss 3.21 · val 3.30 · 2026-12-02 14:03 · 12.4 MiB · periodic"
};

class StoreRunsView : public QWidget {
  Q_OBJECT

 public:
  StoreRunsView(StoreService* store, LocalRuns* runs, QWidget* parent = nullptr);
  // The app's machine probe, for the places Resume and Fork offer (without one: probed when asked).
  void setMachineProbe(MachineProbe* probe) { m_probe = probe; }

  QTableView* table() const { return m_table; }
  StoreRunsModel* model() const { return m_model; }
  RunsFilterModel* filter() const { return m_filter; }
  qint64 selectedId() const;
  void selectId(qint64 id);

  // The menu a right-click on the run shows (the caller owns it). A LoRA run offers its adapter
  // (PEFT) and its merged model as two exports; any other run its weights.
  QMenu* runMenu(qint64 id);
  // Whether the run trained LoRA adapters (its stored config's lora.enabled).
  bool isLoraRun(qint64 id);

  // The actions (the context menu calls these). Each reports problems through errorRaised.
  void openLive(qint64 id);
  // Resumes where the run ran, on its layout.
  ServiceRun* resume(qint64 id);
  // Asks where and on which layout (RelaunchDialog), then resumes there; nullptr when cancelled.
  ServiceRun* resumeElsewhere(qint64 id);
  // With a checkpoint directory: forks now on this machine and returns the run. With none: lists
  // the run's checkpoints (wherever they are) off the UI thread and returns nullptr; the question
  // (which checkpoint, where, which layout: RelaunchDialog, or chooseCheckpoint when set) and the
  // fork follow when the list arrives (runOpened on success, errorRaised otherwise, then forkListed()).
  ServiceRun* fork(qint64 id, const QString& checkpointDir);
  // A checkpoint at the run's next step, wherever it runs (off the UI thread when another process
  // watches it); ends with message() or errorRaised(), then checkpointRequested(ok).
  void checkpointNow(qint64 id);
  // The run's checkpoints that exist now, wherever they are, newest first (off the UI thread); shown
  // in a box unless showCheckpoints is set, then checkpointsListed.
  void listCheckpoints(qint64 id);
  // Emits duplicateRequested with the run's config (its launch's timestamp dropped from the name,
  // since the new launch adds its own).
  void duplicate(qint64 id);
  // Writes the CSV off the UI thread: true once started (false when no path was chosen). Ends
  // with message() or errorRaised(), then exportFinished(ok).
  bool exportCsv(qint64 id, const QString& path);  // empty path: ask where
  bool remove(qint64 id);                          // asks for confirmation
  // The model of the run's newest verified checkpoint for other tools (flotilla-worker export): a
  // Hugging Face folder for a Llama-family run (with the run's tokenizer; a LoRA run's base with the
  // adapter merged in), GPT-2 safetensors and config.json otherwise, in the source's dtype. Empty
  // path: the Export dialog (format, checkpoint, dtype, folder: ExportDialog; chooseExportFolder,
  // when set, asks for the folder alone). Runs the worker in the background: true once started;
  // ends with weightsExported(ok, the absolute folder or the worker's reason), and a message naming
  // the folder that offers to open it (showExported when set).
  bool exportWeights(qint64 id, const QString& path);
  // A LoRA run's adapter as a PEFT folder (flotilla-worker export --format peft): what
  // PeftModel.from_pretrained(base, folder) loads. As exportWeights; ends with adapterExported.
  bool exportAdapter(qint64 id, const QString& path);
  // Empty prompt: opens the Sample dialog (SampleDialog: prompt, chat template, temperature, top-k,
  // top-p, length, stop strings, seed; answers stream into it) on the run's newest verified
  // checkpoint. A prompt: samples it with the dialog's defaults in the background (a chat model
  // answers it as a user turn; a run without a tokenizer reads it as token ids, else starts at token
  // 0) and ends with sampled(ok, the answer or the reason), shown in a box unless showSample is set.
  bool sampleModel(qint64 id, const QString& prompt);
  // Lists the run's checkpoints (off the UI thread), then opens the Evaluate dialog (EvaluateDialog:
  // checkpoint, task file, kind, few-shot, limit) on them; its scores are stored as the run's metrics
  // "task/<task>/<score>" at the checkpoint's step (StoreService::storeEval), a checkpoint elsewhere
  // fetched first. Ends with evaluateOpened(dialog) (errorRaised when there is nothing to evaluate).
  bool evaluate(qint64 id);
  // Background work (an export, a checkpoint list) is running; the busy bar shows meanwhile.
  bool isBusy() const { return m_busy > 0; }

  // Hooks for the questions (tests answer them without dialogs).
  // Returns the chosen checkpoint's dir ("" = cancelled).
  std::function<QString(const QList<CheckpointChoice>& checkpoints)> chooseCheckpoint;
  std::function<QString(const QString& suggested)> chooseCsvPath;
  std::function<QString(const QString& suggested)> chooseExportFolder;
  std::function<void(const QString& text)> showSample;
  // Answers the Export dialog instead of showing it (tests set its widgets); true: accepted.
  std::function<bool(ExportDialog& dialog)> answerExport;
  // Shows where an export went instead of the box that offers to open the folder.
  std::function<void(const QString& folder, const QString& details)> showExported;
  std::function<bool(const QString& runName)> confirmDelete;
  // Whether to watch a run going on that this session does not watch (default: a question box).
  // `where`: the runs service's words ("nodes n1, n2", "slurm cluster NAME, job 12", "this machine").
  std::function<bool(const QString& runName, const QString& where)> confirmAttach;
  // Answers the Resume / Fork question instead of showing it (tests set its widgets); true: accepted.
  std::function<bool(RelaunchDialog& dialog)> answerRelaunch;
  std::function<void(const QList<CheckpointChoice>& checkpoints)> showCheckpoints;

 signals:
  // A run was resumed, forked, attached or opened (wherever it runs): show it live.
  void runOpened(flotilla::ui::ServiceRun* run);
  void duplicateRequested(const flotilla::RunConfig& config);
  void errorRaised(const QString& text);
  void message(const QString& text);
  void exportFinished(bool ok);
  void weightsExported(bool ok, const QString& folderOrReason);
  void adapterExported(bool ok, const QString& folderOrReason);
  void sampled(bool ok, const QString& textOrReason);
  void forkListed();
  void checkpointRequested(bool ok);
  void checkpointsListed(const QList<flotilla::ui::CheckpointChoice>& checkpoints, const QString& error);
  void busyChanged(bool busy);
  // The Evaluate dialog is open (shown; deleted when closed).
  void evaluateOpened(flotilla::ui::EvaluateDialog* dialog);

 private:
  void showMenu(const QPoint& pos);
  // The Resume / Fork question for stored run `id` (nullptr with errorRaised when it cannot be asked).
  std::unique_ptr<RelaunchDialog> relaunchDialog(qint64 id, RelaunchDialog::Mode mode);
  bool askRelaunch(RelaunchDialog& dialog);
  struct ModelSource {  // what export and sample need of a stored run
    QString name, runDir, worker, tokenizer, initFrom;
    int vocabSize = 0;
    qint64 id = 0;
    bool elsewhere = false;  // the run's folder is not on this machine: its checkpoint is fetched
    bool llama = false;
    bool lora = false;   // trained LoRA adapters on a frozen base
    bool qlora = false;  // ... over the base quantised to 4-bit NF4 (lora.base_quant = "nf4")
  };
  std::optional<ModelSource> modelSource(qint64 id);  // errorRaised and nullopt when it cannot be used
  // Calls `then` with the checkpoint to read: the run's folder here (its newest verified one), or the
  // newest checkpoint fetched from where the run is (off the UI thread).
  // `step` >= 0: that checkpoint instead of the newest.
  void withCheckpoint(const ModelSource& src, std::function<void(const QString& dir)> then, qint64 step = -1);
  // The run's checkpoints that exist now, newest first, labelled as Fork shows them (off the UI thread).
  void checkpointChoices(
      qint64 id, std::function<void(const QList<CheckpointChoice>& choices, const QString& error)> then);
  // The Export dialog for run `id` (starting on `format`), then the export it asks for.
  void exportWithDialog(qint64 id, const QString& format);
  void runExport(const ModelSource& src, const ExportRequest& request, bool offerToOpen = false);
  void runWorker(const QString& worker, const QStringList& args, const QString& busyText,
                 std::function<void(bool ok, const QString& out, const QString& err)> done);
  void forkFromList(qint64 id, const QList<CheckpointChoice>& choices, const QString& error);
  void beginBusy(const QString& what);
  void endBusy();

  StoreService* m_store;
  LocalRuns* m_runs;
  StoreRunsModel* m_model;
  RunsFilterModel* m_filter;
  QTableView* m_table;
  QComboBox* m_status;
  QLineEdit* m_text;
  QLineEdit* m_tag;
  QLabel* m_busyText;
  QProgressBar* m_busyBar;
  int m_busy = 0;
  MachineProbe* m_probe = nullptr;
};

}  // namespace flotilla::ui
