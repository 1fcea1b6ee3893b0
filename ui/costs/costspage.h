// The Costs page: spend by run, node and day (tables and a bar chart of the days), the pricing
// catalogue editor, and run budgets with current spend and projected total.
//
// Decision: the page reads everything in one background task (costsquery.h) and applies it on the
// UI thread; every edit is written by a background task on its own connection and followed by a
// reload, so what the tables show is always what the store holds.
#pragma once

#include <QWidget>

#include "ui/costs/costsquery.h"
#include "ui/settings/preferences.h"

class QDate;
class QDoubleSpinBox;
class QStringListModel;
class QLabel;
class QLineEdit;
class QTableView;

namespace flotilla::ui {

class BudgetModel;
class CostBarChart;
class CostLinesModel;
class PricingModel;
class SavingsView;

class CostsPage : public QWidget {
  Q_OBJECT

 public:
  explicit CostsPage(QWidget* parent = nullptr);
  explicit CostsPage(const QString& databasePath, QWidget* parent = nullptr);

  void setDatabasePath(const QString& path);
  QString databasePath() const { return m_databasePath; }

  CostLinesModel* byRunModel() const { return m_byRun; }
  CostLinesModel* byNodeModel() const { return m_byNode; }
  CostLinesModel* byDayModel() const { return m_byDay; }
  CostLinesModel* idleModel() const { return m_idle; }              // idle time and money per node
  QStringListModel* autostopModel() const { return m_autostop; }  // "2026-01-01 03:12  node vm-1 stopped ..."
  PricingModel* pricingModel() const { return m_pricing; }
  BudgetModel* budgetModel() const { return m_budgets; }
  CostBarChart* dayChart() const { return m_chart; }
  QTableView* pricingView() const { return m_pricingView; }
  SavingsView* savingsView() const { return m_savings; }  // the Scheduler savings tab
  QString totalText() const;
  QString pricingAgeText() const;  // the catalogue's age and where to update it
  // "List prices as of 2024-06 (about 2 years old). Cloud prices change: ..."; "" with no dated list price.
  static QString pricingAgeText(const std::vector<db::PriceEntry>& prices, const QDate& today);
  bool busy() const { return m_loading || m_writes > 0; }

 public slots:
  void reload();
  // Adds a user entry to the catalogue (provider/item must be new or are updated).
  void addPrice(const QString& provider, const QString& item, double onDemandUsdPerHour);
  void deleteSelectedPrice();
  void resetPrices();
  void setPreferences(const flotilla::ui::Preferences& prefs);

 signals:
  void loaded();
  void writeFinished(bool ok, const QString& message);

 protected:
  void showEvent(QShowEvent* event) override;

 private:
  void build();
  void apply(CostsResult result);
  // Runs a store write in the background, then reloads.
  void write(std::function<QString()> work);

  QString m_databasePath;
  Preferences m_prefs;
  CostLinesModel* m_byRun;
  CostLinesModel* m_byNode;
  CostLinesModel* m_byDay;
  CostLinesModel* m_idle;
  QStringListModel* m_autostop;
  PricingModel* m_pricing;
  BudgetModel* m_budgets;
  CostBarChart* m_chart = nullptr;
  QTableView* m_pricingView = nullptr;
  SavingsView* m_savings = nullptr;
  QLabel* m_total = nullptr;
  QLabel* m_status = nullptr;
  QLabel* m_pricingAge = nullptr;
  QLineEdit* m_newProvider = nullptr;
  QLineEdit* m_newItem = nullptr;
  QDoubleSpinBox* m_newRate = nullptr;
  quint64 m_generation = 0;
  bool m_loading = false;
  int m_writes = 0;
};

}  // namespace flotilla::ui
