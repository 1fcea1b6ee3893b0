// Re-attaching a RemoteRun to a run already going on its nodes (this session's start, or the app
// restarted), and the recovery policy the launch recorded, which a re-attached run keeps (see
// remoterun.h).
//
// Decision: the app's RecoveryChoice converts to and from the runs layer's RecoveryPolicy (the store's
// "recovery-policy" event), never a format of its own, so the app and `flotilla runs attach` recover
// a re-attached run alike; the recoveries already done count against its maximum.
#include "ui/runs/remoterun.h"

#include <QDir>

#include <algorithm>

#include "db/errors.h"
#include "db/queries.h"
#include "db/run_records.h"
#include "db/run_store.h"
#include "engine/core/error.h"
#include "flotilla/build_info.h"
#include "runs/slurm_run.h"

namespace flotilla::ui {
namespace {

// The run's recorded RecoveryChoice, less the automatic recoveries already done (off when none
// was recorded: a run started by `flotilla run --nodes` without --auto-recover, say).
RecoveryChoice storedRecoveryChoice(const db::Database& db, int64_t runId) {
  return recoveryChoiceFromJson(
      QString::fromStdString(runs::recovery_policy_json(runs::stored_recovery_policy(db, runId))));
}

}  // namespace

QString recoveryPolicyJson(const RecoveryChoice& choice) {
  runs::RecoveryPolicy p;
  p.enabled = choice.enabled;
  for (const QString& n : choice.spares) p.spares.push_back(n.toStdString());
  p.max_recoveries = choice.maxRecoveries;
  p.settle_seconds = choice.settleSeconds;
  p.mirror = choice.mirrorCheckpoints;
  return QString::fromStdString(runs::recovery_policy_json(p));
}

RecoveryChoice recoveryChoiceFromJson(const QString& fieldsJson) {
  const runs::RecoveryPolicy p = runs::recovery_policy_from_json(fieldsJson.toStdString());
  RecoveryChoice c;
  c.enabled = p.enabled;
  for (const auto& n : p.spares) c.spares << QString::fromStdString(n);
  c.maxRecoveries = p.max_recoveries;
  c.settleSeconds = p.settle_seconds;
  c.mirrorCheckpoints = p.mirror;
  return c;
}

runs::Recovery RemoteRun::recoveryOnThread(db::Database& db, const RecoveryChoice& choice,
                                           const std::vector<std::string>& skip) {
  runs::Recovery r;
  r.enabled = choice.enabled;
  r.max_recoveries = choice.maxRecoveries;
  r.settle_seconds = choice.settleSeconds;
  for (const QString& spare : choice.spares) {
    const std::string name = spare.toStdString();
    if (std::find(skip.begin(), skip.end(), name) != skip.end()) continue;  // in the run already
    try {
      r.spares.push_back(db::get_ssh_node(db, name));
    } catch (const db::DbError&) {
      postLog(QStringLiteral("warning"), "spare node " + name + " is no longer stored: it will not be used");
    }
  }
  r.options = [this](const db::SshNode& rec) { return sessionOptionsFor(rec); };
  r.worker_path = m_workerPath.toStdString();
  r.version = FLOTILLA_VERSION_STRING;
  if (choice.mirrorCheckpoints)
    r.mirror_dir = QDir(m_mirrorDir).filePath(QStringLiteral("checkpoints")).toStdString();
  return r;
}

void RemoteRun::reattach(qint64 storeId) {
  m_storeId = storeId;
  appendLog(QStringLiteral("info"), m_cluster.isEmpty() ? tr("re-attaching to the run on its nodes")
                                                        : tr("re-attaching to the Slurm job on cluster %1").arg(m_cluster));
  launch([this, storeId] {
    try {
      const std::string dbPath = m_databasePath.toStdString();
      db::Database db(dbPath);
      const db::Run run = db::get_run(db, static_cast<int64_t>(storeId));
      if (runs::is_slurm_run(run)) {
        reattachSlurm(run);
        return;
      }
      // The launch's choice about preemptions, less the recoveries already done.
      const RecoveryChoice choice = storedRecoveryChoice(db, run.id);
      QMetaObject::invokeMethod(
          this, [this, choice] { m_recovery = choice; }, Qt::QueuedConnection);
      std::vector<runs::Node> nodes;
      std::string rid;
      if (std::string why = runs::attach_target(db, run, nodes, rid); !why.empty())
        throw Error(ExitCode::kConfig, why);
      std::vector<std::string> names;
      for (const auto& n : nodes) names.push_back(n.rec.name);
      std::vector<runs::Node> connected = connectOnThread(db, names);
      std::string refusal;
      bool running = false;
      const runs::Watch w =
          runs::attach_watch(run, connected, rid, "flotilla app (re-attached)", refusal, running);
      if (!refusal.empty()) throw Error(ExitCode::kConfig, refusal);
      const uint64_t committed = static_cast<uint64_t>(
          db::committed_offset(db, run.id, "ssh:" + connected[0].rec.name + ":metrics.jsonl"));
      const double started = run.started_at.value_or(db::now_seconds());
      QMetaObject::invokeMethod(
          this,
          [this, started, total = w.total_steps, names] {
            m_startedAt = QDateTime::fromMSecsSinceEpoch(static_cast<qint64>(started * 1000.0), Qt::UTC);
            if (m_plannedSteps == 0) m_plannedSteps = total;
            m_nodes.clear();
            for (const auto& n : names) m_nodes << QString::fromStdString(n);
          },
          Qt::QueuedConnection);
      postLog(QStringLiteral("info"),
              running ? "re-attached: the run is still going" : "re-attached: the run already ended");
      if (choice.enabled)
        postLog(QStringLiteral("info"), "automatic recovery after a preemption: on, as chosen at launch (" +
                                            std::to_string(choice.maxRecoveries) + " more at most)");
      watchOnThread(connected, w, committed, recoveryOnThread(db, choice, names));
    } catch (const std::exception& e) {
      // A run that cannot be re-attached (untrusted host, never started) stays as the store has it.
      QMetaObject::invokeMethod(
          this, [this, e = QString::fromUtf8(e.what())] { onEnded(-1, QStringLiteral("failed"), e); },
          Qt::QueuedConnection);
    }
  });
}

bool RemoteRun::isNodeRunDir(const QString& runDir) { return runs::is_node_run_dir(runDir.toStdString()); }

QVector<RemoteRun*> RemoteRun::reattachRunning(const QString& databasePath, const QString& mirrorRoot,
                                               QObject* parent, const PassphrasePrompt& prompt,
                                               const QString& workerPath) {
  QVector<RemoteRun*> out;
  std::vector<db::Run> runs;
  try {
    db::Database db(databasePath.toStdString());
    db::RunFilter filter;
    filter.statuses = {db::RunStatus::kRunning, db::RunStatus::kQueued, db::RunStatus::kPreempted};
    for (const db::RunListItem& item : db::list_runs(db, filter))
      if (runs::is_slurm_run(item.run) ||
          (item.run.status == db::RunStatus::kRunning && isNodeRunDir(QString::fromStdString(item.run.run_dir))))
        runs.push_back(item.run);
  } catch (const std::exception&) {
    return out;  // no store (yet): nothing to re-attach
  }
  for (const db::Run& r : runs)
    if (RemoteRun* run = reattachOne(databasePath, mirrorRoot, r.id, parent, prompt, workerPath))
      out.append(run);
  return out;
}

RemoteRun* RemoteRun::reattachOne(const QString& databasePath, const QString& mirrorRoot, qint64 storeId,
                                  QObject* parent, const PassphrasePrompt& prompt, const QString& workerPath,
                                  QString* error) {
  db::Run r;
  try {
    db::OpenOptions options;
    options.create = false;
    const db::Database db(databasePath.toStdString(), options);
    r = db::get_run(db, static_cast<int64_t>(storeId));
  } catch (const std::exception& e) {
    if (error) *error = QString::fromUtf8(e.what());
    return nullptr;
  }
  const QString name = QString::fromStdString(r.name);
  const bool slurm = runs::is_slurm_run(r);
  if (slurm) {
    if (r.status != db::RunStatus::kQueued && r.status != db::RunStatus::kRunning &&
        r.status != db::RunStatus::kPreempted) {
      if (error)
        *error = tr("Run %1 is %2: its Slurm job has ended, there is nothing to attach to.")
                     .arg(name, QString::fromLatin1(db::to_string(r.status)));
      return nullptr;
    }
  } else if (!isNodeRunDir(QString::fromStdString(r.run_dir)) || r.status != db::RunStatus::kRunning) {
    if (error)
      *error =
          tr("Run %1 is %2%3: there is nothing to attach to.")
              .arg(name, QString::fromLatin1(db::to_string(r.status)),
                   isNodeRunDir(QString::fromStdString(r.run_dir)) ? QString() : tr(" and not on SSH nodes"));
    return nullptr;
  }
  auto* run =
      new RemoteRun(name, databasePath,
                    QDir(mirrorRoot).filePath(name + QStringLiteral("-") + QString::number(r.id)), parent);
  run->setPassphrasePrompt(prompt);
  run->setWorkerPath(workerPath);
  if (slurm) run->m_cluster = QString::fromStdString(r.target.substr(6));  // "slurm:NAME"
  run->reattach(r.id);
  return run;
}

}  // namespace flotilla::ui
