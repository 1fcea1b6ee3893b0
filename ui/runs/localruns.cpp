// The session's local runs (see localruns.h).
#include "ui/runs/localruns.h"

#include <QCoreApplication>
#include <QDateTime>
#include <QDir>
#include <QFileInfo>
#include <QSaveFile>
#include <QStandardPaths>

#include "engine/config/config_io.h"
#include "ui/runs/localrun.h"

namespace flotilla::ui {
namespace {
const QString kWorkerName = QStringLiteral("flotilla-worker");
}

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
  const QString path = QDir(dir).filePath(QStringLiteral("run.toml"));
  QSaveFile file(path);
  const QByteArray text = QByteArray::fromStdString(flotilla::config_to_toml(resolved));
  if (!file.open(QIODevice::WriteOnly) || file.write(text) != text.size() || !file.commit()) {
    if (error) *error = tr("Cannot write %1: %2").arg(path, file.errorString());
    return nullptr;
  }
  auto* run = new LocalRun(name, dir, this);
  add(run);
  run->start(worker, LocalRun::trainArguments(path, ranks));
  return run;
}

void LocalRuns::add(LocalRun* run) {
  m_runs.append(run);
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
