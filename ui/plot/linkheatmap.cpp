// Link heat map (see linkheatmap.h).
#include "ui/plot/linkheatmap.h"

#include <qcustomplot.h>

#include <QVBoxLayout>
#include <algorithm>
#include <cmath>
#include <limits>

namespace flotilla::ui {

LinkHeatMap::LinkHeatMap(QWidget* parent) : QWidget(parent), m_plot(new QCustomPlot(this)) {
  setObjectName(QStringLiteral("linkHeatMap"));
  m_plot->setObjectName(QStringLiteral("linkHeatMapPlot"));
  m_plot->setMinimumSize(260, 200);
  m_map = new QCPColorMap(m_plot->xAxis, m_plot->yAxis);
  m_scale = new QCPColorScale(m_plot);
  m_plot->plotLayout()->addElement(0, 1, m_scale);
  m_scale->setType(QCPAxis::atRight);
  m_scale->setDataScaleType(QCPAxis::stLogarithmic);
  m_scale->axis()->setLabel(tr("bandwidth, B/s (log)"));
  m_scale->axis()->setTicker(QSharedPointer<QCPAxisTickerLog>(new QCPAxisTickerLog));
  m_scale->axis()->setNumberFormat(QStringLiteral("eb"));
  m_scale->axis()->setNumberPrecision(0);
  m_map->setColorScale(m_scale);
  // Slow links red, fast ones green: the cell to look at stands out.
  QCPColorGradient gradient;
  gradient.clearColorStops();
  gradient.setColorStopAt(0, QColor(0xc6, 0x28, 0x28));
  gradient.setColorStopAt(0.5, QColor(0xf2, 0xb1, 0x34));
  gradient.setColorStopAt(1, QColor(0x2e, 0x9d, 0x4f));
  gradient.setNanHandling(QCPColorGradient::nhTransparent);
  m_map->setGradient(gradient);
  m_map->setInterpolate(false);
  m_plot->xAxis->setLabel(tr("to"));
  m_plot->yAxis->setLabel(tr("from"));
  m_plot->yAxis->setRangeReversed(true);  // the first node on top, as in the table
  auto* margins = new QCPMarginGroup(m_plot);
  m_plot->axisRect()->setMarginGroup(QCP::msBottom | QCP::msTop, margins);
  m_scale->setMarginGroup(QCP::msBottom | QCP::msTop, margins);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addWidget(m_plot);
  setLinks({}, {});
}

void LinkHeatMap::setLinks(const QStringList& nodes, const QVector<double>& bytesPerS) {
  m_nodes = nodes;
  const int n = static_cast<int>(nodes.size());
  m_map->data()->setSize(std::max(n, 1), std::max(n, 1));
  m_map->data()->setRange(QCPRange(0, std::max(n - 1, 0)), QCPRange(0, std::max(n - 1, 0)));
  const double nan = std::numeric_limits<double>::quiet_NaN();
  double lo = std::numeric_limits<double>::infinity(), hi = 0;
  for (int from = 0; from < std::max(n, 1); ++from)
    for (int to = 0; to < std::max(n, 1); ++to) {
      const qsizetype i = static_cast<qsizetype>(from) * n + to;
      const double v = n > 0 && i < bytesPerS.size() ? bytesPerS[i] : nan;
      const bool ok = std::isfinite(v) && v > 0;
      m_map->data()->setCell(to, from, ok ? v : nan);
      if (ok) {
        lo = std::min(lo, v);
        hi = std::max(hi, v);
      }
    }
  if (hi <= 0) {
    lo = 1e6;
    hi = 1e9;
  } else if (hi < 10 * lo) {
    // Figures within one decade (or one figure): a decade around their middle, so the log axis has
    // a labelled power of ten and near-equal links get near-equal colours, not the extremes.
    const double mid = std::sqrt(lo * hi);
    lo = mid / std::sqrt(10.0);
    hi = mid * std::sqrt(10.0);
  }
  m_scale->setDataRange(QCPRange(lo, hi));
  QSharedPointer<QCPAxisTickerText> ticker(new QCPAxisTickerText);
  for (int i = 0; i < n; ++i) ticker->addTick(i, nodes[i]);
  m_plot->xAxis->setTicker(ticker);
  m_plot->yAxis->setTicker(ticker);
  m_plot->xAxis->setRange(-0.5, std::max(n, 1) - 0.5);
  m_plot->yAxis->setRange(-0.5, std::max(n, 1) - 0.5);
  m_plot->replot();
}

double LinkHeatMap::cellValue(int from, int to) const { return m_map->data()->cell(to, from); }
bool LinkHeatMap::logScale() const { return m_scale->dataScaleType() == QCPAxis::stLogarithmic; }
double LinkHeatMap::scaleLow() const { return m_scale->dataRange().lower; }
double LinkHeatMap::scaleHigh() const { return m_scale->dataRange().upper; }
QStringList LinkHeatMap::xLabels() const {
  QStringList out;
  auto ticker = m_plot->xAxis->ticker().dynamicCast<QCPAxisTickerText>();
  if (ticker)
    for (const QString& s : ticker->ticks()) out << s;
  return out;
}

}  // namespace flotilla::ui
