// The loss plot adapter: the Live page's view of a run's SeriesStore, drawn with QCustomPlot.
//
// Decision: the adapter pulls, the store never pushes. refresh() compares the store's revision
// with the one last drawn and, only when it moved, smooths the appended points (the EMA cache
// grows by one step per point), decimates the visible range for drawing (decimation.h) and
// replots; only those few thousand points reach QCustomPlot, so the replot cost follows the
// plot's width, not the series length. The page calls refresh() from one timer, which bounds
// replots to the timer rate. Callers see a plain QWidget: this header keeps qcustomplot.h (and
// its compile cost) inside ui/plot/.
#pragma once

#include <QString>
#include <QVector>
#include <QWidget>
#include <memory>

namespace flotilla::ui {

class SeriesStore;

class LossPlot : public QWidget {
  Q_OBJECT

 public:
  explicit LossPlot(QWidget* parent = nullptr);
  ~LossPlot() override;

  // Draws trainKey as a faint raw line under its smoothed line and valKey as points; nullptr
  // detaches. The store must outlive the attachment.
  void setSource(const SeriesStore* store, const QString& trainKey, const QString& valKey);
  // The EMA weight in [0, 0.999]; 0 draws the raw line only.
  void setSmoothing(double weight);
  double smoothing() const;
  // The x axis spans at least [0, steps] so a run's progress reads against its length.
  void setPlannedSteps(double steps);
  // The centred message shown while there is nothing to draw ("No run selected").
  void setMessage(const QString& message);

  // Replots when the store or a setting changed since the last replot; returns whether it did.
  bool refresh();
  int replotCount() const;
  // What is drawn now (for tests): the smoothed train loss and the number of validation points.
  QVector<double> smoothedValues() const;
  int validationPointCount() const;
  // What QCustomPlot holds for the raw line after decimation: its point count and its maximum.
  int drawnPointCount() const;
  double drawnRawMaximum() const;
  // The QCustomPlot widget itself (object name "lossPlot").
  QWidget* plotWidget() const;

 protected:
  void changeEvent(QEvent* event) override;
  void resizeEvent(QResizeEvent* event) override;

 private:
  struct Private;
  std::unique_ptr<Private> d;
};

}  // namespace flotilla::ui
