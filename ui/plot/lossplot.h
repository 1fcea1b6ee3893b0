// The loss plot adapter: training loss (faint raw line under its smoothed line) and validation
// loss, from a run's SeriesStore (x = step) or from the dashboard's ColumnTables (x = step,
// tokens or wall time), drawn with QCustomPlot inside the common PlotPanel frame (log y,
// export, context menu).
//
// Decision: the adapter pulls, the store never pushes. refresh() compares the source's revision
// with the one last drawn and, only when it moved, smooths the appended points (the EMA cache
// grows by one step per point), decimates the visible range for drawing (decimation.h) and
// replots; only those few thousand points reach QCustomPlot, so the replot cost follows the
// plot's width, not the series length. The page calls refresh() from one timer, which bounds
// replots to the timer rate. Smoothing never depends on the x axis, so switching it keeps the
// smoothed values and only redraws.
#pragma once

#include <QString>
#include <QVector>
#include <memory>

#include "ui/plot/plotpanel.h"

namespace flotilla::ui {

class ColumnTable;
class SeriesStore;

class LossPlot : public PlotPanel {
  Q_OBJECT

 public:
  explicit LossPlot(QWidget* parent = nullptr);
  ~LossPlot() override;

  // Draws trainKey as a faint raw line under its smoothed line and valKey as points; nullptr
  // detaches. The store must outlive the attachment.
  void setSource(const SeriesStore* store, const QString& trainKey, const QString& valKey);
  // Draws column `loss` of `steps` and column `valLoss` of `evals`, x from the columns named
  // by setXColumns for the current axis kind. Both tables must outlive the attachment.
  void setTables(const ColumnTable* steps, const QString& loss, const ColumnTable* evals,
                 const QString& valLoss);
  // x columns per axis kind (defaults "step", "tokens", "wall_s"), the same in both tables.
  void setXColumns(const QString& step, const QString& tokens, const QString& wallTime);
  void setXAxisKind(XAxisKind kind) override;
  // The EMA weight in [0, 0.999]; 0 draws the raw line only.
  void setSmoothing(double weight);
  double smoothing() const;
  // The x axis spans at least [0, end] so a run's progress reads against its length.
  void setPlannedSteps(double steps);

  bool refresh() override;
  // What is drawn now (for tests): the smoothed train loss and the number of validation points.
  QVector<double> smoothedValues() const;
  int validationPointCount() const;
  // What QCustomPlot holds for the raw line after decimation: its point count and its maximum.
  int drawnPointCount() const;
  double drawnRawMaximum() const;

 protected:
  bool writeCsv(QTextStream& out) const override;
  void applySeriesPalette(const QPalette& pal) override;

 private:
  struct Private;
  std::unique_ptr<Private> d;
};

}  // namespace flotilla::ui
