// Compare overlay plot (see compareplot.h). Colours follow the palette for axes and text; runs get
// a fixed qualitative sequence readable on light and dark backgrounds.
#include "ui/plot/compareplot.h"

#include <qcustomplot.h>

#include <QEvent>
#include <QVBoxLayout>
#include "ui/plot/plotstyle.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace flotilla::ui {

struct CompareOverlayPlot::Private {
  QCustomPlot* plot = nullptr;
  QCPItemText* empty = nullptr;
  QVector<QCPGraph*> lines;
  bool logY = false;
  QCPItemStraightLine* target = nullptr;
  std::optional<double> targetY;

  void applyPalette(const QPalette& pal) {
    const QColor text = pal.color(QPalette::WindowText);
    const QColor grid = plotstyle::styleAxes(plot, pal, {plot->xAxis, plot->yAxis});
    plot->legend->setBrush(pal.brush(QPalette::Base));
    plot->legend->setBorderPen(QPen(grid.darker(), 1));
    plot->legend->setTextColor(text);
    empty->setColor(pal.color(QPalette::PlaceholderText));
  }

  void rescale() {
    double lo = std::numeric_limits<double>::infinity(), hi = -lo, xlo = lo, xhi = -lo;
    for (int i = 0; i < plot->graphCount(); ++i) {
      for (auto it = plot->graph(i)->data()->constBegin(); it != plot->graph(i)->data()->constEnd(); ++it) {
        if (!std::isfinite(it->value) || (logY && it->value <= 0)) continue;
        lo = std::min(lo, it->value);
        hi = std::max(hi, it->value);
        xlo = std::min(xlo, it->key);
        xhi = std::max(xhi, it->key);
      }
    }
    if (std::isfinite(lo) && targetY && std::isfinite(*targetY) && (!logY || *targetY > 0)) {
      lo = std::min(lo, *targetY);  // the target stays in view
      hi = std::max(hi, *targetY);
    }
    if (!std::isfinite(lo)) {
      plot->xAxis->setRange(0, 1);
      plot->yAxis->setRange(logY ? 0.1 : 0, 1);
      return;
    }
    plot->xAxis->setRange(xlo, xhi > xlo ? xhi : xlo + 1);
    if (logY) {
      plot->yAxis->setRange(lo / 1.15, hi * 1.15);
    } else {
      const double pad = hi > lo ? (hi - lo) * 0.06 : std::max(std::abs(hi) * 0.1, 1e-3);
      plot->yAxis->setRange(lo - pad, hi + pad);
    }
  }
};

CompareOverlayPlot::CompareOverlayPlot(QWidget* parent) : QWidget(parent), d(std::make_unique<Private>()) {
  d->plot = new QCustomPlot(this);
  d->plot->setObjectName(QStringLiteral("compareOverlayPlot"));
  d->plot->setNoAntialiasingOnDrag(true);
  d->plot->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
  d->plot->yAxis->setNumberFormat(QStringLiteral("g"));
  d->plot->yAxis->setNumberPrecision(3);
  d->plot->legend->setVisible(false);
  d->plot->axisRect()->insetLayout()->setInsetAlignment(0, Qt::AlignTop | Qt::AlignRight);
  d->empty = new QCPItemText(d->plot);
  d->empty->position->setType(QCPItemPosition::ptAxisRectRatio);
  d->empty->position->setCoords(0.5, 0.5);
  d->empty->setPositionAlignment(Qt::AlignCenter);
  d->empty->setText(tr("Pick runs to compare"));
  d->applyPalette(palette());
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addWidget(d->plot);
  setMinimumHeight(200);
}

CompareOverlayPlot::~CompareOverlayPlot() = default;

QColor CompareOverlayPlot::curveColor(int curve) {
  static const QColor colors[] = {
      QColor(0x2f, 0x7e, 0xd8), QColor(0xe0, 0x6c, 0x1f), QColor(0x2e, 0xa0, 0x4f), QColor(0xc2, 0x3b, 0x8a),
      QColor(0x8a, 0x63, 0xd2), QColor(0x1f, 0xa5, 0xa5), QColor(0xb8, 0x8a, 0x00), QColor(0xd6, 0x3a, 0x3a)};
  return colors[curve % static_cast<int>(std::size(colors))];
}

void CompareOverlayPlot::setCurves(const QVector<Curve>& curves, const QString& xLabel, const QString& yLabel,
                                   const QString& emptyText) {
  d->plot->clearGraphs();
  d->lines.clear();
  for (int i = 0; i < curves.size(); ++i) {
    const Curve& c = curves[i];
    const QColor color = curveColor(i);
    QColor band = color;
    band.setAlphaF(0.18);
    // Band: max graph filled down to the min graph; neither is in the legend.
    QCPGraph* lo = d->plot->addGraph();
    lo->setPen(Qt::NoPen);
    lo->setData(c.x, c.min, true);
    lo->removeFromLegend();
    QCPGraph* hi = d->plot->addGraph();
    hi->setPen(Qt::NoPen);
    hi->setBrush(band);
    hi->setChannelFillGraph(lo);
    hi->setData(c.x, c.max, true);
    hi->removeFromLegend();
    QCPGraph* line = d->plot->addGraph();
    line->setPen(QPen(color, 2.0));
    if (c.markers) line->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, 7));
    line->setName(c.name);
    line->setData(c.x, c.last, true);
    d->lines << line;
  }
  d->plot->xAxis->setLabel(xLabel);
  d->plot->yAxis->setLabel(yLabel);
  d->plot->legend->setVisible(!curves.isEmpty());
  d->empty->setVisible(curves.isEmpty());
  if (!emptyText.isEmpty()) d->empty->setText(emptyText);
  d->rescale();
  d->plot->replot();
}

void CompareOverlayPlot::setLogY(bool log) {
  d->logY = log;
  d->plot->yAxis->setScaleType(log ? QCPAxis::stLogarithmic : QCPAxis::stLinear);
  d->plot->yAxis->setTicker(log ? QSharedPointer<QCPAxisTicker>(new QCPAxisTickerLog)
                                : QSharedPointer<QCPAxisTicker>(new QCPAxisTicker));
  d->rescale();
  d->plot->replot();
}

void CompareOverlayPlot::setTarget(std::optional<double> y) {
  d->targetY = y;
  if (!d->target) {
    d->target = new QCPItemStraightLine(d->plot);
    QPen pen(palette().color(QPalette::PlaceholderText), 1.5, Qt::DashLine);
    d->target->setPen(pen);
  }
  d->target->setVisible(y.has_value());
  if (y) {
    d->target->point1->setCoords(0, *y);
    d->target->point2->setCoords(1, *y);
  }
  d->rescale();
  d->plot->replot();
}

std::optional<double> CompareOverlayPlot::target() const { return d->targetY; }

int CompareOverlayPlot::curveCount() const { return static_cast<int>(d->lines.size()); }

int CompareOverlayPlot::pointCount(int curve) const {
  return curve >= 0 && curve < d->lines.size() ? d->lines[curve]->dataCount() : 0;
}

QWidget* CompareOverlayPlot::plotWidget() const { return d->plot; }

void CompareOverlayPlot::changeEvent(QEvent* event) {
  if (event->type() == QEvent::PaletteChange) {
    d->applyPalette(palette());
    d->plot->replot();
  }
  QWidget::changeEvent(event);
}

}  // namespace flotilla::ui
