// A columnar table of doubles behind the live dashboard's plots: one row per step record, one
// column per field (step, tokens, wall time, loss, lr, memory, per-rank times, ...).
//
// Decision: rows, not (x, y) series. A plot picks its x column (step, tokens or wall time) and
// its y columns by name, so switching the x axis re-reads the same arrays instead of keeping a
// copy of every series per x kind (1M steps x 20 fields is 160 MB once, not three times). A
// field missing from a record is NaN in that row, and a column first seen late (a GPU that
// appears) is back-filled with NaN. Like SeriesStore it only counts changes in revision();
// plots poll that on their own timer.
#pragma once

#include <QHash>
#include <QString>
#include <QStringList>
#include <QVector>

namespace flotilla::ui {

class ColumnTable {
 public:
  // The index of `name`, adding it (NaN in every existing row) when new.
  int column(const QString& name);
  // The index of `name` or -1.
  int find(const QString& name) const { return m_index.value(name, -1); }
  const QStringList& names() const { return m_names; }

  // Starts a row with every column NaN; set() fills it. Rows are visible to readers at once.
  void beginRow();
  void set(int column, double value);
  void set(const QString& name, double value) { set(column(name), value); }

  // Rewrites every row of `column` with value(row) (e.g. a spend column once the store's
  // accruals are known); incremental readers start over, as after clear().
  template <typename F>
  void rewrite(int column, F value) {
    if (column < 0 || column >= m_columns.size()) return;
    QVector<double>& c = m_columns[column];
    for (qsizetype i = 0; i < c.size(); ++i) c[i] = value(i);
    ++m_revision;
    ++m_generation;
  }

  qsizetype rows() const { return m_rows; }
  // The values of a column (rows() long), or an empty vector for an unknown name.
  const QVector<double>& values(int column) const;
  const QVector<double>& values(const QString& name) const;
  // The last value of a column, NaN when there is none.
  double last(const QString& name) const;

  quint64 revision() const { return m_revision; }
  // Increases only on clear(): incremental readers start over.
  quint64 generation() const { return m_generation; }
  void clear();
  void reserve(qsizetype rows);

 private:
  QHash<QString, int> m_index;
  QStringList m_names;
  QVector<QVector<double>> m_columns;
  qsizetype m_rows = 0;
  quint64 m_revision = 0;
  quint64 m_generation = 0;
};

}  // namespace flotilla::ui
