// The Nodes table: "This machine" first, then every SSH node of the store, with live status,
// GPU use and memory (as bars, see gpubardelegate.h), latency and price.
//
// Decision: the model holds values only (store entries, the local probe, live statuses); it
// never opens the database or a connection. GPU columns prefer the live probe of this session
// and fall back to the newest readings in the store, so a node shows what it last reported.
#pragma once

#include <QAbstractTableModel>
#include <QHash>
#include <optional>
#include <vector>

#include "engine/core/probe.h"
#include "ui/nodes/nodestatus.h"
#include "ui/nodes/nodestore.h"

namespace flotilla::ui {

class NodesModel : public QAbstractTableModel {
  Q_OBJECT

 public:
  enum Column { Name, Address, Status, Gpus, GpuUse, GpuMemory, Latency, Price, ColumnCount };
  // Fraction 0..1 of a bar column (GpuUse, GpuMemory); invalid when there is nothing to draw.
  static constexpr int BarRole = Qt::UserRole + 1;
  // The node's name ("" for this machine).
  static constexpr int NodeNameRole = Qt::UserRole + 2;
  // NodeState as int.
  static constexpr int StateRole = Qt::UserRole + 3;

  explicit NodesModel(QObject* parent = nullptr);

  void setLocalProbe(const flotilla::ProbeResult& probe);
  // Replaces the stored nodes (statuses of nodes still present are kept).
  void setEntries(std::vector<NodeEntry> entries);
  void setStatus(const QString& name, const NodeStatus& status);

  // Row of node `name` (-1 when absent); row 0 is this machine.
  int rowOf(const QString& name) const;
  const NodeEntry* entry(int row) const;  // nullptr for row 0
  NodeStatus status(const QString& name) const { return m_status.value(name); }
  int nodeCount() const { return static_cast<int>(m_entries.size()); }

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

 private:
  QVariant localData(int column, int role) const;
  QVariant nodeData(const NodeEntry& e, int column, int role) const;

  std::optional<flotilla::ProbeResult> m_local;
  std::vector<NodeEntry> m_entries;
  QHash<QString, NodeStatus> m_status;
};

}  // namespace flotilla::ui
