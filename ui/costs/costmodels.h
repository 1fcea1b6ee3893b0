// The Costs page's tables: spend lines (by run, node or day), the pricing catalogue (editable) and
// run budgets (editable).
//
// Decision: the editable models change their own rows at once and announce the edit as a signal
// carrying a plain struct; the page writes it to the store off the UI thread and reloads. The
// models never touch the database, so tests drive them without one, and views stay dumb.
#pragma once

#include <QAbstractTableModel>

#include <optional>
#include <vector>

#include "ui/costs/costsquery.h"
#include "ui/settings/preferences.h"

namespace flotilla::ui {

class CostLinesModel : public QAbstractTableModel {
  Q_OBJECT

 public:
  enum Column { Key, Usd, GpuHours, Hours, ColumnCount };
  explicit CostLinesModel(const QString& keyTitle, QObject* parent = nullptr);
  void setLines(std::vector<db::CostLine> lines);
  const std::vector<db::CostLine>& lines() const { return m_lines; }

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

 private:
  QString m_keyTitle;
  std::vector<db::CostLine> m_lines;
};

class PricingModel : public QAbstractTableModel {
  Q_OBJECT

 public:
  enum Column { Provider, Item, GpuType, Gpus, OnDemand, Spot, AsOf, Edited, ColumnCount };
  static constexpr int PriceIdRole = Qt::UserRole + 1;
  explicit PricingModel(QObject* parent = nullptr);
  void setPrices(std::vector<db::PriceEntry> prices);
  const db::PriceEntry& entry(int row) const { return m_prices[static_cast<size_t>(row)]; }

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;
  Qt::ItemFlags flags(const QModelIndex& index) const override;
  // On-demand and spot $/h (≥ 0; an empty spot clears it); provider/item/GPUs of user entries.
  bool setData(const QModelIndex& index, const QVariant& value, int role = Qt::EditRole) override;

 signals:
  void priceEdited(const flotilla::db::PriceEntry& entry);

 private:
  std::vector<db::PriceEntry> m_prices;
};

class BudgetModel : public QAbstractTableModel {
  Q_OBJECT

 public:
  enum Column { Run, Status, Spent, Projected, Cap, WarnAt, ColumnCount };
  explicit BudgetModel(QObject* parent = nullptr);
  void setBudgets(std::vector<BudgetLine> budgets);
  void setPreferences(const Preferences& prefs) { m_prefs = prefs; }
  const BudgetLine& line(int row) const { return m_lines[static_cast<size_t>(row)]; }

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;
  Qt::ItemFlags flags(const QModelIndex& index) const override;
  // Cap in $ (empty or 0: no cap); warn threshold in percent of the cap (1–100).
  bool setData(const QModelIndex& index, const QVariant& value, int role = Qt::EditRole) override;

 signals:
  void budgetEdited(qint64 runId, std::optional<double> capUsd, double warnFraction);

 private:
  std::vector<BudgetLine> m_lines;
  Preferences m_prefs;
};

}  // namespace flotilla::ui
