// The New Run wizard (issue 6 item 2): seven pages over one ConfigDraft, returning a plain engine
// RunConfig (STYLE.md principle 10). Every page starts from a template (the demo by default), so
// Next, Next, ..., Finish gives the ready-to-launch demo config unchanged.
//
// Decision: the wizard does not launch anything. The caller takes config() and ranks() on
// accept and starts the worker the same way every other launch does (LocalRuns::startConfig).
// The machine's devices come from a MachineProbe shared with the rest of the app when the caller
// has one, or from the wizard's own probe (off the UI thread) when it does not.
#pragma once

#include <QFutureWatcher>
#include <QWizard>

#include "engine/config/run_config.h"
#include "engine/core/probe.h"
#include "ui/wizard/budgetpage.h"
#include "ui/wizard/configdraft.h"

namespace flotilla::ui {

class BatchPage;
class BudgetPage;
class CheckpointPage;
class ConfigDraft;
class DataPage;
class HardwarePage;
class MachineProbe;
class ModelPage;
class QueueOptions;
class ReviewPage;
class TemplateStore;

class RunWizard : public QWizard {
  Q_OBJECT

 public:
  enum PageId { Model = 0, Data, Hardware, Batch, Checkpoints, Budget, Review, PageCount };

  // probe: the app's machine probe (may be nullptr: the wizard probes by itself).
  // templatesDir: where user templates live (empty: the user's data folder).
  explicit RunWizard(MachineProbe* probe = nullptr, const QString& templatesDir = QString(),
                     QWidget* parent = nullptr);
  ~RunWizard() override;

  // The config as the pages show it (the result after accept()).
  const flotilla::RunConfig& config() const;
  // Ranks to start (dp x tp x pp), each a `train` under `launch --nproc-per-node ranks`.
  int ranks() const;
  // Starts over from a config (a template, a run to duplicate).
  void setConfig(const flotilla::RunConfig& config);
  // Goes to `page` the way Next does, from the first page: every page on the way is initialised
  // from the config and stays in the history, so Back shows each of them. Stops on a page whose
  // values block Next (its problems shown there); one that is only busy checking (the shards being
  // read) is left for `page` once its check passes, unless the user edits or moves first.
  // Returns the page it stopped on.
  int advanceTo(PageId page);
  // Uses this machine description instead of the probe's (tests).
  void setMachine(const flotilla::ProbeResult& probe);
  // Offers the store's SSH nodes and Slurm clusters as targets: read on a worker thread from the
  // database at `databasePath` (nodesLoaded() when done; a store that cannot be read offers none).
  void loadNodes(const QString& databasePath);
  void setNodes(const QList<StoredNode>& nodes);
  void setClusters(const QList<StoredCluster>& clusters);
  // Reads the same store's pricing catalogue and priced nodes for the Budget page's choice.
  // (loadNodes() calls it.)
  void loadPriceChoices(const QString& databasePath);
  // Reads the same store's earlier local runs for the speed line's calibration (loadNodes() calls
  // it; planHistoryLoaded() when done).
  void loadPlanHistory(const QString& databasePath);
  // The chosen SSH nodes (the master first); empty when the run trains on this machine.
  QStringList targetNodes() const;
  // Launch options for a run on nodes (false / empty when the run trains on this machine):
  // recover automatically after a preemption, and the spare nodes for it (in order).
  bool autoRecover() const;
  QStringList spareNodes() const;
  // The Slurm launch when the target is a stored cluster (nullopt when it is not).
  std::optional<ClusterLaunch> clusterLaunch() const;
  // "Add to queue" beside Launch (issue 37): on the Review page with a valid config it accepts the
  // wizard with queueChosen() true; the caller then queues config() for the target's place instead
  // of launching it, with the limits of queueOptions() (priority, deadline, max $). False when the
  // page refuses (its problems shown), as Launch would.
  bool addToQueue();
  bool queueChosen() const { return m_queueChosen; }
  QueueOptions* queueOptions() const { return m_queueOptions; }

 signals:
  void nodesLoaded();
  void planHistoryLoaded();

 public:
  ConfigDraft* draft() const { return m_draft; }
  TemplateStore* templates() const { return m_templates; }
  ModelPage* modelPage() const { return m_model; }
  DataPage* dataPage() const { return m_data; }
  HardwarePage* hardwarePage() const { return m_hardware; }
  BatchPage* batchPage() const { return m_batch; }
  CheckpointPage* checkpointPage() const { return m_checkpoints; }
  BudgetPage* budgetPage() const { return m_budget; }
  ReviewPage* reviewPage() const { return m_review; }

 private:
  void useProbe();
  void continueAdvance();

  int m_advanceTarget = -1;  // advanceTo()'s page while it waits on a page's check; -1: none
  bool m_advancing = false;
  quint64 m_draftChanges = 0;    // ConfigDraft::changed count: an edit since the stop cancels the wait
  bool m_machineUpdate = false;  // the probe's or the store's targets changed it: not an edit
  quint64 m_changesAtStop = 0;

  TemplateStore* m_templates;
  ConfigDraft* m_draft;
  MachineProbe* m_probe;
  bool m_machineSet = false;
  ModelPage* m_model;
  DataPage* m_data;
  HardwarePage* m_hardware;
  BatchPage* m_batch;
  CheckpointPage* m_checkpoints;
  BudgetPage* m_budget;
  ReviewPage* m_review;
  QueueOptions* m_queueOptions = nullptr;
  bool m_queueChosen = false;
  struct StoreTargets {
    QList<StoredNode> nodes;
    QList<StoredCluster> clusters;
    std::vector<flotilla::runs::NamedLink> links;  // measured between stored nodes
  };
  QFutureWatcher<StoreTargets> m_nodesWatcher;
  QFutureWatcher<QList<PriceChoice>> m_pricesWatcher;
  QFutureWatcher<std::vector<flotilla::RunObservation>> m_historyWatcher;
};

}  // namespace flotilla::ui
