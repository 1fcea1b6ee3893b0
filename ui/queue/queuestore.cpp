// Queue store access for the app (see queuestore.h).
#include "ui/queue/queuestore.h"

#include <QRegularExpression>

#include <algorithm>
#include <iterator>

#include "db/errors.h"
#include "db/writer.h"
#include "engine/config/config_io.h"
#include "ui/runs/clusterlaunch.h"
#include "ui/runs/storeservice.h"

namespace flotilla::ui {
namespace {

db::OpenOptions existingStore() {
  db::OpenOptions o;
  o.create = false;
  o.quick_check = false;  // the app checked the file when it opened the workspace
  return o;
}

bool unstarted(const db::QueueEntry& e) {
  return e.state == db::EntryState::kQueued || e.state == db::EntryState::kPaused;
}

}  // namespace

QueueSnapshot loadQueue(const QString& path) {
  const db::Database db(path.toStdString(), existingStore());
  QueueSnapshot out;
  out.entries = db::list_queue(db, /*include_finished=*/true);
  out.lease = db::scheduler_lease(db);
  out.now = db::now_seconds();
  return out;
}

QStringList placeKeysForTarget(const std::optional<ClusterLaunch>& cluster, const QStringList& nodes) {
  if (cluster) {
    QString key = QStringLiteral("cluster:") + cluster->cluster;
    if (!cluster->partition.isEmpty()) key += QLatin1Char('/') + cluster->partition;
    return {key};
  }
  if (nodes.size() == 1) return {QStringLiteral("node:") + nodes.front()};
  if (nodes.size() > 1) return {QStringLiteral("nodes:") + nodes.join(QLatin1Char(','))};
  return {QStringLiteral("local")};
}

QString placeKeyProblem(const QString& key) {
  // The shapes runs/queue_place.h parses; the names are checked again (and looked up) when the
  // scheduler places the entry.
  static const QRegularExpression shape(
      QStringLiteral("^(local|node:[A-Za-z0-9._-]+|nodes:[A-Za-z0-9._-]+(,[A-Za-z0-9._-]+)+|cluster:[A-Za-z0-"
                     "9._-]+(/[A-Za-z0-9._-]+)?)$"));
  if (shape.match(key).hasMatch()) return {};
  return QObject::tr("'%1' is not a place: use local, node:NAME, nodes:A,B or cluster:NAME[/PARTITION]")
      .arg(key);
}

qint64 addToQueue(StoreService* store, const QueueRequest& request, QString* error, QString* name) {
  auto fail = [&](const QString& text) {
    if (error) *error = text;
    return qint64(0);
  };
  if (!store) return fail(QObject::tr("This window has no workspace database: nothing can be queued."));
  flotilla::RunConfig config;
  try {
    config = flotilla::parse_config_toml(
        request.configToml, request.configPath.isEmpty() ? "config" : request.configPath.toStdString());
  } catch (const std::exception& e) {
    return fail(QObject::tr("The config cannot be queued: %1").arg(QString::fromUtf8(e.what())));
  }
  db::NewQueueEntry e;
  e.name = request.name.isEmpty() ? config.run.name : request.name.toStdString();
  e.config_toml = request.configToml;
  e.config_path = request.configPath.toStdString();
  for (const QString& p : request.places) {
    if (const QString problem = placeKeyProblem(p); !problem.isEmpty()) return fail(problem);
    e.places.push_back(p.toStdString());
  }
  e.priority = request.priority;
  e.deadline = request.deadline;
  e.max_usd = request.maxUsd;
  qint64 id = 0;
  std::string got;
  try {
    store->writer().run([&](db::Database& db) { id = db::add_queue_entry(db, e, db::now_seconds(), &got); });
  } catch (const db::DbError& ex) {
    return fail(QString::fromUtf8(ex.what()));
  }
  if (name) *name = QString::fromStdString(got);
  return id;
}

bool applyQueueAction(StoreService* store, qint64 id, QueueAction action, QString* error) {
  if (!store) {
    if (error) *error = QObject::tr("This window has no workspace database.");
    return false;
  }
  try {
    store->writer().run([&](db::Database& db) {
      const double now = db::now_seconds();
      switch (action) {
        case QueueAction::Cancel:
          db::cancel_queue_entry(db, id, now);
          return;
        case QueueAction::Pause:
          db::pause_queue_entry(db, id, now);
          return;
        case QueueAction::Resume:
          db::resume_queue_entry(db, id, now);
          return;
        case QueueAction::ToTop:
        case QueueAction::MoveUp:
        case QueueAction::MoveDown: {
          // Before the previous (after the next, before the first) entry that has not started, in the
          // scheduler's order.
          const std::vector<db::QueueEntry> all = db::list_queue(db, false);
          std::vector<db::QueueEntry> waiting;
          for (const auto& e : all)
            if (unstarted(e) || e.id == id) waiting.push_back(e);
          const auto it =
              std::find_if(waiting.begin(), waiting.end(), [id](const auto& e) { return e.id == id; });
          if (it == waiting.end()) {
            // Not waiting: the store says why (its state forbids a move).
            db::move_queue_entry(db, id, db::MoveTo::kTop, 0, now);
            return;
          }
          if (action == QueueAction::ToTop) {
            // Before the first waiting entry (taking its priority): the next one the scheduler starts.
            if (it == waiting.begin()) return;
            db::move_queue_entry(db, id, db::MoveTo::kBefore, waiting.front().id, now);
          } else if (action == QueueAction::MoveUp) {
            if (it == waiting.begin()) return;  // first already
            db::move_queue_entry(db, id, db::MoveTo::kBefore, std::prev(it)->id, now);
          } else {
            if (std::next(it) == waiting.end()) return;  // last already
            db::move_queue_entry(db, id, db::MoveTo::kAfter, std::next(it)->id, now);
          }
          return;
        }
      }
    });
  } catch (const db::DbError& e) {
    if (error) *error = QString::fromUtf8(e.what());
    return false;
  }
  store->refresh();
  return true;
}

}  // namespace flotilla::ui
