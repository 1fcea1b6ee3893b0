// The Costs page's "Scheduler savings" tab (issue 37 item 6): what the scheduler saved on the runs
// it started, against the same runs on the most expensive place that fitted and on the first free
// place, and what preemptions and idle machines cost.
//
// Decision: every figure and every cell comes from runs/savings.h (scheduler_savings,
// savings_cells, savings_summary), the function `flotilla costs --savings` prints, so the page and
// the command show the same numbers written the same way; read off the GUI thread.
#pragma once

#include <QWidget>

class QLabel;
class QTableWidget;

namespace flotilla::ui {

class SavingsView : public QWidget {
  Q_OBJECT

 public:
  explicit SavingsView(QWidget* parent = nullptr);

  void reload(const QString& databasePath);
  QString summaryText() const;
  QTableWidget* table() const { return m_table; }
  // Row r's cells as the command prints them (tab-separated).
  QString rowText(int row) const;

 signals:
  void loaded();

 private:
  QLabel* m_summary;
  QTableWidget* m_table;
  quint64 m_generation = 0;
};

}  // namespace flotilla::ui
