// A small bar chart of spend per day for the Costs page, drawn with QCustomPlot behind a plain
// QWidget (qcustomplot.h stays in ui/plot/).
//
// Decision: days are categories (text ticks), not a time axis, so a day with no spend between two
// that have some is simply absent rather than a gap the reader has to interpret.
#pragma once

#include <QString>
#include <QStringList>
#include <QVector>
#include <QWidget>

#include <memory>

namespace flotilla::ui {

class CostBarChart : public QWidget {
  Q_OBJECT

 public:
  explicit CostBarChart(const QString& yLabel, QWidget* parent = nullptr);
  ~CostBarChart() override;

  // One bar per label, heights in the y unit; replots. Empty lists show "No spend yet".
  void setBars(const QStringList& labels, const QVector<double>& values);
  int barCount() const;
  double barValue(int index) const;
  QWidget* plotWidget() const;
  QSize sizeHint() const override { return {420, 200}; }

 protected:
  void changeEvent(QEvent* event) override;

 private:
  struct Private;
  std::unique_ptr<Private> d;
};

}  // namespace flotilla::ui
