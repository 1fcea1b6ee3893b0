// The runs launched on this machine in this session: the service the Runs table, the Live page,
// the status bar and the close question watch (STYLE.md principle 9).
//
// Decision: this is a Qt model over the runs layer, which owns the lifecycle: which worker
// (runs::find_worker: an explicit path, else next to the app, else on PATH), the run's name and
// folder (runs/run_setup.h: <workspace>/runs/<name>, NAME-2 when taken), its price and limits, the
// worker's command line, the watcher that stores its metrics and records how it ended, and the
// settling of runs whose worker is gone. With a StoreService set, every launch goes through the
// run store (the row is created, validated and priced before anything starts); without one,
// runs are kept in memory for this session only.
#pragma once

#include <QList>
#include <QObject>
#include <QString>
#include <QStringList>

#include <optional>

#include "engine/config/run_config.h"
#include "ui/runs/passphraseprompt.h"
#include "ui/runs/remoterun.h"

namespace flotilla::ui {

class LocalRun;
class RemoteRun;
class RunHandle;
class StoreService;

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
  // How the runs on SSH nodes it starts or re-attaches ask for a key's passphrase (default: the
  // dialog; tests answer it).
  void setPassphrasePrompt(PassphrasePrompt prompt) { m_prompt = std::move(prompt); }

  // Starts `flotilla-worker demo` in a new run folder. nullptr with *error when the worker is
  // missing or the folder cannot be made; a run that fails later reports through its state.
  LocalRun* startDemo(QString* error = nullptr);
  // Starts a run from a config (the New Run wizard's): a new run folder named after run.name,
  // the config written there as run.toml with run.out_dir set to the folder, and the worker
  // started on it (LocalRun::trainArguments). nullptr with *error as for startDemo.
  LocalRun* startConfig(const flotilla::RunConfig& config, int ranks, QString* error = nullptr);

  // Resumes a stopped/preempted/failed stored run in place (same row, same folder) from its
  // newest verified checkpoint (`train --resume auto`). nullptr with *error when not resumable.
  LocalRun* resumeRun(qint64 storeId, QString* error = nullptr);
  // A new run (its own row, parent = storeId, kind fork, and its own folder) that starts from
  // `checkpointDir` (checkpoint.resume = that directory) with the parent's config.
  LocalRun* forkRun(qint64 storeId, const QString& checkpointDir, QString* error = nullptr);
  // For every run the store says is running on this machine: re-attach when its worker is still
  // alive (watched on from the committed offset), else settle it (runs/stale_runs.h: what is left
  // of its file is stored, then it ends as its summary says, or failed as lost), off the UI
  // thread, each settled run reported by StoreService::runEnded. Returns the number re-attached.
  int reattachRunning();
  LocalRun* runForStoreId(qint64 storeId) const;

  // Starts `config` on stored SSH nodes (names, the master first) as a RemoteRun: the store row,
  // deploy and start happen on its thread exactly as `flotilla run CONFIG --nodes` does them.
  // nullptr with *error when there is no store or no worker to deploy.
  // `recovery`: the user's choice about preemptions (recorded with the run, see remoterun.h).
  // A budget on nodes nothing prices is refused on the run's thread before anything starts; the
  // RemoteRun then ends failed with the fix named.
  RemoteRun* startOnNodes(const flotilla::RunConfig& config, const QStringList& nodes,
                          const RecoveryChoice& recovery, QString* error = nullptr);
  RemoteRun* startOnNodes(const flotilla::RunConfig& config, const QStringList& nodes,
                          QString* error = nullptr) {
    return startOnNodes(config, nodes, RecoveryChoice{}, error);
  }
  // Submits `config` to the stored Slurm cluster `launch.cluster` (the wizard's "Slurm cluster"
  // target) and watches its job; a refusal (a field, the login node's key, a budget on an unpriced
  // partition) ends the RemoteRun failed with it, before any job exists.
  RemoteRun* startOnCluster(const flotilla::RunConfig& config, const ClusterLaunch& launch,
                            QString* error = nullptr);
  // Resumes stored Slurm run `storeId` (ended stopped or failed) on its cluster: a RemoteRun that
  // submits its batch script again and watches the new job. nullptr with *error (what to do
  // instead) when the run has not ended, has completed, or is not a Slurm run.
  RemoteRun* resumeOnCluster(qint64 storeId, QString* error = nullptr);
  // Watches stored run `storeId`, running on SSH nodes and not watched by this session, from its
  // committed offset (as reattachRunning() does at start). nullptr with *error when it is not
  // running on nodes; this session's RemoteRun when it watches the run already.
  RemoteRun* attachRemote(qint64 storeId, QString* error = nullptr);
  // Runs on SSH nodes of this session (started or re-attached), oldest first. reattachRunning()
  // also re-attaches every stored run that is running on nodes (counted in its result).
  const QList<RemoteRun*>& remoteRuns() const { return m_remote; }
  // This session's RemoteRun of stored run `storeId` (the newest), or nullptr.
  RemoteRun* remoteRunForStoreId(qint64 storeId) const;
  // The session's LocalRun of a stored run, or a read-only one made for it (LocalRun::review)
  // when the run is not active here. nullptr when the store has no such run.
  LocalRun* openStored(qint64 storeId);

  int count() const { return static_cast<int>(m_runs.size()); }
  LocalRun* at(int index) const { return m_runs.value(index); }
  int indexOf(const LocalRun* run) const;
  int runningCount() const;

  void stopAll();    // graceful (SIGTERM) for every active run
  void detachAll();  // leave every active run running, unsupervised

 signals:
  void runAdded(int index);
  void runChanged(int index);  // progress or state of the run at index changed
  void runningCountChanged(int count);
  // A run on SSH nodes joined this session (started or re-attached).
  void remoteRunAdded(flotilla::ui::RemoteRun* run);
  // reattachRunning() re-attached `run` (a LocalRun or a RemoteRun), after runAdded/remoteRunAdded.
  void runReattached(flotilla::ui::RunHandle* run);

 private:
  void add(LocalRun* run);
  void addRemote(RemoteRun* run);
  // A new RemoteRun for `config` (a unique name, its mirror folder, the passphrase prompt), added.
  RemoteRun* newRemoteRun(const flotilla::RunConfig& config);
  bool newNameAllowed(const std::string& name, QString* error) const;
  void recount();  // emits runningCountChanged when the number of active runs changed
  // Creates (through the runs layer) and starts a run; nullptr with *error when it was refused.
  LocalRun* createAndStart(const flotilla::RunConfig& config, bool demo, std::optional<qint64> forkOf,
                           QString* error);
  LocalRun* launch(const QString& name, const QString& dir, const QStringList& args, qint64 storeId);

  QString m_workspace;
  QString m_workerPath;
  int m_demoSteps = 0;
  QStringList m_demoOverrides;
  QList<LocalRun*> m_runs;
  QList<RemoteRun*> m_remote;
  StoreService* m_store = nullptr;
  int m_running = 0;
  PassphrasePrompt m_prompt = askPassphraseDialog;
};

}  // namespace flotilla::ui
