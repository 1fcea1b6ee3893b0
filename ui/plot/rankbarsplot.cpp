// Per-rank step-time bars (see rankbarsplot.h).
#include "ui/plot/rankbarsplot.h"

#include <qcustomplot.h>
#include <QTextStream>

#include <cmath>
#include <limits>

namespace flotilla::ui {

struct RankBarsPlot::Private {
  QCPBars* bars[4] = {};
  QVector<RankTimes> ranks;
  int slowest = -1;
  int window = 0;
  QSharedPointer<QCPAxisTickerText> ticker = QSharedPointer<QCPAxisTickerText>::create();
};

RankBarsPlot::RankBarsPlot(QWidget* parent)
    : PlotPanel(QStringLiteral("rankBarsPlot"), tr("Step time per rank"), parent),
      d(std::make_unique<Private>()) {
  QCustomPlot* plot = customPlot();
  const QString names[4] = {tr("compute"), tr("comm. wait"), tr("bubble"), tr("data")};
  for (int i = 0; i < 4; ++i) {
    d->bars[i] = new QCPBars(plot->xAxis, plot->yAxis);
    d->bars[i]->setName(names[i]);
    d->bars[i]->setWidth(0.6);
    if (i > 0) d->bars[i]->moveAbove(d->bars[i - 1]);
  }
  plot->xAxis->setTicker(d->ticker);
  plot->setInteractions({});  // one bar per rank: nothing to zoom or pan
  plot->xAxis->setLabel(tr("rank"));
  plot->xAxis->grid()->setVisible(false);
  plot->yAxis->setLabel(tr("ms per step"));
  plot->legend->setVisible(false);
  setMessage(tr("Waiting for the first step…"));
  setMessageVisible(true);
  applySeriesPalette(palette());
}

RankBarsPlot::~RankBarsPlot() = default;

void RankBarsPlot::setRanks(const QVector<RankTimes>& ranks, int slowestRank, int window) {
  d->ranks = ranks;
  d->slowest = slowestRank;
  d->window = window;
  markDirty();
}

const QVector<RankTimes>& RankBarsPlot::ranks() const { return d->ranks; }

QString RankBarsPlot::rankLabel(int rank) const {
  return rank == d->slowest && d->ranks.size() > 1 ? tr("%1 (slowest)").arg(rank) : QString::number(rank);
}

bool RankBarsPlot::refresh() {
  if (!takeDirty()) return false;
  QCustomPlot* plot = customPlot();
  d->ticker->clear();
  QVector<double> keys, values[4];
  double top = 0;
  for (const RankTimes& r : d->ranks) {
    keys << r.rank;
    values[0] << r.compute;
    values[1] << r.comm;
    values[2] << r.bubble;
    values[3] << r.data;
    top = std::max(top, r.total());
    d->ticker->addTick(r.rank, rankLabel(r.rank));
  }
  for (int i = 0; i < 4; ++i) d->bars[i]->setData(keys, values[i], true);
  const bool any = !d->ranks.isEmpty();
  plot->xAxis->setLabel(d->window > 1 ? tr("rank (mean of the last %1 steps)").arg(d->window) : tr("rank"));
  setXRange(any ? keys.front() - 0.6 : -0.6, any ? keys.back() + 0.6 : 0.6);
  plot->yAxis->setRange(0, top > 0 ? top * 1.12 : 1);
  plot->legend->setVisible(any);
  setMessageVisible(!any);
  replotNow();
  return true;
}

double RankBarsPlot::drawnSegment(int rank, int segment) const {
  if (segment < 0 || segment > 3) return std::numeric_limits<double>::quiet_NaN();
  QCPBars* bars = d->bars[segment];
  auto it = bars->data()->findBegin(rank - 0.1, false);
  if (it != bars->data()->constEnd() && std::abs(it->key - rank) < 1e-9) return it->value;
  return std::numeric_limits<double>::quiet_NaN();
}

bool RankBarsPlot::writeCsv(QTextStream& out) const {
  if (d->ranks.isEmpty()) return false;
  out << "rank,compute_ms,comm_ms,bubble_ms,data_ms,total_ms\n";
  out.setRealNumberPrecision(12);
  for (const RankTimes& r : d->ranks)
    out << r.rank << ',' << r.compute << ',' << r.comm << ',' << r.bubble << ',' << r.data << ',' << r.total()
        << '\n';
  return true;
}

void RankBarsPlot::applySeriesPalette(const QPalette& pal) {
  Q_UNUSED(pal);
  // Fixed, distinguishable hues: compute calm blue, communication wait a warning red-orange
  // (the segment to look for), bubble violet, data green.
  const QColor colors[4] = {QColor(0x3b, 0x7d, 0xd8), QColor(0xe0, 0x4f, 0x2a), QColor(0x93, 0x6c, 0xc8),
                            QColor(0x3a, 0xa6, 0x5c)};
  for (int i = 0; i < 4; ++i) {
    d->bars[i]->setPen(QPen(colors[i].darker(120), 1));
    d->bars[i]->setBrush(colors[i]);
  }
}

}  // namespace flotilla::ui
