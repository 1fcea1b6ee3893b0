// The Queue page's reads and writes of the store (db/queue.h), and the wizard's "Add to queue".
//
// Decision: reads open a connection of their own on the thread pool (as the Costs and Compare
// pages do), so the GUI thread never waits on SQLite; writes are small user actions and go through
// the app's one db::Writer synchronously (as StoreService's tags and notes do), so a refusal's
// sentence (db/queue.h: "entry 12 is running: stop it as a run ...") comes back to show at once.
#pragma once

#include <QString>
#include <QStringList>

#include <optional>
#include <string>
#include <vector>

#include "db/queue.h"

namespace flotilla::ui {

class StoreService;
struct ClusterLaunch;

struct QueueSnapshot {
  std::vector<db::QueueEntry> entries;  // the scheduler's order, then finished ones (newest last)
  std::optional<db::SchedulerLease> lease;
  double now = 0;
};
// Reads the queue and the lease from the store at `path` (throws db::DbError).
QueueSnapshot loadQueue(const QString& path);

// What a user adds: a config's TOML with where it may run and its limits.
struct QueueRequest {
  QString name;            // the run's name ("": the config's run.name)
  std::string configToml;  // what the worker reads
  QString configPath;      // where it came from (shown only; "" from the wizard)
  QStringList places;      // place keys ("local", "node:b", "nodes:a,b", "cluster:hpc/gpu"); empty: any
  qint64 priority = 0;
  std::optional<double> deadline;  // unix seconds
  std::optional<double> maxUsd;
};

// The place keys of the wizard's target: its Slurm cluster (and partition), its nodes (one:
// node:NAME; several: nodes:A,B with the master first), else this machine.
QStringList placeKeysForTarget(const std::optional<ClusterLaunch>& cluster, const QStringList& nodes);
// "" when `key` reads as a place key, else a sentence naming it and the accepted forms.
QString placeKeyProblem(const QString& key);

// Adds the entry through the app's writer: its id (with *name the name it got), or 0 with *error
// (a bad config or place key, the store's refusal).
qint64 addToQueue(StoreService* store, const QueueRequest& request, QString* error, QString* name = nullptr);

// The user's actions on an entry, through the writer: false with the store's sentence in *error.
enum class QueueAction { Cancel, Pause, Resume, MoveUp, MoveDown, ToTop };
bool applyQueueAction(StoreService* store, qint64 id, QueueAction action, QString* error);

}  // namespace flotilla::ui
