// One app instance per workspace (see instancelock.h).
#include "ui/main/instancelock.h"

#include <QCoreApplication>
#include <QDir>

namespace flotilla::ui {

InstanceLock::InstanceLock(const QString& workspaceDir)
    : m_path(QDir(workspaceDir).filePath(QStringLiteral("flotilla.lock"))), m_lock(new QLockFile(m_path)) {
  m_lock->setStaleLockTime(0);  // never stale by age: only a dead holder frees it
}

InstanceLock::~InstanceLock() = default;

bool InstanceLock::tryLock(QString* message) {
  if (m_lock->tryLock(0)) return true;
  if (message) {
    qint64 pid = 0;
    QString host, app;
    if (m_lock->error() == QLockFile::LockFailedError && m_lock->getLockInfo(&pid, &host, &app)) {
      *message = QCoreApplication::translate(
                     "InstanceLock",
                     "Flotilla is already open on this workspace (process %1 on %2). Switch to that "
                     "window, or start this one on another workspace with --workspace DIR.")
                     .arg(pid)
                     .arg(host);
    } else {
      *message = QCoreApplication::translate("InstanceLock",
                                             "Cannot take the workspace lock %1: check that the folder is "
                                             "writable.")
                     .arg(m_path);
    }
  }
  return false;
}

}  // namespace flotilla::ui
