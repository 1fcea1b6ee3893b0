// Queue table model (see queuemodel.h).
#include "ui/queue/queuemodel.h"

#include <QColor>
#include <QDateTime>
#include <QStringList>

#include "runs/figures.h"

namespace flotilla::ui {

QueueModel::QueueModel(QObject* parent) : QAbstractTableModel(parent) {}

int QueueModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(m_entries.size());
}
int QueueModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : ColumnCount; }

QString QueueModel::stateText(db::EntryState state) {
  return QString::fromLatin1(db::entry_state_name(state));
}

QString QueueModel::placeText(const db::QueueEntry& e) {
  if (!e.place.empty()) return QString::fromStdString(e.place);
  if (e.places.empty()) return tr("any place");
  QStringList keys;
  for (const std::string& p : e.places) keys << QString::fromStdString(p);
  return tr("one of %1").arg(keys.join(QStringLiteral(" ")));
}

QVariant QueueModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= rowCount()) return {};
  const db::QueueEntry& e = m_entries[static_cast<size_t>(index.row())];
  if (role == Qt::DisplayRole) {
    switch (index.column()) {
      case Id:
        return QString::number(e.id);
      case Name:
        return QString::fromStdString(e.name) +
               (e.group.empty() ? QString() : QStringLiteral(" (%1)").arg(QString::fromStdString(e.group)));
      case State:
        return stateText(e.state);
      case Place:
        return placeText(e);
      case Priority:
        return QString::number(e.priority);
      case Deadline:
        return e.deadline ? QDateTime::fromSecsSinceEpoch(static_cast<qint64>(*e.deadline))
                                .toString(QStringLiteral("yyyy-MM-dd HH:mm"))
                          : QStringLiteral("-");
      case MaxUsd:
        return e.max_usd ? QString::fromStdString(runs::usd_text(*e.max_usd)) : QStringLiteral("-");
      case Why:
        return QString::fromStdString(e.why);
    }
  }
  if (role == Qt::ToolTipRole && index.column() == Why) return QString::fromStdString(e.why);
  if (role == Qt::ToolTipRole && index.column() == Name && !e.config_path.empty())
    return QString::fromStdString(e.config_path);
  if (role == Qt::TextAlignmentRole &&
      (index.column() == Id || index.column() == Priority || index.column() == MaxUsd))
    return QVariant(Qt::AlignRight | Qt::AlignVCenter);
  if (role == Qt::ForegroundRole && index.column() == State && e.state == db::EntryState::kFailed)
    return QColor(0xc6, 0x28, 0x28);
  if (role == Qt::UserRole) return static_cast<qlonglong>(e.id);
  return {};
}

QVariant QueueModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
  switch (section) {
    case Id:
      return tr("Id");
    case Name:
      return tr("Name");
    case State:
      return tr("State");
    case Place:
      return tr("Place");
    case Priority:
      return tr("Priority");
    case Deadline:
      return tr("Deadline");
    case MaxUsd:
      return tr("Max $");
    case Why:
      return tr("Why");
  }
  return {};
}

void QueueModel::setEntries(std::vector<db::QueueEntry> entries) {
  bool sameRows = entries.size() == m_entries.size();
  for (size_t i = 0; sameRows && i < entries.size(); ++i) sameRows = entries[i].id == m_entries[i].id;
  if (!sameRows) {
    beginResetModel();
    m_entries = std::move(entries);
    endResetModel();
    return;
  }
  m_entries = std::move(entries);
  if (!m_entries.empty()) emit dataChanged(index(0, 0), index(rowCount() - 1, ColumnCount - 1));
}

const db::QueueEntry* QueueModel::entry(int row) const {
  return row >= 0 && row < rowCount() ? &m_entries[static_cast<size_t>(row)] : nullptr;
}

int QueueModel::rowOf(qint64 id) const {
  for (size_t i = 0; i < m_entries.size(); ++i)
    if (m_entries[i].id == id) return static_cast<int>(i);
  return -1;
}

}  // namespace flotilla::ui
