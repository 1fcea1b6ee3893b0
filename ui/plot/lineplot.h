// A small single-series line plot (the wizard's learning-rate schedule) drawn with QCustomPlot.
// Callers see a plain QWidget; qcustomplot.h stays inside ui/plot/ (STYLE.md, ENV.md).
#pragma once

#include <QString>
#include <QVector>
#include <QWidget>
#include <memory>

namespace flotilla::ui {

class LinePlot : public QWidget {
  Q_OBJECT

 public:
  explicit LinePlot(const QString& xLabel, const QString& yLabel, QWidget* parent = nullptr);
  ~LinePlot() override;

  // Replaces the points (x ascending) and rescales both axes to them; replots.
  void setData(const QVector<double>& x, const QVector<double>& y);
  int pointCount() const;
  // The y value drawn at the last point (tests), NaN when empty.
  double lastValue() const;
  QWidget* plotWidget() const;
  QSize sizeHint() const override { return {420, 160}; }

 protected:
  void changeEvent(QEvent* event) override;

 private:
  struct Private;
  std::unique_ptr<Private> d;
};

}  // namespace flotilla::ui
