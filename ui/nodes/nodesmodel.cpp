// Nodes table model (see nodesmodel.h).
#include "ui/nodes/nodesmodel.h"

#include <QBrush>
#include <QColor>
#include <QStringList>

#include "db/node_power.h"
#include "runs/power_settings.h"
#include "ui/nodes/machinefacts.h"

namespace flotilla::ui {
namespace {

// Mean utilisation (percent) and memory used/total (bytes) over the GPUs that reported them.
struct GpuSummary {
  int count = 0;
  QString type;
  double utilization = -1;
  double memoryUsed = 0, memoryTotal = 0;
  QStringList perGpu;  // tooltip lines
};

GpuSummary summarize(const std::vector<runs::GpuInfo>& gpus) {
  GpuSummary s;
  s.count = static_cast<int>(gpus.size());
  double util = 0;
  int withUtil = 0;
  for (const auto& g : gpus) {
    if (s.type.isEmpty()) s.type = QString::fromStdString(g.name);
    if (g.utilization_pct >= 0) {
      util += g.utilization_pct;
      ++withUtil;
    }
    s.memoryUsed += static_cast<double>(g.memory_used_bytes);
    s.memoryTotal += static_cast<double>(g.memory_total_bytes);
    s.perGpu << QStringLiteral("GPU %1 %2: %3 busy, %4 / %5, %6 °C, %7 W")
                    .arg(g.index)
                    .arg(QString::fromStdString(g.name))
                    .arg(g.utilization_pct >= 0
                             ? QString::number(g.utilization_pct, 'f', 0) + QStringLiteral(" %")
                             : QStringLiteral("?"))
                    .arg(formatBytes(g.memory_used_bytes), formatBytes(g.memory_total_bytes))
                    .arg(g.temperature_c >= 0 ? QString::number(g.temperature_c, 'f', 0)
                                              : QStringLiteral("?"))
                    .arg(g.power_w >= 0 ? QString::number(g.power_w, 'f', 0) : QStringLiteral("?"));
  }
  if (withUtil > 0) s.utilization = util / withUtil;
  return s;
}

// Stored readings as GpuInfo, so both sources share one summary.
std::vector<runs::GpuInfo> fromSamples(const std::vector<db::SystemSample>& samples,
                                       const std::string& type) {
  std::vector<runs::GpuInfo> out;
  for (const auto& s : samples) {
    runs::GpuInfo g;
    g.index = s.device;
    g.name = type;
    g.utilization_pct = s.utilization.value_or(-1);
    g.memory_used_bytes = static_cast<uint64_t>(s.memory_used.value_or(0));
    g.memory_total_bytes = static_cast<uint64_t>(s.memory_total.value_or(0));
    g.temperature_c = s.temperature_c.value_or(-1);
    g.power_w = s.power_w.value_or(-1);
    out.push_back(g);
  }
  return out;
}

QColor stateColor(NodeState s) {
  switch (s) {
    case NodeState::Reachable:
      return QColor(0x2e, 0x9e, 0x5b);
    case NodeState::Unknown:
      return {};
    case NodeState::UnknownHostKey:
      return QColor(0xc7, 0x8a, 0x10);
    default:
      return QColor(0xd0, 0x45, 0x3a);
  }
}

}  // namespace

NodesModel::NodesModel(QObject* parent) : QAbstractTableModel(parent) {}

void NodesModel::setLocalProbe(const flotilla::ProbeResult& probe) {
  m_local = probe;
  emit dataChanged(index(0, 0), index(0, ColumnCount - 1));
}

void NodesModel::setEntries(std::vector<NodeEntry> entries) {
  beginResetModel();
  m_entries = std::move(entries);
  QHash<QString, NodeStatus> kept;
  for (const auto& e : m_entries) {
    const QString name = QString::fromStdString(e.node.name);
    if (m_status.contains(name)) kept.insert(name, m_status.value(name));
  }
  m_status = std::move(kept);
  endResetModel();
}

void NodesModel::setStatus(const QString& name, const NodeStatus& status) {
  const int row = rowOf(name);
  if (row < 1) return;
  m_status.insert(name, status);
  emit dataChanged(index(row, 0), index(row, ColumnCount - 1));
}

int NodesModel::rowOf(const QString& name) const {
  for (size_t i = 0; i < m_entries.size(); ++i)
    if (QString::fromStdString(m_entries[i].node.name) == name) return static_cast<int>(i) + 1;
  return -1;
}

const NodeEntry* NodesModel::entry(int row) const {
  if (row < 1 || row > nodeCount()) return nullptr;
  return &m_entries[static_cast<size_t>(row - 1)];
}

int NodesModel::rowCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : nodeCount() + 1; }

int NodesModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : ColumnCount; }

QVariant NodesModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
  switch (section) {
    case Name:
      return tr("Node");
    case Address:
      return tr("Address");
    case Status:
      return tr("Status");
    case Gpus:
      return tr("GPUs");
    case GpuUse:
      return tr("GPU use");
    case GpuMemory:
      return tr("GPU memory");
    case Latency:
      return tr("Latency");
    case Price:
      return tr("Price");
    default:
      return {};
  }
}

QVariant NodesModel::data(const QModelIndex& index, int role) const {
  if (!checkIndex(index, CheckIndexOption::IndexIsValid)) return {};
  if (index.row() == 0) return localData(index.column(), role);
  return nodeData(*entry(index.row()), index.column(), role);
}

QVariant NodesModel::localData(int column, int role) const {
  if (role == NodeNameRole) return QString();
  if (role == StateRole) return static_cast<int>(m_local ? NodeState::Reachable : NodeState::Unknown);
  if (role != Qt::DisplayRole && role != Qt::ToolTipRole && role != BarRole) return {};
  const bool has = m_local.has_value();
  switch (column) {
    case Name:
      if (role == BarRole) return {};
      return has && !m_local->hostname.empty()
                 ? tr("This machine (%1)").arg(QString::fromStdString(m_local->hostname))
                 : tr("This machine");
    case Address:
      return role == Qt::DisplayRole ? tr("local") : QVariant();
    case Status:
      return role == Qt::DisplayRole ? (has ? tr("local") : tr("probing…")) : QVariant();
    case Gpus:
      if (role != Qt::DisplayRole || !has) return {};
      if (m_local->gpus.empty()) return tr("none");
      return QStringLiteral("%1 × %2")
          .arg(m_local->gpus.size())
          .arg(QString::fromStdString(m_local->gpus[0].name));
    case GpuMemory: {
      if (!has || m_local->gpus.empty()) return {};
      double used = 0, total = 0;
      for (const auto& g : m_local->gpus) {
        total += static_cast<double>(g.memory_total_bytes);
        used += static_cast<double>(g.memory_total_bytes - g.memory_free_bytes);
      }
      if (role == BarRole) return total > 0 ? QVariant(used / total) : QVariant();
      return tr("%1 / %2").arg(formatBytes(static_cast<quint64>(used)),
                               formatBytes(static_cast<quint64>(total)));
    }
    default:
      return {};
  }
}

QVariant NodesModel::nodeData(const NodeEntry& e, int column, int role) const {
  const QString name = QString::fromStdString(e.node.name);
  const NodeStatus st = m_status.value(name);
  if (role == NodeNameRole) return name;
  if (role == StateRole) return static_cast<int>(st.state);
  if (role == Qt::ForegroundRole && column == Status) {
    const QColor c = stateColor(st.state);
    return c.isValid() ? QVariant(QBrush(c)) : QVariant();
  }
  const GpuSummary gpus = summarize(st.probed ? st.gpus : fromSamples(e.latest, e.node.gpu_type));
  switch (column) {
    case Name:
      if (role == Qt::DisplayRole) return name;
      if (role == Qt::ToolTipRole && !e.node.labels.empty())
        return tr("Labels: %1").arg(QString::fromStdString(db::join_labels(e.node.labels)));
      return {};
    case Address: {
      if (role != Qt::DisplayRole) return {};
      const QString host = QString::fromStdString(e.node.host);
      const QString user =
          e.node.user.empty() ? QString() : QString::fromStdString(e.node.user) + QLatin1Char('@');
      return e.node.port == 22 ? user + host : QStringLiteral("%1%2:%3").arg(user, host).arg(e.node.port);
    }
    case Status: {
      // Idle autostop's power state when the node is not simply on ("stopped by autostop").
      const bool off = e.power && e.power->state != db::kPowerOn;
      const QString power = !off ? QString()
                            : e.power->state == db::kPowerStopped
                                ? tr("stopped by autostop")
                                : QString::fromStdString(e.power->state);
      if (role == Qt::DisplayRole) return off ? power : stateText(st.state);
      if (role == Qt::ToolTipRole && e.power && e.power->idle_limit_s) {
        const QString limit = tr("Stopped after %1 with no work")
                                  .arg(QString::fromStdString(runs::idle_duration_text(*e.power->idle_limit_s)));
        return st.message.isEmpty() ? limit : st.message + QLatin1Char('\n') + limit;
      }
      if (role == Qt::ToolTipRole && !st.message.isEmpty()) return st.message;
      return {};
    }
    case Gpus:
      if (role == Qt::ToolTipRole && !gpus.perGpu.isEmpty()) return gpus.perGpu.join(QLatin1Char('\n'));
      if (role != Qt::DisplayRole) return {};
      if (gpus.count > 0) return QStringLiteral("%1 × %2").arg(gpus.count).arg(gpus.type);
      if (e.node.gpu_count > 0)
        return QStringLiteral("%1 × %2").arg(e.node.gpu_count).arg(QString::fromStdString(e.node.gpu_type));
      return st.probed ? tr("none") : QString();
    case GpuUse:
      if (gpus.utilization < 0) return {};
      if (role == BarRole) return gpus.utilization / 100.0;
      if (role == Qt::DisplayRole) return QStringLiteral("%1 %").arg(gpus.utilization, 0, 'f', 0);
      if (role == Qt::ToolTipRole) return gpus.perGpu.join(QLatin1Char('\n'));
      return {};
    case GpuMemory:
      if (gpus.memoryTotal <= 0) return {};
      if (role == BarRole) return gpus.memoryUsed / gpus.memoryTotal;
      if (role == Qt::DisplayRole)
        return tr("%1 / %2").arg(formatBytes(static_cast<quint64>(gpus.memoryUsed)),
                                 formatBytes(static_cast<quint64>(gpus.memoryTotal)));
      return {};
    case Latency:
      if (role != Qt::DisplayRole || st.latencyMs < 0 || st.state != NodeState::Reachable) return {};
      return st.latencyMs < 10 ? tr("%1 ms").arg(st.latencyMs, 0, 'f', 1)
                               : tr("%1 ms").arg(st.latencyMs, 0, 'f', 0);
    case Price:
      if (role != Qt::DisplayRole || !e.node.usd_per_hour) return {};
      return e.node.spot ? tr("$%1/h spot").arg(*e.node.usd_per_hour, 0, 'f', 2)
                         : tr("$%1/h").arg(*e.node.usd_per_hour, 0, 'f', 2);
    default:
      return {};
  }
}

}  // namespace flotilla::ui
