// Scheduler savings view (see savingsview.h).
#include "ui/costs/savingsview.h"

#include <QHeaderView>
#include <QLabel>
#include <QTableWidget>
#include <QVBoxLayout>

#include "db/database.h"
#include "runs/savings.h"
#include "ui/compare/asyncquery.h"

namespace flotilla::ui {

SavingsView::SavingsView(QWidget* parent)
    : QWidget(parent), m_summary(new QLabel(this)), m_table(new QTableWidget(this)) {
  setObjectName(QStringLiteral("savingsView"));
  m_summary->setObjectName(QStringLiteral("savingsSummary"));
  m_summary->setWordWrap(true);
  m_summary->setTextInteractionFlags(Qt::TextSelectableByMouse | Qt::TextSelectableByKeyboard);
  m_table->setObjectName(QStringLiteral("savingsTable"));
  QStringList headers;
  for (const std::string& c : runs::savings_columns()) headers << QString::fromStdString(c);
  m_table->setColumnCount(headers.size());
  m_table->setHorizontalHeaderLabels(headers);
  m_table->verticalHeader()->hide();
  m_table->setEditTriggers(QAbstractItemView::NoEditTriggers);
  m_table->setSelectionBehavior(QAbstractItemView::SelectRows);
  m_table->setAlternatingRowColors(true);
  m_table->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  m_table->horizontalHeader()->setStretchLastSection(true);
  auto* hint =
      new QLabel(tr("Each run the scheduler started, against the same run on the most expensive place "
                    "that fitted and on the first place that was free, from the scheduler's own "
                    "predictions scaled by how far this run's prediction was off where it ran; the "
                    "measured cost is the run's accrued cost. `flotilla costs --savings` prints the "
                    "same figures."),
                 this);
  hint->setWordWrap(true);
  hint->setForegroundRole(QPalette::PlaceholderText);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 8, 0, 0);
  layout->addWidget(m_summary);
  layout->addWidget(hint);
  layout->addWidget(m_table, 1);
}

void SavingsView::reload(const QString& databasePath) {
  if (databasePath.isEmpty()) return;
  const quint64 generation = ++m_generation;
  runAsync<runs::Savings>(
      this,
      [path = databasePath.toStdString()] {
        db::OpenOptions o;
        o.create = false;
        o.quick_check = false;
        const db::Database db(path, o);
        return runs::scheduler_savings(db);
      },
      [this, generation](Outcome<runs::Savings> r) {
        if (generation != m_generation) return;
        if (auto* error = std::get_if<QString>(&r)) {
          m_summary->setText(tr("Could not read the scheduler's savings: %1").arg(*error));
          emit loaded();
          return;
        }
        const runs::Savings& s = std::get<0>(r);
        m_summary->setText(QString::fromStdString(runs::savings_summary(s)));
        m_table->setRowCount(static_cast<int>(s.runs.size()));
        for (int row = 0; row < static_cast<int>(s.runs.size()); ++row) {
          const std::vector<std::string> cells = runs::savings_cells(s.runs[static_cast<size_t>(row)]);
          for (int c = 0; c < static_cast<int>(cells.size()); ++c)
            m_table->setItem(row, c,
                             new QTableWidgetItem(QString::fromStdString(cells[static_cast<size_t>(c)])));
        }
        emit loaded();
      });
}

QString SavingsView::summaryText() const { return m_summary->text(); }

QString SavingsView::rowText(int row) const {
  QStringList cells;
  for (int c = 0; c < m_table->columnCount(); ++c)
    cells << (m_table->item(row, c) ? m_table->item(row, c)->text() : QString());
  return cells.join(QLatin1Char('\t'));
}

}  // namespace flotilla::ui
