// Background machine probe (see machineprobe.h).
#include "ui/nodes/machineprobe.h"

#include <QtConcurrent/QtConcurrentRun>

#include <exception>

namespace flotilla::ui {

MachineProbe::MachineProbe(QObject* parent) : QObject(parent) {
  connect(&m_watcher, &QFutureWatcher<Outcome>::finished, this, &MachineProbe::onFinished);
}

MachineProbe::~MachineProbe() {
  // The task captures nothing of ours; waiting keeps shutdown orderly (it takes well under 1 s).
  m_watcher.waitForFinished();
}

void MachineProbe::start() {
  if (isRunning()) return;
  m_watcher.setFuture(QtConcurrent::run([]() -> Outcome {
    Outcome out;
    try {
      out.result = flotilla::probe_machine();
    } catch (const std::exception& e) {
      out.error = QString::fromStdString(e.what());
    }
    return out;
  }));
}

bool MachineProbe::isRunning() const { return m_watcher.isRunning(); }

void MachineProbe::onFinished() {
  const Outcome out = m_watcher.result();
  m_error = out.error;
  if (out.error.isEmpty()) {
    m_result = out.result;
    m_hasResult = true;
  }
  emit finished();
}

}  // namespace flotilla::ui
