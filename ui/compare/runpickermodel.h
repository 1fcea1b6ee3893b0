// The runs to pick from on the Compare page: a checkable table over the store's run list.
//
// Decision: checks are kept by run id, not by row, so a refresh or a filter that reorders or
// hides runs never changes which runs are compared.
#pragma once

#include <QAbstractTableModel>
#include <QSet>

#include <vector>

#include "db/queries.h"

namespace flotilla::ui {

class RunPickerModel : public QAbstractTableModel {
  Q_OBJECT

 public:
  enum Column { Name, Status, Steps, LastLoss, ColumnCount };
  static constexpr int RunIdRole = Qt::UserRole + 1;

  explicit RunPickerModel(QObject* parent = nullptr);

  // Replaces the list (checked ids that are gone are forgotten).
  void setRuns(std::vector<db::RunListItem> runs);
  // Checked run ids in list order.
  std::vector<int64_t> checkedIds() const;
  void setChecked(int64_t runId, bool checked);
  // Checks exactly these runs (the others unchecked), with one checkedChanged.
  void setCheckedIds(const std::vector<int64_t>& runIds);
  int64_t runIdAt(int row) const;

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;
  Qt::ItemFlags flags(const QModelIndex& index) const override;
  bool setData(const QModelIndex& index, const QVariant& value, int role = Qt::EditRole) override;

 signals:
  void checkedChanged();

 private:
  std::vector<db::RunListItem> m_runs;
  QSet<qint64> m_checked;
};

}  // namespace flotilla::ui
