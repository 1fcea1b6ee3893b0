// Where and how a stored run goes on: the question Resume and Fork ask when the user wants another
// place (this machine, stored SSH nodes, a stored Slurm cluster) or another layout (dp, tp, pp,
// ZeRO; the ranks follow) than the run was written with. The planner's fit for the chosen layout
// on the chosen place is shown as the wizard shows it (checkFit and its memory bar), and the
// global batch is kept as the worker keeps it on a resume (the checkpoint's, accumulation making up a
// dp change), so the run's optimisation stays the same and only how the work is cut changes.
//
// Decision: the dialog owns no run logic. It edits a copy of the run's config and reports the
// choice; the runs service resumes or forks with it. An invalid layout (the engine's validate():
// tp that does not divide the heads, more ranks than the place has) disables OK and says why in
// the engine's words; a layout the planner says does not fit is allowed (the planner is an
// estimate) but said in red. Every widget has an object name so tests drive it offscreen.
#pragma once

#include <QDialog>
#include <QList>
#include <QString>

#include "engine/config/run_config.h"
#include "runs/placement.h"
#include "ui/wizard/configdraft.h"
#include "ui/wizard/modelfit.h"

class QComboBox;
class QDialogButtonBox;
class QLabel;
class QPushButton;
class QSpinBox;

namespace flotilla::ui {

class MemoryBar;
struct CheckpointChoice;

// What the user chose.
struct RelaunchChoice {
  HardwareTarget target;       // where: this machine (Cpu/Gpu), target.nodes, or target.cluster
  flotilla::RunConfig config;  // the run's config with the chosen layout (parallel.*, the batch kept)
  runs::Layout layout;         // what changed of dp, tp, pp, ZeRO (for the runs service)
  int ranks = 1;               // dp x tp x pp
  QString checkpointDir;       // Fork: the checkpoint to start from ("" for Resume: the newest verified)
  bool layoutChanged = false;  // dp, tp, pp or ZeRO differ from the run's
  bool targetChanged = false;  // another place than the run's
};

class RelaunchDialog : public QDialog {
  Q_OBJECT

 public:
  enum class Mode { Resume, Fork };

  // `config`: the run's stored config; `targets`: the places offered (relaunchTargets());
  // `current`: the index of the run's own place in `targets` (-1: none of them).
  RelaunchDialog(Mode mode, const QString& runName, const flotilla::RunConfig& config,
                 const QList<HardwareTarget>& targets, int current, QWidget* parent = nullptr);

  // Fork: the checkpoints offered, newest first (the first is chosen).
  void setCheckpoints(const QList<CheckpointChoice>& checkpoints);

  Mode mode() const { return m_mode; }
  RelaunchChoice choice() const;
  // The planner's fit of the chosen layout on the chosen place (not planned while invalid).
  FitCheck fit() const { return m_fit; }
  // The engine's first objection to the chosen layout ("" when valid).
  QString problem() const { return m_problem; }
  bool canAccept() const;

  QComboBox* targetBox() const { return m_target; }
  QComboBox* checkpointBox() const { return m_checkpoint; }
  QSpinBox* dpBox() const { return m_dp; }
  QSpinBox* tpBox() const { return m_tp; }
  QSpinBox* ppBox() const { return m_pp; }
  QSpinBox* zeroBox() const { return m_zero; }
  QLabel* ranksLabel() const { return m_ranks; }
  QLabel* fitLabel() const { return m_fitText; }
  QLabel* batchLabel() const { return m_batch; }
  MemoryBar* memoryBar() const { return m_memory; }
  QPushButton* okButton() const;

 private:
  void update();
  flotilla::RunConfig layoutConfig(QString* batchNote) const;

  Mode m_mode;
  flotilla::RunConfig m_original;
  QList<HardwareTarget> m_targets;
  int m_current;
  QList<QString> m_checkpointDirs;
  QComboBox* m_target;
  QComboBox* m_checkpoint;
  QLabel* m_checkpointLabel;
  QSpinBox* m_dp;
  QSpinBox* m_tp;
  QSpinBox* m_pp;
  QSpinBox* m_zero;
  QLabel* m_ranks;
  QLabel* m_batch;
  MemoryBar* m_memory;
  QLabel* m_fitText;
  QDialogButtonBox* m_buttons;
  FitCheck m_fit;
  QString m_problem;
};

// The places a run can go on: this machine's targets from its probe, then the stored SSH nodes and
// Slurm clusters of the workspace at `databasePath` (read on the calling thread: a few small rows).
QList<HardwareTarget> relaunchTargets(const flotilla::ProbeResult& probe, const QString& databasePath);

// Where the runs service runs `config` for `target`: this machine, the target's nodes, or its cluster
// with as many nodes as the target asks and the ranks split evenly over them.
runs::Placement placementOf(const HardwareTarget& target, const flotilla::RunConfig& config);

// The index in `targets` of the place `where` (a stored run's, runs::RunService::placement_of): the
// target whose placement reads the same, on this machine the one of the run's device; -1 when none.
int relaunchTargetIndex(const QList<HardwareTarget>& targets, const runs::Placement& where,
                        const flotilla::RunConfig& config);

}  // namespace flotilla::ui
