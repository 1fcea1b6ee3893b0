// The session's runs (see localruns.h): a Qt model over the runs service.
#include "ui/runs/localruns.h"

#include <QDir>

#include <algorithm>

#include "db/errors.h"
#include "engine/core/error.h"
#include "flotilla/build_info.h"
#include "runs/node_run.h"
#include "runs/run_setup.h"
#include "runs/worker_command.h"
#include "ui/runs/relaunchdialog.h"
#include "ui/runs/storeservice.h"

namespace flotilla::ui {
namespace {

// A place with no host to reach opens in milliseconds (a row, a folder, a process): on the UI
// thread, so the caller has the run's row and folder at once. Anything else connects first.
bool opensWithoutNetwork(const runs::Placement& where) {
  return where.nodes.empty() && where.cluster.empty();
}

}  // namespace

LocalRuns::LocalRuns(const QString& workspaceDir, QObject* parent)
    : QObject(parent), m_workspace(workspaceDir) {}

QString LocalRuns::findWorker(QString* error) const {
  try {
    return QString::fromStdString(runs::find_worker(m_workerPath.toStdString()));
  } catch (const flotilla::Error& e) {
    if (error) *error = QString::fromUtf8(e.what());
    return {};
  }
}

runs::ServiceOptions LocalRuns::serviceOptions() const {
  runs::ServiceOptions o;
  if (m_store) {
    o.ssh.database_path = m_store->databasePath().toStdString();
    o.writer = &m_store->writer();
  }
  // A refused host key is trusted on the Nodes page (or, for a cluster, the Clusters page).
  o.ssh.host_key_text = [](const runs::HostKeyRefusal& r) {
    return (r.cluster ? "cluster " : "node ") + r.node + ": " + r.what +
           (r.cluster ? " (check the key and trust it on the Clusters page)"
                      : " (check the key and trust it on the Nodes page)");
  };
  o.runs_root = QDir(m_workspace).filePath(QStringLiteral("runs")).toStdString();
  o.worker_path = m_workerPath.toStdString();
  o.version = FLOTILLA_VERSION_STRING;
  o.origin = "flotilla app";
  o.stop_with_parent = false;  // a run outlives the window: closing asks whether to stop or leave it
  o.checkpoints_root = QDir(m_workspace).filePath(QStringLiteral("remote-runs")).toStdString();
  return o;
}

bool LocalRuns::precheck(const flotilla::RunConfig& config, bool demo, const runs::Placement& where,
                         QString* error) const {
  if (!opensWithoutNetwork(where) && !m_store) {
    if (error)
      *error = tr("Runs on %1 need the run store; it could not be opened.")
                   .arg(QString::fromStdString(where.text()));
    return false;
  }
  if (!demo) {
    try {
      runs::check_new_run_name(config.run.name);  // the runs layer's one rule for every run
    } catch (const flotilla::Error& e) {
      if (error) *error = tr("The run was not started: %1").arg(QString::fromUtf8(e.what()));
      return false;
    }
  }
  return !findWorker(error).isEmpty();
}

ServiceRun* LocalRuns::newRun(const QString& name) {
  auto* run = new ServiceRun(name, serviceOptions(), this);
  run->setPassphrasePrompt(m_prompt);
  return run;
}

ServiceRun* LocalRuns::startDemo(QString* error) {
  flotilla::RunConfig config;
  config.run.name = "demo";
  if (!precheck(config, true, runs::Placement::here(), error)) return nullptr;
  runs::RunRequest req;
  req.config = config;
  req.demo = true;
  req.demo_steps = m_demoSteps;
  for (const QString& kv : m_demoOverrides) req.demo_sets.push_back(kv.toStdString());
  ServiceRun* run = newRun(QStringLiteral("demo"));
  // A worker that cannot start is a run that failed (shown with why), not a refused request.
  run->open([req](runs::RunService& s, const runs::Note& p) { return s.start(req, p); }, QString(), true);
  add(run);
  return run;
}

ServiceRun* LocalRuns::start(const flotilla::RunConfig& config, const runs::Placement& where,
                             QString* error) {
  if (!precheck(config, false, where, error)) return nullptr;
  runs::RunRequest req;
  req.config = config;
  req.where = where;
  const bool here = opensWithoutNetwork(where);
  ServiceRun* run = newRun(QString::fromStdString(config.run.name));
  // Stop while a model by name is fetched on the nodes ends the fetch: the run is recorded stopped.
  req.cancelled = [run] { return run->stopFlagged(); };
  run->setPlacement(where);
  run->open([req](runs::RunService& s, const runs::Note& p) { return s.start(req, p); },
            here ? QString() : tr("starting on %1").arg(QString::fromStdString(where.text())), here);
  if (here && run->state() == ServiceRun::State::Failed && run->storeId() == 0) {
    // Refused before anything ran (an invalid config, a refused store): nothing to show.
    if (error) *error = tr("The run was not started: %1").arg(run->errorText());
    delete run;
    return nullptr;
  }
  add(run);
  return run;
}

ServiceRun* LocalRuns::startConfig(const flotilla::RunConfig& config, int /*ranks: dp*tp*pp of config*/,
                                   QString* error) {
  return start(config, runs::Placement::here(), error);
}

ServiceRun* LocalRuns::startOnNodes(const flotilla::RunConfig& config, const QStringList& nodes,
                                    const RecoveryChoice& recovery, QString* error) {
  if (nodes.isEmpty()) {
    if (error) *error = tr("Choose at least one node.");
    return nullptr;
  }
  std::vector<std::string> names;
  for (const QString& n : nodes) names.push_back(n.toStdString());
  runs::Placement where = runs::Placement::on_nodes(names);
  where.recovery = toRunsRecovery(recovery);
  return start(config, where, error);
}

ServiceRun* LocalRuns::startOnCluster(const flotilla::RunConfig& config, const ClusterLaunch& launch,
                                      QString* error) {
  if (launch.cluster.isEmpty()) {
    if (error) *error = tr("Choose a stored Slurm cluster.");
    return nullptr;
  }
  return start(config, placementOf(launch), error);
}

ServiceRun* LocalRuns::resumeRun(qint64 storeId, const RelaunchChoice* choice, QString* error) {
  if (ServiceRun* run = runForStoreId(storeId); run && run->isActive()) return run;
  const QString worker = findWorker(error);
  if (worker.isEmpty()) return nullptr;
  if (!m_store) {
    if (error) *error = tr("Runs can only be resumed from the run database.");
    return nullptr;
  }
  const std::optional<flotilla::db::Run> stored = m_store->run(storeId);
  if (!stored) {
    if (error) *error = tr("Run %1 is not in the run database.").arg(storeId);
    return nullptr;
  }
  const QString name = QString::fromStdString(stored->name);
  runs::RunService service(serviceOptions());
  if (const std::string why = service.abilities(*stored).resume; !why.empty()) {
    if (error)
      *error = tr("%1: use Duplicate to start its configuration again, or Fork to continue from one of its "
                  "checkpoints.")
                   .arg(QString::fromStdString(why));
    return nullptr;
  }
  runs::ResumeRequest req;
  runs::Placement where = runs::RunService::placement_of(*stored);
  if (choice) {
    req.layout = choice->layout;
    if (choice->targetChanged) {
      where = placementOf(choice->target, choice->config);
      req.where = where;
    }
  }
  ServiceRun* run = newRun(name);
  run->setStoreId(storeId);
  run->setStored(*stored);
  run->setPlacement(where);
  add(run);
  const QString what =
      choice && choice->layoutChanged
          ? tr("resuming %1 on %2 with %3")
                .arg(name, QString::fromStdString(where.text()), QString::fromStdString(req.layout.text()))
          : tr("resuming %1 on %2").arg(name, QString::fromStdString(where.text()));
  run->open([storeId, req](runs::RunService& s, const runs::Note& p) { return s.resume(storeId, req, p); },
            what, opensWithoutNetwork(where));
  m_store->refresh();
  return run;
}

ServiceRun* LocalRuns::forkRun(qint64 storeId, const QString& checkpointDir, const RelaunchChoice* choice,
                               QString* error, qint64 step) {
  const std::optional<flotilla::db::Run> parent = m_store ? m_store->run(storeId) : std::nullopt;
  if (!parent) {
    if (error) *error = tr("Run %1 is not in the run database.").arg(storeId);
    return nullptr;
  }
  if (findWorker(error).isEmpty()) return nullptr;
  runs::ForkRequest req;
  req.checkpoint_dir = checkpointDir.toStdString();
  if (checkpointDir.isEmpty() && step >= 0) req.step = step;
  runs::Placement where = runs::Placement::here();
  if (choice) {
    req.layout = choice->layout;
    where = placementOf(choice->target, choice->config);
    req.where = where;
  }
  ServiceRun* run = newRun(QString::fromStdString(parent->name) + QStringLiteral("-fork"));
  add(run);
  run->open(
      [storeId, req](runs::RunService& s, const runs::Note& p) { return s.fork(storeId, req, p); },
      tr("forking %1 on %2").arg(QString::fromStdString(parent->name), QString::fromStdString(where.text())),
      opensWithoutNetwork(where) && !checkpointDir.isEmpty());
  m_store->refresh();
  return run;
}

ServiceRun* LocalRuns::attachRun(qint64 storeId, QString* error) {
  // Watched here already (a run only followed in the store is not: it is attached now).
  if (ServiceRun* run = runForStoreId(storeId); run && run->isActive() && !run->isFollowed()) return run;
  if (!m_store) {
    if (error) *error = tr("Attaching needs the run store; it could not be opened.");
    return nullptr;
  }
  const std::optional<flotilla::db::Run> stored = m_store->run(storeId);
  if (!stored) {
    if (error) *error = tr("Run %1 is not in the run database.").arg(storeId);
    return nullptr;
  }
  runs::RunService service(serviceOptions());
  if (const std::string why = service.abilities(*stored).attach; !why.empty()) {
    if (error) *error = QString::fromStdString(why);
    return nullptr;
  }
  const runs::Placement where = runs::RunService::placement_of(*stored);
  ServiceRun* run = newRun(QString::fromStdString(stored->name));
  run->setStoreId(storeId);
  run->setStored(*stored);
  run->setPlacement(where);
  // The launch's choice about preemptions, as the store keeps it (less the recoveries done).
  try {
    m_store->writer().run([&](flotilla::db::Database& db) {
      const runs::RecoveryPolicy p = runs::stored_recovery_policy(db, storeId);
      RecoveryChoice c;
      c.enabled = p.enabled;
      for (const auto& s : p.spares) c.spares << QString::fromStdString(s);
      c.maxRecoveries = p.max_recoveries;
      c.settleSeconds = p.settle_seconds;
      c.mirrorCheckpoints = p.mirror;
      run->setRecovery(c);
    });
  } catch (const std::exception&) {
  }
  add(run);
  run->open([storeId](runs::RunService& s, const runs::Note& p) { return s.attach(storeId, p); },
            tr("re-attaching to %1 on %2")
                .arg(run->name(), QString::fromStdString(runs::RunService::where_text(*stored))),
            opensWithoutNetwork(where), true);
  return run;
}

int LocalRuns::reattachRunning() {
  if (!m_store) return 0;
  // Runs whose worker is gone: what they left is stored and they are ended, off the UI thread.
  m_store->settleStaleRuns(QStringLiteral("flotilla app at start"));
  std::vector<int64_t> ids;
  try {
    ids = runs::RunService(serviceOptions()).attachable_runs();
  } catch (const std::exception&) {
    return 0;  // no store (yet): nothing to re-attach
  }
  int attached = 0;
  for (const int64_t id : ids) {
    if (runForStoreId(id)) continue;  // watched by this session already
    if (ServiceRun* run = attachRun(id)) {
      ++attached;
      emit runReattached(run);
    }
  }
  return attached;
}

ServiceRun* LocalRuns::openStored(qint64 storeId) {
  const std::optional<flotilla::db::Run> stored = m_store ? m_store->run(storeId) : std::nullopt;
  // The session's run, unless it is one this session followed to an end the store has left since
  // (resumed in the same row by another program): that one is followed afresh.
  if (ServiceRun* run = runForStoreId(storeId);
      run && !(run->isFollowed() && !run->isActive() && stored &&
               ServiceRun::stateOf(stored->status) == ServiceRun::State::Running))
    return run;
  if (!stored) return nullptr;
  auto* run = newRun(QString::fromStdString(stored->name));
  run->setStoreId(storeId);
  run->setStored(*stored);
  // Followed in the store while its row says it runs (another window's, `flotilla run`'s), then in
  // the state the row gives.
  run->review(ServiceRun::stateOf(stored->status), m_store->databasePath());
  add(run);
  return run;
}

ServiceRun* LocalRuns::runForStoreId(qint64 storeId) const {
  for (qsizetype i = m_runs.size() - 1; i >= 0; --i)
    if (m_runs[i]->storeId() == storeId) return m_runs[i];
  return nullptr;
}

void LocalRuns::add(ServiceRun* run) {
  m_runs.append(run);
  if (m_store) {
    // The watcher writes the run's status; the table re-reads the store when it changes.
    connect(run, &RunHandle::stateChanged, m_store, &StoreService::refresh);
    connect(run, &ServiceRun::storeIdKnown, m_store, &StoreService::refresh);
    connect(run, &ServiceRun::finished, m_store, [store = m_store, run] {
      if (run->storeId() > 0)
        emit store->runEnded(run->storeId(), QString::fromLatin1(flotilla::db::to_string(run->endStatus())));
      store->refresh();
    });
  }
  connect(run, &RunHandle::stateChanged, this, [this, run] {
    recount();
    emit runChanged(indexOf(run));
  });
  connect(run, &RunHandle::changed, this, [this, run] { emit runChanged(indexOf(run)); });
  emit runAdded(count() - 1);
  recount();
}

int LocalRuns::indexOf(const RunHandle* run) const {
  for (int i = 0; i < m_runs.size(); ++i)
    if (m_runs[i] == run) return i;
  return -1;
}

int LocalRuns::runningCount() const {
  int n = 0;
  // A run only followed in the store is watched (and counted) by whoever started it.
  for (const ServiceRun* run : m_runs) n += run->isActive() && !run->isFollowed() ? 1 : 0;
  return n;
}

void LocalRuns::recount() {
  const int n = runningCount();
  if (n == m_running) return;
  m_running = n;
  emit runningCountChanged(n);
}

void LocalRuns::stopAll() {
  for (ServiceRun* run : m_runs) run->stop();
}

void LocalRuns::detachAll() {
  for (ServiceRun* run : m_runs) run->detach();
}

}  // namespace flotilla::ui
