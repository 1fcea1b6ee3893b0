// The session's local runs (see localruns.h).
#include "ui/runs/localruns.h"

#include <QCoreApplication>
#include <QDateTime>
#include <QDir>
#include <QFileInfo>
#include <QSaveFile>
#include <QStandardPaths>

#include <algorithm>

#include "db/run_store.h"
#include "engine/config/config_io.h"
#include "engine/core/error.h"
#include "ui/runs/localrun.h"
#include "ui/runs/remoterun.h"
#include "ui/runs/storeservice.h"

namespace flotilla::ui {
namespace {
const QString kWorkerName = QStringLiteral("flotilla-worker");

int ranksOf(const flotilla::RunConfig& c) { return std::max(1, c.parallel.dp * c.parallel.tp * c.parallel.pp); }

// The config a stored run was started with: the worker's resolved copy in its folder, else the
// one the app wrote, else the store's text. Empty path when none can be read.
QString configFileOf(const flotilla::db::Run& run) {
  const QDir dir(QString::fromStdString(run.run_dir));
  for (const char* name : {"config.toml", "run.toml"})
    if (QFileInfo::exists(dir.filePath(QLatin1String(name)))) return dir.filePath(QLatin1String(name));
  if (run.config_toml.empty() || !QDir().mkpath(dir.path())) return {};
  const QString path = dir.filePath(QStringLiteral("flotilla-config.toml"));
  QSaveFile file(path);
  const QByteArray text = QByteArray::fromStdString(run.config_toml);
  if (!file.open(QIODevice::WriteOnly) || file.write(text) != text.size() || !file.commit()) return {};
  return path;
}

bool writeConfig(const QString& path, const flotilla::RunConfig& config, QString* error) {
  QSaveFile file(path);
  const QByteArray text = QByteArray::fromStdString(flotilla::config_to_toml(config));
  if (!file.open(QIODevice::WriteOnly) || file.write(text) != text.size() || !file.commit()) {
    if (error) *error = QObject::tr("Cannot write %1: %2").arg(path, file.errorString());
    return false;
  }
  return true;
}

}  // namespace

LocalRuns::LocalRuns(const QString& workspaceDir, QObject* parent)
    : QObject(parent), m_workspace(workspaceDir) {}

QString LocalRuns::findWorker(QString* error) const {
  if (!m_workerPath.isEmpty()) {
    const QFileInfo info(m_workerPath);
    if (info.isFile() && info.isExecutable()) return info.absoluteFilePath();
    if (error) *error = tr("The worker %1 is missing or not executable.").arg(m_workerPath);
    return {};
  }
  const QString beside = QDir(QCoreApplication::applicationDirPath()).filePath(kWorkerName);
  const QFileInfo info(beside);
  if (info.isFile() && info.isExecutable()) return beside;
  const QString onPath = QStandardPaths::findExecutable(kWorkerName);
  if (!onPath.isEmpty()) return onPath;
  if (error)
    *error = tr("flotilla-worker was not found next to Flotilla (%1) or on PATH. It is built together with "
                "the app into the same bin/ folder; build it, or put its folder on PATH.")
                 .arg(QCoreApplication::applicationDirPath());
  return {};
}

QString LocalRuns::newRunDir(const QString& prefix, QString* name) const {
  const QDir runs(QDir(m_workspace).filePath(QStringLiteral("runs")));
  const QString base =
      prefix + QLatin1Char('-') + QDateTime::currentDateTime().toString(QStringLiteral("yyyyMMdd-HHmmss"));
  QString candidate = base;
  for (int n = 2; runs.exists(candidate); ++n) candidate = base + QLatin1Char('-') + QString::number(n);
  *name = candidate;
  return runs.filePath(candidate);
}

LocalRun* LocalRuns::startDemo(QString* error) {
  const QString worker = findWorker(error);
  if (worker.isEmpty()) return nullptr;
  QString name;
  const QString dir = newRunDir(QStringLiteral("demo"), &name);
  if (!QDir().mkpath(dir)) {
    if (error) *error = tr("Cannot create the run folder %1: check that the workspace is writable.").arg(dir);
    return nullptr;
  }
  auto* run = new LocalRun(name, dir, this);
  if (!storeRun(run, {}, {}, 1, error)) {
    delete run;
    return nullptr;
  }
  add(run);
  QStringList args = LocalRun::demoArguments(dir, m_demoSteps);
  for (const QString& kv : m_demoOverrides) args << QStringLiteral("--set") << kv;
  run->start(worker, args);
  return run;
}

LocalRun* LocalRuns::startConfig(const flotilla::RunConfig& config, int ranks, QString* error) {
  const QString worker = findWorker(error);
  if (worker.isEmpty()) return nullptr;
  QString name;
  const QString dir = newRunDir(QString::fromStdString(config.run.name), &name);
  if (!QDir().mkpath(dir)) {
    if (error) *error = tr("Cannot create the run folder %1: check that the workspace is writable.").arg(dir);
    return nullptr;
  }
  flotilla::RunConfig resolved = config;
  resolved.run.out_dir = dir.toStdString();
  resolved.run.name = name.toStdString();
  const QString path = QDir(dir).filePath(QStringLiteral("run.toml"));
  if (!writeConfig(path, resolved, error)) return nullptr;
  auto* run = new LocalRun(name, dir, this);
  if (!storeRun(run, flotilla::config_to_toml(resolved), flotilla::config_to_json(resolved, -1), ranks, error)) {
    delete run;
    return nullptr;
  }
  add(run);
  run->start(worker, LocalRun::trainArguments(path, ranks));
  return run;
}

bool LocalRuns::storeRun(LocalRun* run, const std::string& configToml, const std::string& configJson,
                         int ranks, QString* error) {
  if (!m_store) return true;
  flotilla::db::NewRun row;
  row.name = m_store->uniqueName(run->name()).toStdString();
  row.config_toml = configToml;
  row.config_json = configJson.empty() ? std::string("{}") : configJson;
  row.run_dir = run->runDir().toStdString();
  QString why;
  const qint64 id = m_store->createRun(row, ranks, &why);
  if (id == 0) {
    if (error) *error = tr("The run database refused the new run: %1").arg(why);
    return false;
  }
  run->setStoreId(id);
  return true;
}

void LocalRuns::connectStore(LocalRun* run) {
  if (!m_store || run->storeId() == 0) return;
  const qint64 id = run->storeId();
  if (run->isActive() || run->state() == LocalRun::State::NotStarted) m_store->track(id, run->metricsPath());
  connect(run, &LocalRun::stateChanged, this, [this, run, id](LocalRun::State state) {
    if (state == LocalRun::State::Running && !run->isAttached())
      m_store->setStatus(id, flotilla::db::RunStatus::kRunning, tr("app: worker started: %1").arg(run->commandLine()));
    if (state == LocalRun::State::Detached) {
      m_store->addEvent(id, QStringLiteral("info"),
                        tr("left running when Flotilla closed (pid %1)").arg(run->pid()));
      m_store->untrack(id);
    }
  });
  connect(run, &LocalRun::finished, this, [this, run, id](int exitCode, QProcess::ExitStatus, const QString&) {
    RunEnd end;
    end.exit_code = exitCode;
    const QString state = run->stateText();
    switch (run->state()) {
      case LocalRun::State::Completed:
        end.status = flotilla::db::RunStatus::kCompleted;
        break;
      case LocalRun::State::Stopped:
        end.status = run->stopRequested() ? flotilla::db::RunStatus::kStopped : flotilla::db::RunStatus::kPreempted;
        break;
      case LocalRun::State::Killed:
        end.status = flotilla::db::RunStatus::kStopped;
        break;
      default:
        end.status = flotilla::db::RunStatus::kFailed;
        if (exitCode < 0) end.exit_code.reset();
        break;
    }
    end.reason = tr("app: worker ended: %1").arg(state).toStdString();
    if (run->isAttached() && end.status == flotilla::db::RunStatus::kFailed) {
      end.reason = tr("lost: the worker (pid %1) ended while Flotilla was away and left no summary")
                       .arg(run->pid())
                       .toStdString();
      end.only_if_running = true;
    }
    m_store->finish(id, run->metricsPath(), end);
  });
}

LocalRun* LocalRuns::launch(const QString& name, const QString& dir, const QStringList& args, qint64 storeId) {
  auto* run = new LocalRun(name, dir, this);
  run->setStoreId(storeId);
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
  if (RemoteRun::isNodeRunDir(QString::fromStdString(stored->run_dir))) {
    if (error)
      *error = tr("Run %1 ran on SSH nodes (%2); resume it from a terminal with: flotilla runs resume %1")
                   .arg(name, QString::fromStdString(stored->target));
    return nullptr;
  }
  if (stored->status == flotilla::db::RunStatus::kRunning || stored->status == flotilla::db::RunStatus::kCompleted ||
      stored->run_dir.empty()) {
    if (error)
      *error = tr("Run %1 is %2 and cannot be resumed%3.")
                   .arg(name, QString::fromLatin1(flotilla::db::to_string(stored->status)),
                        stored->status == flotilla::db::RunStatus::kCompleted ? tr(" (fork it instead)") : QString());
    return nullptr;
  }
  const QString dir = QString::fromStdString(stored->run_dir);
  const QString config = configFileOf(*stored);
  int ranks = 1;
  try {
    ranks = ranksOf(flotilla::load_config_file(config.toStdString()));
  } catch (const flotilla::Error& e) {
    if (error) *error = tr("Cannot read the config of run %1: %2").arg(name, QString::fromUtf8(e.what()));
    return nullptr;
  }
  QStringList args = LocalRun::trainArguments(config, ranks);
  args << QStringLiteral("--resume") << QStringLiteral("auto") << QStringLiteral("--set")
       << QStringLiteral("run.out_dir=") + dir;
  return launch(name, dir, args, storeId);
}

LocalRun* LocalRuns::forkRun(qint64 storeId, const QString& checkpointDir, QString* error) {
  const QString worker = findWorker(error);
  if (worker.isEmpty()) return nullptr;
  const std::optional<flotilla::db::Run> parent = m_store ? m_store->run(storeId) : std::nullopt;
  if (!parent) {
    if (error) *error = tr("Run %1 is not in the run database.").arg(storeId);
    return nullptr;
  }
  flotilla::RunConfig config;
  try {
    config = flotilla::load_config_file(configFileOf(*parent).toStdString());
  } catch (const flotilla::Error& e) {
    if (error) *error = tr("Cannot read the config of run %1: %2").arg(QString::fromStdString(parent->name),
                                                                         QString::fromUtf8(e.what()));
    return nullptr;
  }
  QString name;
  const QString dir = newRunDir(QString::fromStdString(parent->name) + QStringLiteral("-fork"), &name);
  if (!QDir().mkpath(dir)) {
    if (error) *error = tr("Cannot create the run folder %1: check that the workspace is writable.").arg(dir);
    return nullptr;
  }
  config.run.name = name.toStdString();
  config.run.out_dir = dir.toStdString();
  config.checkpoint.resume = checkpointDir.toStdString();
  const QString path = QDir(dir).filePath(QStringLiteral("run.toml"));
  if (!writeConfig(path, config, error)) return nullptr;
  QString why;
  const qint64 id = m_store->createFork(storeId, name, flotilla::config_to_toml(config),
                                        flotilla::config_to_json(config, -1), dir, ranksOf(config), &why);
  if (id == 0) {
    if (error) *error = tr("The run database refused the fork: %1").arg(why);
    return nullptr;
  }
  return launch(name, dir, LocalRun::trainArguments(path, ranksOf(config)), id);
}

int LocalRuns::reattachRunning() {
  if (!m_store) return 0;
  int attached = 0;
  for (const flotilla::db::Run& stored : m_store->runningLocalRuns()) {
    if (runForStoreId(stored.id)) continue;  // supervised by this session already
    const QString dir = QString::fromStdString(stored.run_dir);
    const qint64 pid = dir.isEmpty() ? 0 : LocalRun::liveWorkerPid(dir);
    auto* run = new LocalRun(QString::fromStdString(stored.name), dir, this);
    run->setStoreId(stored.id);
    if (pid > 0 && run->attach(pid)) {
      add(run);
      ++attached;
      emit runReattached(run);
      continue;
    }
    delete run;
    RunEnd end;
    end.status = flotilla::db::RunStatus::kFailed;
    end.only_if_running = true;
    end.reason = tr("lost: its worker is no longer running (found at start; the rest of its metrics "
                    "file was stored)")
                     .toStdString();
    m_store->finish(stored.id, QDir(dir).filePath(QStringLiteral("metrics.jsonl")), end);
  }
  // Runs on SSH nodes: watched again from the committed offset (like `flotilla runs attach`).
  const QString mirrors = QDir(m_workspace).filePath(QStringLiteral("remote-runs"));
  for (RemoteRun* run : RemoteRun::reattachRunning(m_store->databasePath(), mirrors, this, m_prompt, findWorker())) {
    bool known = false;
    for (const RemoteRun* other : std::as_const(m_remote)) known = known || other->storeId() == run->storeId();
    if (known) {
      delete run;  // watched by this session already; leaves the run as it is
      continue;
    }
    m_remote.append(run);
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
  m_remote.append(run);
  emit remoteRunAdded(run);
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
  const QString worker = findWorker(error);
  if (worker.isEmpty()) return nullptr;
  const QString name = QString::fromStdString(config.run.name);
  const QString mirror =
      QDir(m_workspace)
          .filePath(QStringLiteral("remote-runs/") + name + QLatin1Char('-') +
                    QDateTime::currentDateTime().toString(QStringLiteral("yyyyMMdd-HHmmss-zzz")));
  auto* run = new RemoteRun(name, m_store->databasePath(), mirror, this);
  run->setPassphrasePrompt(m_prompt);
  m_remote.append(run);
  run->start(config, nodes, worker, recovery);
  emit remoteRunAdded(run);
  return run;
}

LocalRun* LocalRuns::openStored(qint64 storeId) {
  if (LocalRun* run = runForStoreId(storeId)) return run;
  const std::optional<flotilla::db::Run> stored = m_store ? m_store->run(storeId) : std::nullopt;
  if (!stored || stored->run_dir.empty()) return nullptr;
  auto* run = new LocalRun(QString::fromStdString(stored->name), QString::fromStdString(stored->run_dir), this);
  run->setStoreId(storeId);
  using S = flotilla::db::RunStatus;
  run->review(stored->status == S::kCompleted ? LocalRun::State::Completed
              : stored->status == S::kFailed  ? LocalRun::State::Failed
                                              : LocalRun::State::Stopped);
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
  connectStore(run);
  auto recount = [this] {
    const int n = runningCount();
    if (n == m_running) return;
    m_running = n;
    emit runningCountChanged(n);
  };
  connect(run, &LocalRun::stateChanged, this, [this, run, recount] {
    recount();
    emit runChanged(indexOf(run));
  });
  connect(run, &LocalRun::changed, this, [this, run] { emit runChanged(indexOf(run)); });
  emit runAdded(count() - 1);
}

int LocalRuns::indexOf(const LocalRun* run) const {
  for (int i = 0; i < m_runs.size(); ++i)
    if (m_runs[i] == run) return i;
  return -1;
}

int LocalRuns::runningCount() const {
  int n = 0;
  for (const LocalRun* run : m_runs) n += run->isActive() ? 1 : 0;
  return n;
}

void LocalRuns::stopAll() {
  for (LocalRun* run : m_runs) run->stop();
}

void LocalRuns::detachAll() {
  for (LocalRun* run : m_runs) run->detach();
}

}  // namespace flotilla::ui
