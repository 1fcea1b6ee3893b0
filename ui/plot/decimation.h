// Decimation for drawing (DESIGN.md §7: "min/max decimation only for drawing"): which points of
// a long series a plot needs so that, at a given number of pixel columns, the drawn line looks
// exactly like the line through every point.
//
// Decision: per pixel column keep the first, the minimum, the maximum and the last point, in
// their original order (the M4 scheme). Min and max make every spike survive however many points
// share its column; first and last make the segments between columns join where the full line
// would. The result is at most 4 points per column plus one neighbour outside each edge of the
// visible range, so a 1M-point series draws as a few thousand points. Plain functions over
// arrays: the plot adapter calls them, tests check them without a widget.
#pragma once

#include <QVector>

namespace flotilla::ui {

// Indices (ascending, unique) of the points of (x[i], y[i]), i < n, to draw over the x range
// [xLo, xHi] at `columns` pixel columns. x must be ascending. Non-finite y values are never
// a column's minimum or maximum (a NaN loss must not erase a column). Appends to *out (cleared first).
void decimateIndices(const double* x, const double* y, qsizetype n, double xLo, double xHi, int columns,
                     QVector<qsizetype>* out);

}  // namespace flotilla::ui
