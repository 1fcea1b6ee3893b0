// Series store (see seriesstore.h).
#include "ui/plot/seriesstore.h"

namespace flotilla::ui {

void SeriesStore::append(const QString& name, double x, double y) {
  Series& s = m_series[name];
  s.x.append(x);
  s.y.append(y);
  ++m_revision;
}

const SeriesStore::Series& SeriesStore::series(const QString& name) const {
  static const Series kEmpty;
  const auto it = m_series.constFind(name);
  return it == m_series.cend() ? kEmpty : *it;
}

void SeriesStore::clear() {
  m_series.clear();
  ++m_revision;
  ++m_generation;
}

}  // namespace flotilla::ui
