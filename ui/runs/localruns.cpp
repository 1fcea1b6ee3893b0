// The session's runs (see localruns.h): a Qt model over the runs layer's lifecycle.
#include "ui/runs/localruns.h"

#include <QCoreApplication>
#include <QDateTime>
#include <QDir>
#include <QFileInfo>
#include <QThread>

#include <algorithm>

#include "db/errors.h"
#include "db/run_store.h"
#include "db/writer.h"
#include "engine/config/config_io.h"
#include "engine/core/error.h"
#include "runs/run_setup.h"
#include "db/clusters.h"
#include "db/database.h"
#include "runs/slurm_run.h"
#include "runs/stale_runs.h"
#include "runs/worker_command.h"
#include "ui/runs/localrun.h"
#include "ui/runs/remoterun.h"
#include "ui/runs/storeservice.h"

namespace flotilla::ui {

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

LocalRun* LocalRuns::createAndStart(const flotilla::RunConfig& config, bool demo,
                                    std::optional<qint64> forkOf, QString* error) {
  const QString worker = findWorker(error);
  if (worker.isEmpty()) return nullptr;
  const std::string root = QDir(m_workspace).filePath(QStringLiteral("runs")).toStdString();
  QString name, dir, configPath;
  qint64 id = 0;
  int ranks = 1, restarts = config.run.max_restarts;
  if (m_store) {
    runs::NewRunRequest req;
    req.config = config;
    req.runs_root = root;
    req.demo = demo;
    if (forkOf) req.fork_of = *forkOf;
    try {
      const runs::NewRun nr = runs::create_local_run(m_store->writer(), req);
      id = nr.run_id;
      name = QString::fromStdString(nr.name);
      dir = QString::fromStdString(nr.run_dir);
      configPath = QString::fromStdString(nr.config_path);
      ranks = runs::ranks_of(nr.config);
      restarts = nr.config.run.max_restarts;
    } catch (const std::exception& e) {
      if (error) *error = tr("The run was not started: %1").arg(QString::fromUtf8(e.what()));
      return nullptr;
    }
    m_store->refresh();
  } else {
    try {
      if (!demo) runs::validate_run_config(config, runs::ranks_of(config));
      const auto [n, d] = runs::place_unstored_run(root, config.run.name);
      name = QString::fromStdString(n);
      dir = QString::fromStdString(d);
      if (!QDir().mkpath(dir)) {
        if (error)
          *error = tr("Cannot create the run folder %1: check that the workspace is writable.").arg(dir);
        return nullptr;
      }
      if (!demo) {
        flotilla::RunConfig resolved = config;
        resolved.run.name = n;
        resolved.run.out_dir = d;
        configPath = QDir(dir).filePath(QStringLiteral("run.toml"));
        QFile f(configPath);
        const QByteArray text = QByteArray::fromStdString(flotilla::config_to_toml(resolved));
        if (!f.open(QIODevice::WriteOnly) || f.write(text) != text.size()) {
          if (error) *error = tr("Cannot write %1: %2").arg(configPath, f.errorString());
          return nullptr;
        }
      }
      ranks = runs::ranks_of(config);
    } catch (const std::exception& e) {
      if (error) *error = tr("The run was not started: %1").arg(QString::fromUtf8(e.what()));
      return nullptr;
    }
  }
  QStringList args;
  if (demo) {
    args = LocalRun::demoArguments(dir, m_demoSteps);
    for (const QString& kv : m_demoOverrides) args << QStringLiteral("--set") << kv;
  } else {
    args = LocalRun::trainArguments(configPath, ranks, restarts);
  }
  return launch(name, dir, args, id);
}

LocalRun* LocalRuns::startDemo(QString* error) {
  flotilla::RunConfig config;
  config.run.name = "demo";
  return createAndStart(config, true, std::nullopt, error);
}

LocalRun* LocalRuns::startConfig(const flotilla::RunConfig& config, int /*ranks: dp*tp*pp of config*/,
                                 QString* error) {
  return createAndStart(config, false, std::nullopt, error);
}

LocalRun* LocalRuns::launch(const QString& name, const QString& dir, const QStringList& args,
                            qint64 storeId) {
  auto* run = new LocalRun(name, dir, this);
  run->setStoreId(storeId);
  if (m_store) run->setWriter(&m_store->writer());
  add(run);
  run->start(findWorker(), args);
  return run;
}

LocalRun* LocalRuns::resumeRun(qint64 storeId, QString* error) {
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
  if (runs::is_slurm_run(*stored)) {
    if (error)
      *error = tr("Run %1 ran on Slurm cluster %2: it resumes there (LocalRuns::resumeOnCluster), not on "
                  "this machine")
                   .arg(name, QString::fromStdString(stored->target.substr(6)));
    return nullptr;
  }
  if (RemoteRun::isNodeRunDir(QString::fromStdString(stored->run_dir))) {
    if (error)
      *error =
          tr("Run %1 ran on SSH nodes (%2), which Resume here does not reach yet: use Duplicate to start "
             "its configuration on the nodes again, or Fork to continue from its checkpoint on this machine")
              .arg(name, QString::fromStdString(stored->target));
    return nullptr;
  }
  if (stored->status == flotilla::db::RunStatus::kRunning ||
      stored->status == flotilla::db::RunStatus::kCompleted || stored->run_dir.empty()) {
    if (error)
      *error = tr("Run %1 is %2 and cannot be resumed%3.")
                   .arg(name, QString::fromLatin1(flotilla::db::to_string(stored->status)),
                        stored->status == flotilla::db::RunStatus::kCompleted ? tr(" (fork it instead)")
                                                                              : QString());
    return nullptr;
  }
  const QString dir = QString::fromStdString(stored->run_dir);
  const QString config = QString::fromStdString(runs::stored_config_file(*stored));
  flotilla::RunConfig parsed;
  try {
    parsed = flotilla::load_config_file(config.toStdString());
    runs::validate_run_config(parsed, runs::ranks_of(parsed));
    runs::reprice_for_start(m_store->writer(), storeId, parsed);
  } catch (const std::exception& e) {
    if (error) *error = tr("Run %1 was not resumed: %2").arg(name, QString::fromUtf8(e.what()));
    return nullptr;
  }
  QStringList args = LocalRun::trainArguments(config, runs::ranks_of(parsed), parsed.run.max_restarts);
  args << QStringLiteral("--resume") << QStringLiteral("auto") << QStringLiteral("--set")
       << QStringLiteral("run.out_dir=") + dir;
  return launch(name, dir, args, storeId);
}

LocalRun* LocalRuns::forkRun(qint64 storeId, const QString& checkpointDir, QString* error) {
  const std::optional<flotilla::db::Run> parent = m_store ? m_store->run(storeId) : std::nullopt;
  if (!parent) {
    if (error) *error = tr("Run %1 is not in the run database.").arg(storeId);
    return nullptr;
  }
  flotilla::RunConfig config;
  try {
    config = flotilla::load_config_file(runs::stored_config_file(*parent));
  } catch (const flotilla::Error& e) {
    if (error)
      *error = tr("Cannot read the config of run %1: %2")
                   .arg(QString::fromStdString(parent->name), QString::fromUtf8(e.what()));
    return nullptr;
  }
  config.run.name = parent->name + "-fork";
  config.run.out_dir.clear();
  config.checkpoint.resume = checkpointDir.toStdString();
  return createAndStart(config, false, storeId, error);
}

int LocalRuns::reattachRunning() {
  if (!m_store) return 0;
  int attached = 0;
  bool stale = false;
  for (const flotilla::db::Run& stored : m_store->runningLocalRuns()) {
    if (runForStoreId(stored.id)) continue;  // watched by this session already
    const QString dir = QString::fromStdString(stored.run_dir);
    const qint64 pid = dir.isEmpty() ? 0 : LocalRun::liveWorkerPid(dir);
    if (pid <= 0) {
      stale = true;
      continue;
    }
    auto* run = new LocalRun(QString::fromStdString(stored.name), dir, this);
    run->setStoreId(stored.id);
    run->setStored(stored);
    run->setWriter(&m_store->writer());
    if (run->attach(pid)) {
      add(run);
      ++attached;
      emit runReattached(run);
    } else {
      delete run;
      stale = true;
    }
  }
  // Runs whose worker is gone: what they left is stored and they are ended, off the UI thread.
  if (stale) m_store->settleStaleRuns(QStringLiteral("flotilla app at start"));
  // Runs on SSH nodes: watched again from the committed offset (like `flotilla runs attach`).
  const QString mirrors = QDir(m_workspace).filePath(QStringLiteral("remote-runs"));
  for (RemoteRun* run :
       RemoteRun::reattachRunning(m_store->databasePath(), mirrors, this, m_prompt, findWorker())) {
    bool known = false;
    for (const RemoteRun* other : std::as_const(m_remote))
      known = known || other->storeId() == run->storeId();
    if (known) {
      delete run;  // watched by this session already; leaves the run as it is
      continue;
    }
    addRemote(run);
    ++attached;
    emit remoteRunAdded(run);
    emit runReattached(run);
  }
  return attached;
}

RemoteRun* LocalRuns::attachRemote(qint64 storeId, QString* error) {
  if (RemoteRun* run = remoteRunForStoreId(storeId); run && run->isActive()) return run;
  if (!m_store) {
    if (error) *error = tr("Runs on SSH nodes need the run store; it could not be opened.");
    return nullptr;
  }
  const QString mirrors = QDir(m_workspace).filePath(QStringLiteral("remote-runs"));
  RemoteRun* run =
      RemoteRun::reattachOne(m_store->databasePath(), mirrors, storeId, this, m_prompt, findWorker(), error);
  if (!run) return nullptr;
  addRemote(run);
  emit remoteRunAdded(run);
  return run;
}

RemoteRun* LocalRuns::resumeOnCluster(qint64 storeId, QString* error) {
  if (RemoteRun* run = remoteRunForStoreId(storeId); run && run->isActive()) return run;
  if (!m_store) {
    if (error) *error = tr("Runs on a Slurm cluster need the run store; it could not be opened.");
    return nullptr;
  }
  const std::optional<flotilla::db::Run> stored = m_store->run(storeId);
  if (!stored) {
    if (error) *error = tr("Run %1 is not in the run database.").arg(storeId);
    return nullptr;
  }
  try {
    flotilla::db::OpenOptions options;
    options.create = false;
    options.quick_check = false;
    const flotilla::db::Database db(m_store->databasePath().toStdString(), options);
    flotilla::db::SlurmCluster cluster;
    if (const std::string why = runs::slurm_resume_target(db, *stored, cluster); !why.empty()) {
      if (error) *error = QString::fromStdString(why);
      return nullptr;
    }
  } catch (const std::exception& e) {
    if (error) *error = QString::fromUtf8(e.what());
    return nullptr;
  }
  const QString name = QString::fromStdString(stored->name);
  const QString mirrors = QDir(m_workspace).filePath(QStringLiteral("remote-runs"));
  auto* run = new RemoteRun(name, m_store->databasePath(), QDir(mirrors).filePath(name), this);
  run->setPassphrasePrompt(m_prompt);
  run->setWorkerPath(findWorker());
  addRemote(run);
  run->resumeOnCluster(storeId);
  emit remoteRunAdded(run);
  return run;
}

bool LocalRuns::newNameAllowed(const std::string& name, QString* error) const {
  try {
    runs::check_new_run_name(name);  // the runs layer's one rule for every kind of run
    return true;
  } catch (const flotilla::Error& e) {
    if (error) *error = tr("The run was not started: %1").arg(QString::fromUtf8(e.what()));
    return false;
  }
}

RemoteRun* LocalRuns::newRemoteRun(const flotilla::RunConfig& config) {
  const QString name = m_store->uniqueName(QString::fromStdString(config.run.name));
  const QString mirror =
      QDir(m_workspace)
          .filePath(QStringLiteral("remote-runs/") + name + QLatin1Char('-') +
                    QDateTime::currentDateTime().toString(QStringLiteral("yyyyMMdd-HHmmss-zzz")));
  auto* run = new RemoteRun(name, m_store->databasePath(), mirror, this);
  run->setPassphrasePrompt(m_prompt);
  addRemote(run);
  return run;
}

RemoteRun* LocalRuns::startOnNodes(const flotilla::RunConfig& config, const QStringList& nodes,
                                   const RecoveryChoice& recovery, QString* error) {
  if (!m_store) {
    if (error) *error = tr("Runs on SSH nodes need the run store; it could not be opened.");
    return nullptr;
  }
  if (nodes.isEmpty()) {
    if (error) *error = tr("Choose at least one node.");
    return nullptr;
  }
  if (!newNameAllowed(config.run.name, error)) return nullptr;  // before its mirror folder exists
  const QString worker = findWorker(error);
  if (worker.isEmpty()) return nullptr;
  RemoteRun* run = newRemoteRun(config);
  run->start(config, nodes, worker, recovery);
  emit remoteRunAdded(run);
  return run;
}

RemoteRun* LocalRuns::startOnCluster(const flotilla::RunConfig& config, const ClusterLaunch& launch,
                                     QString* error) {
  if (!m_store) {
    if (error) *error = tr("Runs on a Slurm cluster need the run store; it could not be opened.");
    return nullptr;
  }
  if (launch.cluster.isEmpty()) {
    if (error) *error = tr("Choose a stored Slurm cluster.");
    return nullptr;
  }
  if (!newNameAllowed(config.run.name, error)) return nullptr;  // before its mirror folder exists
  const QString worker = findWorker(error);
  if (worker.isEmpty()) return nullptr;
  RemoteRun* run = newRemoteRun(config);
  run->startOnCluster(config, launch, worker);
  emit remoteRunAdded(run);
  return run;
}

LocalRun* LocalRuns::openStored(qint64 storeId) {
  if (LocalRun* run = runForStoreId(storeId)) return run;
  const std::optional<flotilla::db::Run> stored = m_store ? m_store->run(storeId) : std::nullopt;
  if (!stored || stored->run_dir.empty()) return nullptr;
  auto* run =
      new LocalRun(QString::fromStdString(stored->name), QString::fromStdString(stored->run_dir), this);
  run->setStoreId(storeId);
  run->setStored(*stored);
  using S = flotilla::db::RunStatus;
  run->review(stored->status == S::kCompleted ? LocalRun::State::Completed
              : stored->status == S::kFailed  ? LocalRun::State::Failed
                                              : LocalRun::State::Stopped,
              m_store->databasePath());
  add(run);
  return run;
}

RemoteRun* LocalRuns::remoteRunForStoreId(qint64 storeId) const {
  for (qsizetype i = m_remote.size() - 1; i >= 0; --i)
    if (m_remote[i]->storeId() == storeId) return m_remote[i];
  return nullptr;
}

LocalRun* LocalRuns::runForStoreId(qint64 storeId) const {
  for (int i = static_cast<int>(m_runs.size()) - 1; i >= 0; --i)
    if (m_runs[i]->storeId() == storeId) return m_runs[i];
  return nullptr;
}

void LocalRuns::add(LocalRun* run) {
  m_runs.append(run);
  if (m_store) {
    // The watcher writes the run's status; the table re-reads the store when it changes.
    connect(run, &LocalRun::stateChanged, m_store, &StoreService::refresh);
    connect(run, &LocalRun::finished, m_store, [store = m_store, run] {
      if (run->storeId() > 0)
        emit store->runEnded(run->storeId(), QString::fromLatin1(flotilla::db::to_string(run->endStatus())));
      store->refresh();
    });
  }
  connect(run, &LocalRun::stateChanged, this, [this, run] {
    recount();
    emit runChanged(indexOf(run));
  });
  connect(run, &LocalRun::changed, this, [this, run] { emit runChanged(indexOf(run)); });
  emit runAdded(count() - 1);
  recount();  // a re-attached run is running before it is added
}

int LocalRuns::indexOf(const LocalRun* run) const {
  for (int i = 0; i < m_runs.size(); ++i)
    if (m_runs[i] == run) return i;
  return -1;
}

int LocalRuns::runningCount() const {
  int n = 0;
  for (const LocalRun* run : m_runs) n += run->isActive() ? 1 : 0;
  for (const RemoteRun* run : m_remote) n += run->isActive() ? 1 : 0;
  return n;
}

void LocalRuns::recount() {
  const int n = runningCount();
  if (n == m_running) return;
  m_running = n;
  emit runningCountChanged(n);
}

void LocalRuns::addRemote(RemoteRun* run) {
  m_remote.append(run);
  connect(run, &RunHandle::stateChanged, this, &LocalRuns::recount);
  recount();
}

void LocalRuns::stopAll() {
  for (LocalRun* run : m_runs) run->stop();
}

void LocalRuns::detachAll() {
  for (LocalRun* run : m_runs) run->detach();
}

}  // namespace flotilla::ui
