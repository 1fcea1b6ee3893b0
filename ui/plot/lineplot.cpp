// Small line plot (see lineplot.h). Colours come from the palette and follow its changes.
#include "ui/plot/lineplot.h"

#include <qcustomplot.h>

#include <QEvent>
#include <QVBoxLayout>
#include "ui/plot/plotstyle.h"

#include <algorithm>
#include <limits>

namespace flotilla::ui {

struct LinePlot::Private {
  QCustomPlot* plot = nullptr;
  QCPGraph* graph = nullptr;

  void applyPalette(const QPalette& pal) {
    plotstyle::styleAxes(plot, pal, {plot->xAxis, plot->yAxis});
    const QColor accent = pal.color(QPalette::Highlight);
    QColor fill = accent;
    fill.setAlphaF(0.15);
    graph->setPen(QPen(accent, 2.0));
    graph->setBrush(fill);
  }
};

LinePlot::LinePlot(const QString& xLabel, const QString& yLabel, QWidget* parent)
    : QWidget(parent), d(std::make_unique<Private>()) {
  d->plot = new QCustomPlot(this);
  d->plot->setObjectName(QStringLiteral("linePlot"));
  d->plot->xAxis->setLabel(xLabel);
  d->plot->yAxis->setLabel(yLabel);
  d->plot->yAxis->setNumberFormat(QStringLiteral("g"));
  d->plot->yAxis->setNumberPrecision(2);
  d->graph = d->plot->addGraph();
  d->applyPalette(palette());
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addWidget(d->plot);
  setMinimumHeight(140);
}

LinePlot::~LinePlot() = default;

void LinePlot::setData(const QVector<double>& x, const QVector<double>& y) {
  d->graph->setData(x, y, true);
  if (!x.isEmpty()) {
    d->plot->xAxis->setRange(x.front(), std::max(x.back(), x.front() + 1));
    const auto [lo, hi] = std::minmax_element(y.begin(), y.end());
    const double top = *hi > 0 ? *hi * 1.08 : 1.0;
    d->plot->yAxis->setRange(std::min(0.0, *lo), top);
  }
  d->plot->replot();
}

int LinePlot::pointCount() const { return d->graph->dataCount(); }

double LinePlot::lastValue() const {
  if (d->graph->data()->isEmpty()) return std::numeric_limits<double>::quiet_NaN();
  return (d->graph->data()->constEnd() - 1)->value;
}

QWidget* LinePlot::plotWidget() const { return d->plot; }

void LinePlot::changeEvent(QEvent* event) {
  if (event->type() == QEvent::PaletteChange) {
    d->applyPalette(palette());
    d->plot->replot();
  }
  QWidget::changeEvent(event);
}

}  // namespace flotilla::ui
