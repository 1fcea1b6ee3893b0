// Column table (see columntable.h).
#include "ui/plot/columntable.h"

#include <limits>

namespace flotilla::ui {
namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
const QVector<double> kEmpty;
}  // namespace

int ColumnTable::column(const QString& name) {
  const auto it = m_index.constFind(name);
  if (it != m_index.constEnd()) return it.value();
  const int index = static_cast<int>(m_columns.size());
  m_index.insert(name, index);
  m_names.append(name);
  m_columns.append(QVector<double>(m_rows, kNaN));
  ++m_revision;
  return index;
}

void ColumnTable::beginRow() {
  for (QVector<double>& c : m_columns) c.append(kNaN);
  ++m_rows;
  ++m_revision;
}

void ColumnTable::set(int column, double value) {
  if (column < 0 || column >= m_columns.size() || m_rows == 0) return;
  m_columns[column][m_rows - 1] = value;
  ++m_revision;
}

const QVector<double>& ColumnTable::values(int column) const {
  return column >= 0 && column < m_columns.size() ? m_columns[column] : kEmpty;
}

const QVector<double>& ColumnTable::values(const QString& name) const { return values(find(name)); }

double ColumnTable::last(const QString& name) const {
  const QVector<double>& v = values(name);
  return v.isEmpty() ? kNaN : v.back();
}

void ColumnTable::clear() {
  m_index.clear();
  m_names.clear();
  m_columns.clear();
  m_rows = 0;
  ++m_revision;
  ++m_generation;
}

void ColumnTable::reserve(qsizetype rows) {
  for (QVector<double>& c : m_columns) c.reserve(rows);
}

}  // namespace flotilla::ui
