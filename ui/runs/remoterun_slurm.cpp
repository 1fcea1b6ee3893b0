// A RemoteRun on a Slurm cluster (see remoterun.h): submitted, watched and re-attached on its
// thread by the runs layer's Slurm code (runs/slurm_run.h), as `flotilla run --cluster` and
// `flotilla runs attach` do it; only the hooks and the posting to the UI thread are the app's.
#include "ui/runs/remoterun.h"

#include <QDateTime>
#include <QThread>

#include "db/clusters.h"
#include "db/queries.h"
#include "db/run_store.h"
#include "db/writer.h"
#include "engine/core/error.h"
#include "remote/session.h"
#include "runs/slurm_run.h"

namespace flotilla::ui {

std::unique_ptr<remote::Session> RemoteRun::connectLogin(const db::SlurmCluster& cluster) {
  auto login = std::make_unique<remote::Session>(sessionOptionsFor(runs::login_node(cluster)));
  try {
    login->connect();
  } catch (const remote::HostKeyError& e) {
    throw Error(ExitCode::kComm, runs::login_host_key_message(cluster.name, e));
  }
  return login;
}

void RemoteRun::watchSlurmOnThread(remote::Session& login, const runs::SlurmWatch& w, uint64_t historyUpTo) {
  replayHistory(login, w.rid, historyUpTo);
  db::Writer writer(m_databasePath.toStdString());
  const int code = runs::watch_slurm_run(writer, login, w, watchHooks(w.run_id));
  postEnded(code, w.run_id, true);
}

void RemoteRun::postSubmitEnded(bool submitted, const std::string& error, const std::string& job) {
  // Before the job exists the runs layer has ended the run as failed (or never stored it, or left
  // it as it was); after, the job goes on under Slurm whatever happened here: leave it to a
  // re-attach.
  QMetaObject::invokeMethod(
      this,
      [this, submitted, e = QString::fromStdString(error), jobId = QString::fromStdString(job)] {
        if (submitted)
          onEnded(-1, QStringLiteral("left"),
                  tr("%1 (Slurm job %2 may still be running: re-attach it from the Runs page)").arg(e, jobId));
        else
          onEnded(-1, QStringLiteral("failed"), e);
      },
      Qt::QueuedConnection);
}

void RemoteRun::startOnCluster(const RunConfig& config, const ClusterLaunch& choice, const QString& workerPath) {
  m_cluster = choice.cluster;
  m_workerPath = workerPath;
  appendLog(QStringLiteral("info"), tr("submitting to Slurm cluster %1: %2 node(s), time limit %3%4")
                                        .arg(choice.cluster)
                                        .arg(choice.nodes)
                                        .arg(choice.timeLimit,
                                             choice.autoResume ? tr(", requeued after its time-limit checkpoint")
                                                               : QString()));
  runs::SlurmStartRequest req = slurmStartRequest(config, m_name, choice);
  req.worker_path = workerPath.toStdString();
  const std::string clusterName = choice.cluster.toStdString();
  launch([this, req, clusterName] {
    bool submitted = false;
    std::string job;
    try {
      db::Database db(m_databasePath.toStdString());
      const db::SlurmCluster cluster = db::get_cluster(db, clusterName);
      const std::unique_ptr<remote::Session> login = connectLogin(cluster);
      const runs::SlurmWatch w = runs::submit_slurm_run(
          db, *login, cluster, req, [this](const std::string& line) { postLog(QStringLiteral("info"), line); });
      submitted = true;
      job = w.job_id;
      QMetaObject::invokeMethod(
          this,
          [this, runId = w.run_id, jobId = QString::fromStdString(w.job_id)] {
            m_storeId = runId;
            m_jobId = jobId;
            emit storeIdKnown(runId);
            emit changed();
          },
          Qt::QueuedConnection);
      watchSlurmOnThread(*login, w, 0);
    } catch (const std::exception& e) {
      postSubmitEnded(submitted, e.what(), job);
    }
  });
}

void RemoteRun::reattachSlurm(const db::Run& run) {
  db::Database db(m_databasePath.toStdString());
  runs::SlurmWatch w;
  db::SlurmCluster cluster;
  if (const std::string why = runs::slurm_attach_target(db, run, w, cluster); !why.empty())
    throw Error(ExitCode::kConfig, why);
  const uint64_t committed =
      static_cast<uint64_t>(db::committed_offset(db, run.id, "slurm:" + cluster.name + ":metrics.jsonl"));
  const double started = run.started_at.value_or(db::now_seconds());
  QMetaObject::invokeMethod(
      this,
      [this, started, total = w.total_steps, c = QString::fromStdString(cluster.name),
       j = QString::fromStdString(w.job_id)] {
        m_startedAt = QDateTime::fromMSecsSinceEpoch(static_cast<qint64>(started * 1000.0), Qt::UTC);
        if (m_plannedSteps == 0) m_plannedSteps = total;
        m_cluster = c;
        m_jobId = j;
        emit changed();
      },
      Qt::QueuedConnection);
  const std::unique_ptr<remote::Session> login = connectLogin(cluster);
  postLog(QStringLiteral("info"), "re-attached to slurm job " + w.job_id + " on cluster " + cluster.name + " (" +
                                      db::to_string(run.status) + ")");
  watchSlurmOnThread(*login, w, committed);
}

void RemoteRun::resumeOnCluster(qint64 storeId) {
  m_storeId = storeId;
  appendLog(QStringLiteral("info"), tr("resuming run %1 on its Slurm cluster").arg(m_name));
  launch([this, storeId] {
    bool submitted = false;
    std::string job;
    try {
      db::Database db(m_databasePath.toStdString());
      const db::Run run = db::get_run(db, static_cast<int64_t>(storeId));
      db::SlurmCluster cluster;
      if (const std::string why = runs::slurm_resume_target(db, run, cluster); !why.empty())
        throw Error(ExitCode::kUsage, why);
      const uint64_t committed =
          static_cast<uint64_t>(db::committed_offset(db, run.id, "slurm:" + cluster.name + ":metrics.jsonl"));
      const std::unique_ptr<remote::Session> login = connectLogin(cluster);
      const runs::SlurmWatch w = runs::resubmit_slurm_run(
          db, *login, run, "flotilla app (resumed)", [this](const std::string& line) { postLog(QStringLiteral("info"), line); });
      submitted = true;
      job = w.job_id;
      const double started = run.started_at.value_or(db::now_seconds());
      QMetaObject::invokeMethod(
          this,
          [this, started, total = w.total_steps, c = QString::fromStdString(cluster.name),
           j = QString::fromStdString(w.job_id)] {
            m_startedAt = QDateTime::fromMSecsSinceEpoch(static_cast<qint64>(started * 1000.0), Qt::UTC);
            if (m_plannedSteps == 0) m_plannedSteps = total;
            m_cluster = c;
            m_jobId = j;
            emit storeIdKnown(m_storeId);
            emit changed();
          },
          Qt::QueuedConnection);
      watchSlurmOnThread(*login, w, committed);
    } catch (const std::exception& e) {
      postSubmitEnded(submitted, e.what(), job);
    }
  });
}

QString RemoteRun::checkpointUnsupportedReason() const {
  if (m_cluster.isEmpty()) return {};
  return tr("A Slurm job checkpoints on its schedule and before its time limit (the batch script's "
            "signal), not on request; Stop checkpoints and ends it.");
}

}  // namespace flotilla::ui
