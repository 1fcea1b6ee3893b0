// A dashboard time-series plot over a ColumnTable: lines (on the left or right y axis), stacked
// areas, a horizontal reference line (a budget) and a dashed projection segment.
//
// Decision: like LossPlot it pulls. refresh() redraws only when the table's revision or a
// setting moved, and hands QCustomPlot only the min/max-decimated points of the visible range
// (decimation.h), so a replot costs a few thousand points per line whatever the run's length.
// Stacked areas are drawn from cumulative columns the data side keeps (compute, compute+comm,
// ...), each filled down to the one below; the CSV exports the plain component columns instead,
// so the numbers a user gets are the ones the worker reported.
#pragma once

#include <QColor>
#include <QString>
#include <QVector>
#include <memory>

#include "ui/plot/plotpanel.h"

namespace flotilla::ui {

class ColumnTable;

class ChartPlot : public PlotPanel {
  Q_OBJECT

 public:
  enum class Style { Line, Area };
  struct Series {
    QString column;  // y values drawn (for Area: the cumulative column)
    QString name;    // legend and CSV header
    QColor color;    // invalid: the palette's highlight colour
    Style style = Style::Line;
    bool rightAxis = false;
    QString csvColumn;  // the column exported (empty: `column`)
  };

  ChartPlot(const QString& objectName, const QString& title, const QString& yLabel,
            QWidget* parent = nullptr);
  ~ChartPlot() override;

  // The table must outlive the attachment; nullptr detaches.
  void setTable(const ColumnTable* table);
  // The x column of the table for each axis kind.
  void setXColumn(XAxisKind kind, const QString& column);
  void setXAxisKind(XAxisKind kind) override;
  // The x axis spans at least up to `x` (the planned end of the run); NaN or <= 0: the data only.
  void setXEnd(double x);
  int addSeries(const Series& series);
  void setRightAxisLabel(const QString& label);
  // The right axis spans 0 .. `factor` × its series' maximum (default 1.08). A series that moves
  // with a left one (MFU with tokens/s) gets a taller axis so the two lines do not coincide.
  void setRightAxisTop(double factor);
  void setShowLegend(bool show);
  // The y axis starts at zero (rates, memory, money: a baseline that does not move), or is
  // fixed to [lo, hi] (utilisation in per cent); the log scale overrides both.
  void setYFromZero(bool fromZero);
  void setFixedYRange(double lo, double hi);
  // A horizontal dashed line at y (NaN hides it), named in the legend; red (a limit) unless
  // another colour is given.
  void setReferenceLine(double y, const QString& name, const QColor& color = QColor());
  // A dashed segment from (x0, y0) to (x1, y1) (NaN hides it), named in the legend. Far above the
  // data and a reference line it is drawn only to just above them (its name says its end).
  void setProjection(double x0, double y0, double x1, double y1, const QString& name);

  bool refresh() override;
  // For tests: the points QCustomPlot holds for series i and the last finite value drawn.
  int drawnPointCount(int series) const;
  double drawnLastValue(int series) const;
  double referenceValue() const;
  double projectionEnd() const;

 protected:
  bool writeCsv(QTextStream& out) const override;
  void applySeriesPalette(const QPalette& pal) override;

 private:
  struct Private;
  std::unique_ptr<Private> d;
};

}  // namespace flotilla::ui
