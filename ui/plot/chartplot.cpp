// Dashboard time-series plot (see chartplot.h).
#include "ui/plot/chartplot.h"

#include <qcustomplot.h>
#include <QTextStream>

#include <cmath>
#include <limits>

#include "ui/plot/columntable.h"
#include "ui/plot/decimation.h"

namespace flotilla::ui {
namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct Extent {
  double lo = kInf, hi = -kInf, minPositive = kInf;
  void add(double y) {
    if (!std::isfinite(y)) return;
    lo = std::min(lo, y);
    hi = std::max(hi, y);
    if (y > 0) minPositive = std::min(minPositive, y);
  }
  void add(const Extent& e) {
    lo = std::min(lo, e.lo);
    hi = std::max(hi, e.hi);
    minPositive = std::min(minPositive, e.minPositive);
  }
};
}  // namespace

struct ChartPlot::Private {
  const ColumnTable* table = nullptr;
  quint64 drawnRevision = 0, generation = 0;
  QString xColumns[3] = {QStringLiteral("step"), QStringLiteral("tokens"), QStringLiteral("wall_s")};
  double xEnd = kNaN;
  QVector<Series> series;
  QVector<QCPGraph*> graphs;
  QVector<Extent> extents;
  qsizetype scanned = 0;  // rows folded into extents
  QCPGraph* reference = nullptr;
  QCPGraph* projection = nullptr;
  double referenceY = kNaN;
  QColor referenceColor;
  double px0 = kNaN, py0 = kNaN, px1 = kNaN, py1 = kNaN;
  bool legend = true;
  bool fromZero = false;
  double fixedLo = kNaN, fixedHi = kNaN;
  double rightTop = 1.08;  // the right axis' top, in multiples of its series' maximum
  QVector<qsizetype> picks;
  QVector<QCPGraphData> buffer;
};

ChartPlot::ChartPlot(const QString& objectName, const QString& title, const QString& yLabel, QWidget* parent)
    : PlotPanel(objectName, title, parent), d(std::make_unique<Private>()) {
  QCustomPlot* plot = customPlot();
  plot->yAxis->setLabel(yLabel);
  plot->yAxis->setNumberFormat(QStringLiteral("g"));
  d->reference = plot->addGraph();
  d->projection = plot->addGraph();
  d->reference->setVisible(false);
  d->projection->setVisible(false);
  d->reference->removeFromLegend();
  d->projection->removeFromLegend();
  // Their names say their values ("budget $0.15", "projected $0.31"): the readout shows the name.
  d->reference->setProperty(kReadoutNameOnly, true);
  d->projection->setProperty(kReadoutNameOnly, true);
  setMessage(tr("Waiting for data…"));
  applySeriesPalette(palette());
}

ChartPlot::~ChartPlot() = default;

void ChartPlot::setTable(const ColumnTable* table) {
  d->table = table;
  d->generation = table ? table->generation() : 0;
  d->scanned = 0;
  for (Extent& e : d->extents) e = Extent();
  markDirty();
}

void ChartPlot::setXColumn(XAxisKind kind, const QString& column) {
  d->xColumns[static_cast<int>(kind)] = column;
  markDirty();
}

void ChartPlot::setXAxisKind(XAxisKind kind) { PlotPanel::setXAxisKind(kind); }

void ChartPlot::setXEnd(double x) {
  if (x == d->xEnd || (std::isnan(x) && std::isnan(d->xEnd))) return;
  d->xEnd = x;
  markDirty();
}

int ChartPlot::addSeries(const Series& series) {
  QCustomPlot* plot = customPlot();
  QCPGraph* graph = plot->addGraph(plot->xAxis, series.rightAxis ? plot->yAxis2 : plot->yAxis);
  graph->setName(series.name);
  if (series.rightAxis) {
    plot->yAxis2->setVisible(true);
    plot->yAxis2->setNumberFormat(QStringLiteral("g"));
  }
  if (series.style == Style::Area) {
    // Fill down to the previous area of the stack, or to zero for the first.
    for (qsizetype i = d->series.size() - 1; i >= 0; --i) {
      if (d->series[i].style == Style::Area) {
        graph->setChannelFillGraph(d->graphs[i]);
        break;
      }
    }
  }
  d->series.append(series);
  d->graphs.append(graph);
  d->extents.append(Extent());
  d->scanned = 0;
  for (Extent& e : d->extents) e = Extent();
  applySeriesPalette(palette());
  markDirty();
  return static_cast<int>(d->series.size() - 1);
}

void ChartPlot::setRightAxisLabel(const QString& label) { customPlot()->yAxis2->setLabel(label); }

void ChartPlot::setRightAxisTop(double factor) {
  d->rightTop = factor > 1 ? factor : 1.08;
  markDirty();
}

void ChartPlot::setShowLegend(bool show) {
  d->legend = show;
  markDirty();
}

void ChartPlot::setYFromZero(bool fromZero) {
  d->fromZero = fromZero;
  markDirty();
}

void ChartPlot::setFixedYRange(double lo, double hi) {
  d->fixedLo = lo;
  d->fixedHi = hi;
  markDirty();
}

void ChartPlot::setReferenceLine(double y, const QString& name, const QColor& color) {
  if (y == d->referenceY && d->reference->name() == name && color == d->referenceColor) return;
  d->referenceY = y;
  d->referenceColor = color;
  d->reference->setName(name);
  applySeriesPalette(palette());
  markDirty();
}

void ChartPlot::setProjection(double x0, double y0, double x1, double y1, const QString& name) {
  if (x0 == d->px0 && y0 == d->py0 && x1 == d->px1 && y1 == d->py1 && name == d->projection->name()) return;
  d->px0 = x0;
  d->py0 = y0;
  d->px1 = x1;
  d->py1 = y1;
  d->projection->setName(name);
  markDirty();
}

bool ChartPlot::refresh() {
  const ColumnTable* t = d->table;
  const bool moved = t && t->revision() != d->drawnRevision;
  if (!moved && !takeDirty()) return false;
  QCustomPlot* plot = customPlot();
  if (t && t->generation() != d->generation) {
    d->generation = t->generation();
    d->scanned = 0;
    for (Extent& e : d->extents) e = Extent();
  }
  const qsizetype rows = t ? t->rows() : 0;
  if (d->scanned > rows) {
    d->scanned = 0;
    for (Extent& e : d->extents) e = Extent();
  }
  // Fold the new rows into the y extents (O(new rows)).
  for (qsizetype s = 0; t && s < d->series.size(); ++s) {
    const QVector<double>& y = t->values(d->series[s].column);
    for (qsizetype i = d->scanned; i < std::min(rows, y.size()); ++i) d->extents[s].add(y[i]);
  }
  d->scanned = rows;

  const QVector<double>& xs = t ? t->values(d->xColumns[static_cast<int>(xAxisKind())]) : QVector<double>();
  double xLo = kInf, xHi = -kInf;
  if (!xs.isEmpty()) {
    xLo = xs.front();
    xHi = xs.back();
  }
  bool any = false;
  Extent left, right;
  for (qsizetype s = 0; s < d->series.size(); ++s) {
    if (d->extents[s].lo > d->extents[s].hi) continue;
    any = true;
    (d->series[s].rightAxis ? right : left).add(d->extents[s]);
  }
  if (!followData() && std::isfinite(d->xEnd) && d->xEnd > 0) xHi = std::max(xHi, d->xEnd);
  if (!std::isfinite(xLo) || !std::isfinite(xHi)) xLo = 0, xHi = 1;
  if (xHi <= xLo) xHi = xLo + 1;
  const bool showRef = std::isfinite(d->referenceY);
  const bool showProj =
      std::isfinite(d->px0) && std::isfinite(d->py0) && std::isfinite(d->px1) && std::isfinite(d->py1);
  if (showRef) left.add(d->referenceY);
  // A projection far above the data and the reference line (a budget) would flatten both: it is
  // drawn up to just above them, towards where it goes, and its name says where it ends.
  double projX1 = d->px1, projY1 = d->py1;
  if (showProj && showRef && left.lo <= left.hi && d->py1 > 1.5 * left.hi && d->py1 > d->py0) {
    projY1 = std::max(left.hi * 1.25, d->py0);
    projX1 = d->px0 + (d->px1 - d->px0) * (projY1 - d->py0) / (d->py1 - d->py0);
  }
  if (showProj) {
    left.add(projY1);
    xHi = std::max(xHi, projX1);
  }
  setXRange(xLo, xHi);
  if (zoomed()) {  // the user's view: decimate over what is shown
    xLo = plot->xAxis->range().lower;
    xHi = plot->xAxis->range().upper;
  }
  if (!logY() && std::isfinite(d->fixedLo) && std::isfinite(d->fixedHi))
    plot->yAxis->setRange(d->fixedLo, d->fixedHi);
  else
    setYRange(d->fromZero && left.lo > 0 ? 0.0 : left.lo, left.hi, left.minPositive);
  if (right.lo <= right.hi)
    plot->yAxis2->setRange(right.lo >= 0 ? 0 : right.lo, right.hi > 0 ? right.hi * d->rightTop : 1);

  const int columns = std::max(64, plot->axisRect()->width() > 0 ? plot->axisRect()->width() : width());
  for (qsizetype s = 0; s < d->series.size(); ++s) {
    const QVector<double>& ys = t ? t->values(d->series[s].column) : QVector<double>();
    const qsizetype n = std::min(xs.size(), ys.size());
    decimateIndices(xs.constData(), ys.constData(), n, xLo, xHi, columns, &d->picks);
    d->buffer.resize(d->picks.size());
    for (qsizetype i = 0; i < d->picks.size(); ++i)
      d->buffer[i] = QCPGraphData(xs[d->picks[i]], ys[d->picks[i]]);
    d->graphs[s]->data()->set(d->buffer, true);
    // A line needs two points: a lone reading (one GPU sample so far) is drawn as a dot.
    int finite = 0;
    for (const QCPGraphData& p : std::as_const(d->buffer)) finite += std::isfinite(p.value) ? 1 : 0;
    d->graphs[s]->setScatterStyle(finite == 1 ? QCPScatterStyle(QCPScatterStyle::ssDisc, 7)
                                              : QCPScatterStyle(QCPScatterStyle::ssNone));
  }
  d->reference->setVisible(showRef);
  if (showRef) {
    d->reference->setData({xLo, xHi}, {d->referenceY, d->referenceY}, true);
    d->reference->addToLegend();
  } else {
    d->reference->removeFromLegend();
  }
  d->projection->setVisible(showProj);
  if (showProj) {
    d->projection->setData({d->px0, projX1}, {d->py0, projY1}, true);
    d->projection->addToLegend();
  } else {
    d->projection->removeFromLegend();
  }
  setMessageVisible(!any);
  plot->legend->setVisible(any && d->legend);
  replotNow();
  d->drawnRevision = t ? t->revision() : 0;
  return true;
}

int ChartPlot::drawnPointCount(int series) const {
  return d->graphs.value(series) ? d->graphs[series]->dataCount() : 0;
}

double ChartPlot::drawnLastValue(int series) const {
  QCPGraph* g = d->graphs.value(series);
  if (!g) return kNaN;
  for (auto it = g->data()->constEnd(); it != g->data()->constBegin();) {
    --it;
    if (std::isfinite(it->value)) return it->value;
  }
  return kNaN;
}

double ChartPlot::referenceValue() const { return d->referenceY; }
double ChartPlot::projectionEnd() const { return d->py1; }

bool ChartPlot::writeCsv(QTextStream& out) const {
  const ColumnTable* t = d->table;
  if (!t || t->rows() == 0 || d->series.isEmpty()) return false;
  const QString xName = d->xColumns[static_cast<int>(xAxisKind())];
  const QVector<double>& xs = t->values(xName);
  QVector<const QVector<double>*> cols;
  QStringList header{xName};
  for (const Series& s : d->series) {
    const QString c = s.csvColumn.isEmpty() ? s.column : s.csvColumn;
    cols.append(&t->values(c));
    header << c;
  }
  out << header.join(QLatin1Char(',')) << '\n';
  out.setRealNumberPrecision(12);
  for (qsizetype i = 0; i < t->rows(); ++i) {
    bool any = false;
    for (const QVector<double>* c : cols) any = any || (i < c->size() && std::isfinite((*c)[i]));
    if (!any) continue;
    out << xs.value(i, kNaN);
    for (const QVector<double>* c : cols) {
      out << ',';
      const double v = c->value(i, kNaN);
      if (std::isfinite(v)) out << v;
    }
    out << '\n';
  }
  return true;
}

void ChartPlot::applySeriesPalette(const QPalette& pal) {
  const QColor accent = pal.color(QPalette::Highlight);
  for (qsizetype s = 0; s < d->series.size(); ++s) {
    const QColor c = d->series[s].color.isValid() ? d->series[s].color : accent;
    d->graphs[s]->setPen(QPen(c, d->series[s].style == Style::Area ? 1.0 : 1.6));
    if (d->series[s].style == Style::Area) {
      QColor fill = c;
      fill.setAlphaF(0.55);
      d->graphs[s]->setBrush(fill);
    }
  }
  const QColor limit = d->referenceColor.isValid() ? d->referenceColor : QColor(0xd0, 0x30, 0x30);
  d->reference->setPen(QPen(limit, 1.4, Qt::DashLine));
  d->projection->setPen(QPen(pal.color(QPalette::PlaceholderText), 1.4, Qt::DashLine));
}

}  // namespace flotilla::ui
