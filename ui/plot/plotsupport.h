// The QCustomPlot boundary: the only header the rest of the UI needs for plots today.
//
// Decision: qcustomplot.h is included only in plot/*.cpp (it costs ~7 s of compile per file);
// callers get QWidget* and plain functions. The rest of the plot adapter of DESIGN.md §7 lives
// beside it: seriesstore.h / columntable.h (raw points), smoothing.h (debiased EMA),
// decimation.h (min/max per pixel column), plotpanel.h (the common frame: log y, x kinds,
// PNG/SVG/PDF/CSV export), lossplot.h, chartplot.h and rankbarsplot.h (the Live dashboard).
#pragma once

#include <QString>

class QWidget;

namespace flotilla::ui {

// The QCustomPlot version compiled in, e.g. "2.1.0".
QString qcustomplotVersion();

// An empty plot with labelled axes and a centred message ("No run selected"), coloured from the
// parent's palette so it reads correctly in light and dark themes.
QWidget* createPlaceholderPlot(const QString& xLabel, const QString& yLabel, const QString& message,
                               QWidget* parent);

}  // namespace flotilla::ui
