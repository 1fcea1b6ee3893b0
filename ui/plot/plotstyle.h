// Theme colours for QCustomPlot axes, shared by every plot adapter in ui/plot/ (and only there:
// it includes qcustomplot.h). Decision: plots take every colour from the widget's QPalette, so
// light, dark and system themes need no per-plot code; the grid is the text colour at 12% alpha.
#pragma once

#include <initializer_list>

#include <QPalette>

#include <qcustomplot.h>

namespace flotilla::ui::plotstyle {

// Colours the background, the given axes (base, ticks, labels) and their dotted grids from `pal`.
// Returns the grid colour, for legends and frames that match it.
inline QColor styleAxes(QCustomPlot* plot, const QPalette& pal, std::initializer_list<QCPAxis*> axes) {
  const QColor text = pal.color(QPalette::WindowText);
  QColor grid = text;
  grid.setAlphaF(0.12);
  plot->setBackground(pal.brush(QPalette::Base));
  for (QCPAxis* axis : axes) {
    axis->setBasePen(QPen(text, 1));
    axis->setTickPen(QPen(text, 1));
    axis->setSubTickPen(QPen(text, 1));
    axis->setTickLabelColor(text);
    axis->setLabelColor(text);
    axis->grid()->setPen(QPen(grid, 1, Qt::DotLine));
  }
  return grid;
}

}  // namespace flotilla::ui::plotstyle
