// TEMPORARY (see servicecompat.h): read back from the service's own words and the worker's pid file.
#include "ui/runs/servicecompat.h"

#include <QFile>
#include <QStringList>

#include "runs/process.h"
#include "runs/worker_command.h"

namespace flotilla::ui::compat {

runs::Placement placementOf(const db::Run& run) {
  const QString where = QString::fromStdString(runs::RunService::where_text(run));
  const QString cluster = QStringLiteral("slurm cluster ");
  if (where.startsWith(cluster)) return runs::Placement::on_cluster(where.mid(cluster.size()).toStdString());
  for (const QString& prefix : {QStringLiteral("nodes "), QStringLiteral("node ")}) {
    if (!where.startsWith(prefix)) continue;
    std::vector<std::string> names;
    for (const QString& n : where.mid(prefix.size()).split(QStringLiteral(", "), Qt::SkipEmptyParts))
      names.push_back(n.toStdString());
    return runs::Placement::on_nodes(names);
  }
  return runs::Placement::here();
}

qint64 localPid(const runs::ActiveRun& run) { return runs::live_worker_pid(run.folder_text()); }

QString commandLine(const runs::ActiveRun& run) {
  const qint64 pid = localPid(run);
  if (pid <= 0) return {};
  QFile f(QStringLiteral("/proc/%1/cmdline").arg(pid));
  if (!f.open(QIODevice::ReadOnly)) return {};
  std::vector<std::string> argv;
  for (const QByteArray& a : f.readAll().split('\0'))
    if (!a.isEmpty()) argv.push_back(a.toStdString());
  return QString::fromStdString(runs::command_line(argv));
}

QString jobId(const runs::ActiveRun& run) {
  const QString where = QString::fromStdString(run.where_text());
  const qsizetype at = where.lastIndexOf(QStringLiteral(", job "));
  return at < 0 ? QString() : where.mid(at + 6);
}

QString checkpointRefusal(const runs::Placement& where) {
  if (where.cluster.empty()) return {};
  return QStringLiteral(
      "A Slurm job checkpoints on its schedule and before its time limit (the batch script's signal), not on "
      "request; Stop checkpoints and ends it.");
}

}  // namespace flotilla::ui::compat
