// Probes this machine (engine/core/probe.h) off the UI thread and keeps the last result.
//
// Decision: one shared instance owned by the main window; the Nodes page and the About box both
// read it, so the probe (which may initialise the CUDA driver, ~1 s on a GPU host) runs once at
// start and again only when the user asks for a refresh.
#pragma once

#include <QFutureWatcher>
#include <QObject>
#include <QString>

#include "engine/core/probe.h"

namespace flotilla::ui {

class MachineProbe : public QObject {
  Q_OBJECT

 public:
  explicit MachineProbe(QObject* parent = nullptr);
  ~MachineProbe() override;

  // Starts a probe on the global thread pool; does nothing while one is running.
  void start();
  bool isRunning() const;
  bool hasResult() const { return m_hasResult; }
  const flotilla::ProbeResult& result() const { return m_result; }
  // Non-empty when the last probe failed (then result() holds the previous one, if any).
  QString error() const { return m_error; }

 signals:
  void finished();

 private:
  struct Outcome {
    flotilla::ProbeResult result;
    QString error;
  };
  void onFinished();

  QFutureWatcher<Outcome> m_watcher;
  flotilla::ProbeResult m_result;
  QString m_error;
  bool m_hasResult = false;
};

}  // namespace flotilla::ui
