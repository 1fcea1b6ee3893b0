// The runs launched on this machine in this session: the service the Runs table, the Live page,
// the status bar and the close question watch (STYLE.md principle 9).
//
// Decision: the worker is found next to the app (the build and the packages put flotilla and
// flotilla-worker in the same bin/ folder), then on PATH; an explicit path overrides both. Run
// folders are <workspace>/runs/<name>-<yyyyMMdd-HHmmss>, so two runs never share a metrics file.
// The run store issue replaces this in-memory list with the database; the signals stay.
#pragma once

#include <QList>
#include <QObject>
#include <QString>
#include <QStringList>

#include "engine/config/run_config.h"

namespace flotilla::ui {

class LocalRun;

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

  // Starts `flotilla-worker demo` in a new run folder. nullptr with *error when the worker is
  // missing or the folder cannot be made; a run that fails later reports through its state.
  LocalRun* startDemo(QString* error = nullptr);
  // Starts a run from a config (the New Run wizard's): a new run folder named after run.name,
  // the config written there as run.toml with run.out_dir set to the folder, and the worker
  // started on it (LocalRun::trainArguments). nullptr with *error as for startDemo.
  LocalRun* startConfig(const flotilla::RunConfig& config, int ranks, QString* error = nullptr);

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

 private:
  QString newRunDir(const QString& prefix, QString* name) const;
  void add(LocalRun* run);

  QString m_workspace;
  QString m_workerPath;
  int m_demoSteps = 0;
  QStringList m_demoOverrides;
  QList<LocalRun*> m_runs;
  int m_running = 0;
};

}  // namespace flotilla::ui
