// One app instance per workspace (docs/reliability.md D2): a lock file next to the run database.
//
// Decision: QLockFile, not a database lock. It records the holder's pid and host, so a second
// instance can say who holds the workspace, and a lock left by a crashed instance (its pid gone
// on this host) is taken over instead of locking the user out forever. The lock is held for the
// whole life of the window; the CLI commands do not take it (they share the database through
// SQLite's own locking, as the writer's BEGIN IMMEDIATE and busy timeout expect).
#pragma once

#include <QLockFile>
#include <QString>

#include <memory>

namespace flotilla::ui {

class InstanceLock {
 public:
  explicit InstanceLock(const QString& workspaceDir);
  ~InstanceLock();

  // Takes the lock (false with *message for the user when another instance holds it).
  bool tryLock(QString* message);
  QString path() const { return m_path; }

 private:
  QString m_path;
  std::unique_ptr<QLockFile> m_lock;
};

}  // namespace flotilla::ui
