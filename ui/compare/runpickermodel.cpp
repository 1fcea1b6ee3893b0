// Checkable run list (see runpickermodel.h).
#include "ui/compare/runpickermodel.h"

#include "ui/common/numberformat.h"

namespace flotilla::ui {

RunPickerModel::RunPickerModel(QObject* parent) : QAbstractTableModel(parent) {}

void RunPickerModel::setRuns(std::vector<db::RunListItem> runs) {
  beginResetModel();
  m_runs = std::move(runs);
  QSet<qint64> present;
  for (const auto& r : m_runs) present.insert(r.run.id);
  const qsizetype before = m_checked.size();
  m_checked.intersect(present);
  endResetModel();
  if (m_checked.size() != before) emit checkedChanged();
}

std::vector<int64_t> RunPickerModel::checkedIds() const {
  std::vector<int64_t> ids;
  for (const auto& r : m_runs)
    if (m_checked.contains(r.run.id)) ids.push_back(r.run.id);
  return ids;
}

void RunPickerModel::setChecked(int64_t runId, bool checked) {
  for (int row = 0; row < rowCount(); ++row)
    if (m_runs[static_cast<size_t>(row)].run.id == runId)
      setData(index(row, Name), checked ? Qt::Checked : Qt::Unchecked, Qt::CheckStateRole);
}

void RunPickerModel::setCheckedIds(const std::vector<int64_t>& runIds) {
  QSet<qint64> next;
  for (const int64_t id : runIds)
    for (const auto& item : m_runs)
      if (item.run.id == id) next.insert(id);
  if (next == m_checked) return;
  m_checked = next;
  if (rowCount() > 0) emit dataChanged(index(0, Name), index(rowCount() - 1, Name), {Qt::CheckStateRole});
  emit checkedChanged();
}

int64_t RunPickerModel::runIdAt(int row) const {
  return row >= 0 && row < rowCount() ? m_runs[static_cast<size_t>(row)].run.id : 0;
}

int RunPickerModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(m_runs.size());
}

int RunPickerModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : ColumnCount;
}

QVariant RunPickerModel::data(const QModelIndex& index, int role) const {
  if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid)) return {};
  const auto& item = m_runs[static_cast<size_t>(index.row())];
  if (role == RunIdRole) return QVariant::fromValue<qint64>(item.run.id);
  if (role == Qt::CheckStateRole && index.column() == Name)
    return m_checked.contains(item.run.id) ? Qt::Checked : Qt::Unchecked;
  if (role == Qt::TextAlignmentRole && index.column() != Name && index.column() != Status)
    return QVariant(Qt::AlignRight | Qt::AlignVCenter);
  if (role != Qt::DisplayRole && role != Qt::ToolTipRole) return {};
  switch (index.column()) {
    case Name:
      return QString::fromStdString(item.run.name);
    case Status:
      return QString::fromLatin1(db::to_string(item.run.status));
    case Steps:
      return QVariant::fromValue<qint64>(item.last_step);
    case LastLoss:
      return item.last_loss ? formatMetric(*item.last_loss) : QString();
    default:
      return {};
  }
}

QVariant RunPickerModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
  switch (section) {
    case Name:
      return tr("Run");
    case Status:
      return tr("Status");
    case Steps:
      return tr("Steps");
    case LastLoss:
      return tr("Loss");
    default:
      return {};
  }
}

Qt::ItemFlags RunPickerModel::flags(const QModelIndex& index) const {
  if (!index.isValid()) return Qt::NoItemFlags;
  Qt::ItemFlags f = Qt::ItemIsEnabled | Qt::ItemIsSelectable;
  if (index.column() == Name) f |= Qt::ItemIsUserCheckable;
  return f;
}

bool RunPickerModel::setData(const QModelIndex& index, const QVariant& value, int role) {
  if (role != Qt::CheckStateRole || index.column() != Name ||
      !checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid))
    return false;
  const qint64 id = m_runs[static_cast<size_t>(index.row())].run.id;
  const bool checked = value.toInt() == Qt::Checked;
  if (checked == m_checked.contains(id)) return true;
  if (checked)
    m_checked.insert(id);
  else
    m_checked.remove(id);
  emit dataChanged(index, index, {Qt::CheckStateRole});
  emit checkedChanged();
  return true;
}

}  // namespace flotilla::ui
