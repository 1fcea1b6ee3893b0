// The Compare page's overlay plot: one metric of several runs on a shared x axis (step, tokens,
// wall time, GPU-hours or dollars), each run a line through its buckets' last values over a faint
// band from the bucket minimum to maximum. Callers see a plain QWidget (qcustomplot.h stays here).
//
// Decision: the band, not the line, carries the spikes: the data arrive already downsampled by
// the store (min/max/last per bucket), and a line through "last" alone would hide a one-step spike
// that the min/max of its bucket keeps.
#pragma once

#include <QString>
#include <QVector>
#include <QWidget>

#include <memory>
#include <optional>

namespace flotilla::ui {

class CompareOverlayPlot : public QWidget {
  Q_OBJECT

 public:
  struct Curve {
    QString name;
    QVector<double> x, last, min, max;  // same length, x increasing
    bool markers = false;               // a dot at each point (sparse series: task scores)
  };

  explicit CompareOverlayPlot(QWidget* parent = nullptr);
  ~CompareOverlayPlot() override;

  // Replaces every curve, labels the axes, rescales and replots. An empty list shows `emptyText`.
  void setCurves(const QVector<Curve>& curves, const QString& xLabel, const QString& yLabel,
                 const QString& emptyText = QString());
  void setLogY(bool log);
  // A dashed horizontal line at a target value (Compare's "cost to reach a score"); nullopt hides it.
  void setTarget(std::optional<double> y);
  std::optional<double> target() const;
  int curveCount() const;
  int pointCount(int curve) const;
  // The colour a curve is drawn in (tables use it to key runs to lines).
  static QColor curveColor(int curve);
  QWidget* plotWidget() const;
  QSize sizeHint() const override { return {640, 320}; }

 protected:
  void changeEvent(QEvent* event) override;

 private:
  struct Private;
  std::unique_ptr<Private> d;
};

}  // namespace flotilla::ui
