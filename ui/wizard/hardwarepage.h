// Wizard page 3, Hardware & parallelism: where the run trains (this machine's CPU or GPUs, from
// the probe, or stored SSH nodes with their launch options: automatic recovery after a
// preemption and spare nodes, shown only for node targets, or a stored Slurm cluster with its
// job's partition, nodes, GPUs per node, time limit, time-limit checkpoint and auto-resume, shown
// only for cluster targets and refused beside their field as the runs layer would), its layout (dp, tp, pp, ZeRO,
// pipeline micro-batches, dtype, recomputation), the planner's memory per device against the
// device's capacity, and the fastest layout that fits.
//
// Decision: the layout search (the engine's recommend_layouts, a few hundred plans) runs on a
// worker thread; results carry the draft's revision and stale ones are dropped, so typing into
// the spin boxes never waits on the planner.
#pragma once

#include <QFutureWatcher>

#include "ui/wizard/layoutadvice.h"
#include "ui/wizard/pagebase.h"

class QCheckBox;
class QComboBox;
class QFormLayout;
class QLabel;
class QLineEdit;
class QListWidget;
class QPushButton;
class QSpinBox;
class QTimer;

namespace flotilla::ui {

class MemoryBar;

class HardwarePage : public WizardPageBase {
  Q_OBJECT

 public:
  explicit HardwarePage(ConfigDraft* draft, QWidget* parent = nullptr);
  ~HardwarePage() override;

  MemoryBar* memoryBar() const { return m_memory; }
  QString planText() const;
  // The advice shown when the layout does not fit (empty while it fits or is being searched).
  QString recommendationText() const;
  bool isSearching() const;
  // Finds the fastest runnable layout that fits and applies it (asynchronously; see isSearching).
  void recommend();

 protected:
  void load() override;
  void refreshDerived() override;
  QList<FieldProblem> extraFieldProblems() const override;

 private:
  struct Search {
    quint64 revision = 0;
    bool apply = false;
    LayoutAdvice advice;
  };
  void startSearch(bool apply);
  void onSearched();
  void editLayout();
  void syncTargets();   // the target list and choice as the draft has them (no edit signals)
  void syncRecovery();  // the recovery rows as the draft has them (no edit signals), shown for nodes
  void editSpares();
  void syncCluster();  // the Slurm rows as the draft has them (no edit signals), shown for clusters
  void editCluster();

  QFormLayout* m_form = nullptr;
  QComboBox* m_target;
  QCheckBox* m_autoRecover;
  QListWidget* m_spares;
  QComboBox* m_slurmPartition;
  QSpinBox* m_slurmNodes;
  QSpinBox* m_slurmGpus;
  QLineEdit* m_slurmTime;
  QSpinBox* m_slurmLead;
  QCheckBox* m_slurmAutoResume;
  QLabel* m_slurmFacts;
  QSpinBox* m_ranks;
  QSpinBox* m_dp;
  QSpinBox* m_tp;
  QSpinBox* m_pp;
  QSpinBox* m_zero;
  QSpinBox* m_microBatches;
  QComboBox* m_schedule;
  QComboBox* m_dtype;
  QCheckBox* m_recompute;
  MemoryBar* m_memory;
  QLabel* m_breakdown;
  QLabel* m_batchNote;  // what keeping the global batch did
  QLabel* m_plan;
  QLabel* m_advice;
  QPushButton* m_recommend;
  QTimer* m_searchDelay;

  QFutureWatcher<Search> m_watcher;
  quint64 m_revision = 0;  // counts draft changes; a search result for an older one is stale
  quint64 m_advisedRevision = ~0ull;
  bool m_pendingApply = false;
  bool m_searching = false;  // a search was started and its result not handled yet
  QString m_adviceText;
};

}  // namespace flotilla::ui
