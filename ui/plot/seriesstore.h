// The in-memory series store behind live plots (DESIGN.md §2 step 6, STYLE.md principle 8):
// raw (x, y) points per named series, appended as records arrive.
//
// Decision: the store knows nothing about plot widgets. It only counts changes in revision();
// a plot polls that counter on its own replot timer, so however fast points arrive the plot
// redraws at most once per tick, and a plot can be attached or detached at any time.
#pragma once

#include <QHash>
#include <QString>
#include <QVector>

namespace flotilla::ui {

class SeriesStore {
 public:
  struct Series {
    QVector<double> x;
    QVector<double> y;
  };

  void append(const QString& name, double x, double y);
  // The series (empty when nothing was appended under that name).
  const Series& series(const QString& name) const;
  qsizetype size(const QString& name) const { return series(name).x.size(); }
  // Increases with every append and clear; equal revisions mean equal contents.
  quint64 revision() const { return m_revision; }
  // Increases only on clear(): a reader that copies points incrementally starts over.
  quint64 generation() const { return m_generation; }
  void clear();

 private:
  QHash<QString, Series> m_series;
  quint64 m_revision = 0;
  quint64 m_generation = 0;
};

}  // namespace flotilla::ui
