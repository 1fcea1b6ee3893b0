// The Clusters table and its store reader (see clustersmodel.h).
#include "ui/clusters/clustersmodel.h"

#include <QStringList>

#include "db/clusters.h"
#include "db/run_store.h"
#include "runs/node_admin.h"
#include "runs/node_ops.h"

namespace flotilla::ui {
namespace {

QString q(const std::string& s) { return QString::fromStdString(s); }

QString priceText(const std::optional<db::PartitionPrice>& p) {
  if (!p) return QStringLiteral("unpriced");
  QStringList parts;
  if (p->usd_per_gpu_hour) parts << QStringLiteral("$%1/GPU-h").arg(*p->usd_per_gpu_hour, 0, 'f', 2);
  if (p->usd_per_cpu_hour) parts << QStringLiteral("$%1/CPU-h").arg(*p->usd_per_cpu_hour, 0, 'f', 2);
  return parts.join(QStringLiteral(" "));
}

}  // namespace

std::vector<ClusterRow> loadClusterRows(const QString& databasePath) {
  std::vector<ClusterRow> out;
  const db::Database store(databasePath.toStdString());
  for (const db::SlurmCluster& c : db::list_clusters(store)) {
    ClusterRow row;
    row.name = q(c.name);
    row.login = q(c.login_host) + QStringLiteral(":") + QString::number(c.port);
    row.probed = !c.probe_json.empty();
    const runs::ClusterProbe p = runs::cluster_probe_from_json(c.probe_json);
    row.version = row.probed ? q(p.config.version) : QStringLiteral("(not probed)");
    for (const runs::SlurmNode& n : p.nodes) {
      ++row.nodes;
      row.gpus += n.gpus;
      if (n.state == "idle")
        ++row.idle;
      else if (n.state == "allocated" || n.state == "mixed" || n.state == "completing")
        ++row.allocated;
      else if (n.state.rfind("down", 0) == 0 || n.state.rfind("drain", 0) == 0 || n.state == "fail" ||
               n.state == "failing" || n.state == "not_responding")
        ++row.down;
    }
    QStringList parts;
    for (const runs::SlurmPartition& part : p.partitions) {
      QStringList facts;
      if (part.is_default) facts << QStringLiteral("default");
      facts << q(part.state).toLower() << q(part.max_time)
            << priceText(db::partition_price(store, c.id, part.name));
      parts << q(part.name) + QStringLiteral(" (") + facts.join(QStringLiteral(", ")) + QStringLiteral(")");
    }
    row.partitions = parts.join(QStringLiteral(", "));
    row.accounting = p.sacct ? QStringLiteral("on") : QStringLiteral("off: ") + q(p.sacct_note);
    QStringList jobs;
    for (const db::SlurmJob& j : db::cluster_jobs(store, c.id)) {
      const db::Run run = db::get_run(store, j.run_id);
      const bool active = run.status == db::RunStatus::kQueued || run.status == db::RunStatus::kRunning ||
                          run.status == db::RunStatus::kPreempted;
      if (active) ++row.jobsActive;
      QString text = q(run.name) + QStringLiteral(" ") + q(j.state);
      if (j.state == "PENDING" && !j.reason.empty())
        text += QStringLiteral(": ") + q(runs::plain_reason(j.reason));
      text += QStringLiteral(" (job ") + q(j.job_id) + QStringLiteral(")");
      jobs << text;
    }
    row.jobs = jobs.join(QStringLiteral(", "));
    out.push_back(std::move(row));
  }
  return out;
}

ClustersModel::ClustersModel(QObject* parent) : QAbstractTableModel(parent) {}

void ClustersModel::setRows(std::vector<ClusterRow> rows) {
  beginResetModel();
  m_rows = std::move(rows);
  endResetModel();
}

int ClustersModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(m_rows.size());
}

int ClustersModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : ColumnCount; }

QVariant ClustersModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= rowCount() || index.column() >= ColumnCount) return {};
  const ClusterRow& r = m_rows[static_cast<size_t>(index.row())];
  if (role == Qt::ToolTipRole && index.column() == Slurm) return QStringLiteral("accounting ") + r.accounting;
  if (role != Qt::DisplayRole) return {};
  switch (index.column()) {
    case Name:
      return r.name;
    case Login:
      return r.login;
    case Slurm:
      return r.version;
    case Nodes:
      if (!r.probed) return QStringLiteral("-");
      return tr("%1: %2 idle, %3 allocated, %4 down").arg(r.nodes).arg(r.idle).arg(r.allocated).arg(r.down);
    case Gpus:
      return r.probed ? QVariant(r.gpus) : QVariant(QStringLiteral("-"));
    case Partitions:
      return r.partitions;
    case Jobs:
      return r.jobs.isEmpty() ? QStringLiteral("-") : r.jobs;
    default:
      return {};
  }
}

QVariant ClustersModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
  switch (section) {
    case Name:
      return tr("Cluster");
    case Login:
      return tr("Login node");
    case Slurm:
      return tr("Slurm");
    case Nodes:
      return tr("Nodes");
    case Gpus:
      return tr("GPUs");
    case Partitions:
      return tr("Partitions");
    case Jobs:
      return tr("Our jobs");
    default:
      return {};
  }
}

}  // namespace flotilla::ui
