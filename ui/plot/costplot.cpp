// Spend-per-day bars (see costplot.h). Colours come from the palette and follow its changes.
#include "ui/plot/costplot.h"

#include <qcustomplot.h>

#include <QEvent>
#include <QVBoxLayout>
#include "ui/plot/plotstyle.h"

#include <algorithm>

namespace flotilla::ui {

struct CostBarChart::Private {
  QCustomPlot* plot = nullptr;
  QCPBars* bars = nullptr;
  QCPItemText* empty = nullptr;

  void applyPalette(const QPalette& pal) {
    plotstyle::styleAxes(plot, pal, {plot->xAxis, plot->yAxis});
    plot->xAxis->grid()->setVisible(false);
    const QColor accent = pal.color(QPalette::Highlight);
    QColor fill = accent;
    fill.setAlphaF(0.75);
    bars->setPen(QPen(accent, 1));
    bars->setBrush(fill);
    empty->setColor(pal.color(QPalette::PlaceholderText));
  }
};

CostBarChart::CostBarChart(const QString& yLabel, QWidget* parent)
    : QWidget(parent), d(std::make_unique<Private>()) {
  d->plot = new QCustomPlot(this);
  d->plot->setObjectName(QStringLiteral("costBarChart"));
  d->plot->yAxis->setLabel(yLabel);
  d->bars = new QCPBars(d->plot->xAxis, d->plot->yAxis);
  d->bars->setWidth(0.7);
  d->empty = new QCPItemText(d->plot);
  d->empty->position->setType(QCPItemPosition::ptAxisRectRatio);
  d->empty->position->setCoords(0.5, 0.5);
  d->empty->setPositionAlignment(Qt::AlignCenter);
  d->empty->setText(tr("No spend yet"));
  d->applyPalette(palette());
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addWidget(d->plot);
  setMinimumHeight(150);
}

CostBarChart::~CostBarChart() = default;

void CostBarChart::setBars(const QStringList& labels, const QVector<double>& values) {
  QVector<double> keys;
  auto ticker = QSharedPointer<QCPAxisTickerText>::create();
  for (int i = 0; i < labels.size(); ++i) {
    keys << i + 1;
    ticker->addTick(i + 1, labels[i]);
  }
  d->bars->setData(keys, values.mid(0, keys.size()), true);
  d->plot->xAxis->setTicker(ticker);
  d->plot->xAxis->setRange(0.3, static_cast<double>(labels.size()) + 0.7);
  const double top = values.isEmpty() ? 1.0 : *std::max_element(values.begin(), values.end());
  d->plot->yAxis->setRange(0, top > 0 ? top * 1.15 : 1.0);
  d->empty->setVisible(labels.isEmpty());
  d->plot->replot();
}

int CostBarChart::barCount() const { return d->bars->dataCount(); }

double CostBarChart::barValue(int index) const {
  return index >= 0 && index < barCount() ? (d->bars->data()->constBegin() + index)->value : 0.0;
}

QWidget* CostBarChart::plotWidget() const { return d->plot; }

void CostBarChart::changeEvent(QEvent* event) {
  if (event->type() == QEvent::PaletteChange) {
    d->applyPalette(palette());
    d->plot->replot();
  }
  QWidget::changeEvent(event);
}

}  // namespace flotilla::ui
