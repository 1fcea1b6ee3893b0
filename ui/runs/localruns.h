// The runs of this session, wherever they execute: the service the Runs table, the Live page, the
// status bar and the close question watch (STYLE.md principle 9).
//
// Decision: this is a Qt model over the runs service (runs/service.h), which owns the lifecycle:
// which worker (an explicit path, else next to the app, else on PATH), the run's name and folder
// (<workspace>/runs/<name>, NAME-2 when taken), its row, price and limits, starting it where it was
// placed (this machine, stored SSH nodes, a stored Slurm cluster), attaching, resuming, forking,
// watching and recording how it ended. Every run is one ServiceRun; nothing here asks what kind of
// run it holds. What can be checked without the network (the name rule, the worker, the config's
// validity) is refused here, before anything is added; opening a run on a place with no host to
// reach (this machine) happens on the UI thread, so its row and folder exist when the call returns;
// any other opening happens on the run's own thread. Without a StoreService, runs are kept in
// memory for this session only.
#pragma once

#include <QList>
#include <QObject>
#include <QString>
#include <QStringList>

#include <optional>

#include "engine/config/run_config.h"
#include "runs/service.h"
#include "ui/runs/clusterlaunch.h"
#include "ui/runs/passphraseprompt.h"
#include "ui/runs/servicerun.h"

namespace flotilla::ui {

class RunHandle;
class StoreService;
struct RelaunchChoice;

class LocalRuns : public QObject {
  Q_OBJECT

 public:
  explicit LocalRuns(const QString& workspaceDir, QObject* parent = nullptr);

  QString workspaceDir() const { return m_workspace; }
  // An explicit worker binary (tests, packaging); empty = look next to the app, then on PATH.
  void setWorkerPath(const QString& path) { m_workerPath = path; }
  // The worker binary to run, or empty with *error saying where it looked and what to do.
  QString findWorker(QString* error = nullptr) const;
  // Steps for the demo (0 = the demo config's own length).
  void setDemoSteps(int steps) { m_demoSteps = steps; }
  int demoSteps() const { return m_demoSteps; }
  // Config overrides for the demo, "key=value" each (passed as --set key=value).
  void setDemoOverrides(const QStringList& keyValues) { m_demoOverrides = keyValues; }
  // The run store (may be nullptr: runs are then only kept in memory for this session).
  void setStore(StoreService* store) { m_store = store; }
  StoreService* store() const { return m_store; }
  // How runs that connect over SSH ask for a key's passphrase (default: the dialog; tests answer it).
  void setPassphrasePrompt(PassphrasePrompt prompt) { m_prompt = std::move(prompt); }
  // The service's options for this workspace (its store, worker, runs folder, "flotilla app").
  runs::ServiceOptions serviceOptions() const;

  // Starts `flotilla-worker demo` on this machine. nullptr with *error when the worker is missing;
  // a run that fails later reports through its state.
  ServiceRun* startDemo(QString* error = nullptr);
  // Starts `config` where `where` says (the wizard's target). nullptr with *error when refused
  // before anything exists (the name rule, no worker, an invalid config, no store for a place that
  // needs one); a refusal found while connecting, deploying or submitting ends the run failed.
  ServiceRun* start(const flotilla::RunConfig& config, const runs::Placement& where,
                    QString* error = nullptr);
  // The same on this machine (the wizard's CPU and GPU targets).
  ServiceRun* startConfig(const flotilla::RunConfig& config, int ranks, QString* error = nullptr);
  // On stored SSH nodes (names, the master first), recovering from preemptions as `recovery` says.
  ServiceRun* startOnNodes(const flotilla::RunConfig& config, const QStringList& nodes,
                           const RecoveryChoice& recovery, QString* error = nullptr);
  ServiceRun* startOnNodes(const flotilla::RunConfig& config, const QStringList& nodes,
                           QString* error = nullptr) {
    return startOnNodes(config, nodes, RecoveryChoice{}, error);
  }
  // On the stored Slurm cluster `launch.cluster` (the wizard's "Slurm cluster" target).
  ServiceRun* startOnCluster(const flotilla::RunConfig& config, const ClusterLaunch& launch,
                             QString* error = nullptr);

  // Resumes a halted stored run in its row from its newest verified checkpoint, where it ran and on
  // its layout, or where and how `choice` says. nullptr with *error (the service's words) when it
  // cannot be resumed; this session's run when it is running here already.
  ServiceRun* resumeRun(qint64 storeId, QString* error = nullptr) {
    return resumeRun(storeId, nullptr, error);
  }
  ServiceRun* resumeRun(qint64 storeId, const RelaunchChoice* choice, QString* error = nullptr);
  // A new run (its own row, parent = storeId, kind fork) from `checkpointDir` (a folder on this
  // machine, as the service listed it; "" = the newest checkpoint, fetched when it is elsewhere),
  // with the parent's config, where and how `choice` says (nullptr: this machine, its layout).
  ServiceRun* forkRun(qint64 storeId, const QString& checkpointDir, QString* error = nullptr) {
    return forkRun(storeId, checkpointDir, nullptr, error);
  }
  // `step` >= 0 with no folder: that checkpoint of the run, wherever it is (fetched).
  ServiceRun* forkRun(qint64 storeId, const QString& checkpointDir, const RelaunchChoice* choice,
                      QString* error = nullptr, qint64 step = -1);
  // Watches stored run `storeId`, going on somewhere and not watched by this session, from its
  // committed offset. nullptr with *error (why not); this session's run when it watches it already.
  ServiceRun* attachRun(qint64 storeId, QString* error = nullptr);
  // At the app's start: settles the stored runs whose worker is gone (off the UI thread, each one
  // reported by StoreService::runEnded) and attaches every run the service says goes on (a worker
  // left running here, a run on nodes, a Slurm job not ended). Returns the number attached.
  int reattachRunning();
  // The session's run of a stored run (the newest), or nullptr.
  ServiceRun* runForStoreId(qint64 storeId) const;
  // The session's run of a stored run, or a read-only one made for it (ServiceRun::review) when
  // the run is not watched here: shown from the store, followed there while its row says it runs.
  // nullptr when the store has no such run.
  ServiceRun* openStored(qint64 storeId);

  // This session's runs, oldest first.
  const QList<ServiceRun*>& all() const { return m_runs; }
  int count() const { return static_cast<int>(m_runs.size()); }
  ServiceRun* at(int index) const { return m_runs.value(index); }
  int indexOf(const RunHandle* run) const;
  int runningCount() const;

  void stopAll();    // graceful: a checkpoint, then exit, for every active run
  void detachAll();  // leave every active run running, unsupervised

 signals:
  void runAdded(int index);
  void runChanged(int index);  // progress or state of the run at index changed
  void runningCountChanged(int count);
  // reattachRunning() re-attached `run`, after runAdded.
  void runReattached(flotilla::ui::RunHandle* run);

 private:
  // A new ServiceRun named `name` (its passphrase prompt set), added to the session.
  ServiceRun* newRun(const QString& name);
  bool precheck(const flotilla::RunConfig& config, bool demo, const runs::Placement& where,
                QString* error) const;
  void add(ServiceRun* run);
  void recount();  // emits runningCountChanged when the number of active runs changed

  QString m_workspace;
  QString m_workerPath;
  int m_demoSteps = 0;
  QStringList m_demoOverrides;
  QList<ServiceRun*> m_runs;
  StoreService* m_store = nullptr;
  int m_running = 0;
  PassphrasePrompt m_prompt = askPassphraseDialog;
};

}  // namespace flotilla::ui
