// Loss plot adapter (see lossplot.h). Colours come from the palette and follow its changes; the
// raw line is the smoothed line's colour at low opacity, as in TensorBoard.
//
// Drawing: the raw points stay in the source and the smoothed ones in a cache that grows by
// one EMA step per new point (O(1)); QCustomPlot gets only the decimated points of the visible x
// range (decimation.h: first/min/max/last per pixel column, so spikes survive), a few thousand
// whatever the series length. A 1M-point series replots in a few milliseconds instead of copying
// two million points into QCustomPlot's containers.
#include "ui/plot/lossplot.h"

#include <qcustomplot.h>
#include <QTextStream>

#include <cmath>
#include <limits>

#include "ui/common/contrast.h"
#include "ui/plot/columntable.h"
#include "ui/plot/decimation.h"
#include "ui/plot/seriesstore.h"
#include "ui/plot/smoothing.h"

namespace flotilla::ui {
namespace {
struct View {
  const double* x = nullptr;
  const double* y = nullptr;
  qsizetype n = 0;
};
View viewOf(const QVector<double>& x, const QVector<double>& y) {
  return {x.constData(), y.constData(), std::min(x.size(), y.size())};
}
}  // namespace

struct LossPlot::Private {
  QCustomPlot* plot = nullptr;
  QCPGraph* raw = nullptr;
  QCPGraph* smooth = nullptr;
  QCPGraph* val = nullptr;

  // One of two sources: a SeriesStore (x = step) or two ColumnTables.
  const SeriesStore* store = nullptr;
  QString trainKey, valKey;
  const ColumnTable* steps = nullptr;
  const ColumnTable* evals = nullptr;
  QString xColumns[3] = {QStringLiteral("step"), QStringLiteral("tokens"), QStringLiteral("wall_s")};
  XAxisKind xKind = XAxisKind::Step;

  quint64 drawnRevision = 0;
  quint64 generation = 0;
  bool dirty = true;  // a setting changed: replot even at the same revision

  qsizetype trainCount = 0;  // raw points smoothed so far (the source's first trainCount)
  qsizetype valCount = 0;
  EmaSmoother ema{0.6};
  QVector<double> smoothed;  // EMA of the raw values, one per raw point
  double yMin = std::numeric_limits<double>::infinity();
  double yMax = -std::numeric_limits<double>::infinity();
  double minPositive = std::numeric_limits<double>::infinity();
  double planned = 0;
  static constexpr qsizetype kMaxValMarkers = 200;
  QCPScatterStyle valMarker;
  QVector<qsizetype> picks;          // decimation scratch, reused
  QVector<QCPGraphData> drawBuffer;  // points handed to QCustomPlot, reused

  bool attached() const { return store || steps; }
  quint64 revision() const {
    if (store) return store->revision();
    if (steps) return steps->revision() + (evals ? evals->revision() : 0);
    return 0;
  }
  quint64 sourceGeneration() const {
    if (store) return store->generation();
    if (steps) return steps->generation() * 1000003u + (evals ? evals->generation() : 0);
    return 0;
  }
  QString xColumn() const { return xColumns[static_cast<int>(xKind)]; }
  View train() const {
    if (store) return viewOf(store->series(trainKey).x, store->series(trainKey).y);
    if (steps) return viewOf(steps->values(xColumn()), steps->values(trainKey));
    return {};
  }
  View validation() const {
    if (store) return viewOf(store->series(valKey).x, store->series(valKey).y);
    if (evals) return viewOf(evals->values(xColumn()), evals->values(valKey));
    return {};
  }

  void resetData() {
    raw->data()->clear();
    smooth->data()->clear();
    val->data()->clear();
    trainCount = valCount = 0;
    ema.reset();
    smoothed.clear();
    yMin = std::numeric_limits<double>::infinity();
    yMax = -std::numeric_limits<double>::infinity();
    minPositive = std::numeric_limits<double>::infinity();
    dirty = true;
  }

  void widen(double y) {
    if (!std::isfinite(y)) return;
    yMin = std::min(yMin, y);
    yMax = std::max(yMax, y);
    if (y > 0) minPositive = std::min(minPositive, y);
  }

  // Smooths the points appended since the last call (O(1) each) and counts new validation points.
  void pullNewPoints() {
    if (!attached()) return;
    if (sourceGeneration() != generation) {
      generation = sourceGeneration();
      resetData();
    }
    const View t = train();
    const View v = validation();
    if (t.n < trainCount || v.n < valCount) resetData();
    if (t.n > trainCount) {
      if (smoothed.isEmpty()) smoothed.reserve(t.n);  // a whole series at once (attach, re-smooth)
      for (qsizetype i = trainCount; i < t.n; ++i) {
        smoothed.append(ema.push(t.y[i]));
        widen(t.y[i]);
      }
      trainCount = t.n;
    }
    for (qsizetype i = valCount; i < v.n; ++i) widen(v.y[i]);
    valCount = v.n;
  }

  // Hands QCustomPlot the decimated raw and smoothed lines over the visible x range.
  void drawLines() {
    if (!attached() || (trainCount == 0 && valCount == 0)) {
      raw->data()->clear();
      smooth->data()->clear();
      val->data()->clear();
      return;
    }
    const int columns =
        std::max(64, plot->axisRect()->width() > 0 ? plot->axisRect()->width() : plot->width());
    const QCPRange range = plot->xAxis->range();
    const View t = train();
    feed(raw, t.x, t.y, trainCount, range, columns);
    feed(smooth, t.x, smoothed.constData(), trainCount, range, columns);
    const View v = validation();
    feed(val, v.x, v.y, valCount, range, columns);
    // Markers only while they stay apart; a dense validation series reads as a line.
    val->setScatterStyle(valCount <= kMaxValMarkers ? valMarker : QCPScatterStyle(QCPScatterStyle::ssNone));
  }

  void feed(QCPGraph* graph, const double* xs, const double* ys, qsizetype n, const QCPRange& range,
            int columns) {
    decimateIndices(xs, ys, n, range.lower, range.upper, columns, &picks);
    drawBuffer.resize(picks.size());
    for (qsizetype i = 0; i < picks.size(); ++i) drawBuffer[i] = QCPGraphData(xs[picks[i]], ys[picks[i]]);
    graph->data()->set(drawBuffer, true);
  }

  double xEnd(bool withPlan) const {
    double end = 1.0;
    const View t = train();
    if (trainCount > 0 && trainCount <= t.n) end = std::max(end, t.x[trainCount - 1]);
    const View v = validation();
    if (valCount > 0 && valCount <= v.n) end = std::max(end, v.x[valCount - 1]);
    if (withPlan && xKind == XAxisKind::Step) end = std::max(end, planned);
    return end;
  }

  static QString tr(const char* text) { return LossPlot::tr(text); }

  void applyNames() {
    raw->setName(tr("train loss"));
    smooth->setName(tr("smoothed (%1)").arg(ema.weight(), 0, 'f', 2));
    val->setName(tr("validation loss"));
  }
};

LossPlot::LossPlot(QWidget* parent)
    : PlotPanel(QStringLiteral("lossPlot"), tr("Loss"), parent), d(std::make_unique<Private>()) {
  d->plot = customPlot();
  d->plot->yAxis->setLabel(tr("loss (nats)"));
  d->raw = d->plot->addGraph();
  d->smooth = d->plot->addGraph();
  d->val = d->plot->addGraph();
  d->val->setProperty(kReadoutSparse, true);  // hover: a validation value only where there is one
  d->val->setLineStyle(QCPGraph::lsLine);
  setMessage(tr("No run selected"));
  setMessageVisible(true);
  d->applyNames();
  applySeriesPalette(palette());
}

LossPlot::~LossPlot() = default;

void LossPlot::setSource(const SeriesStore* store, const QString& trainKey, const QString& valKey) {
  d->store = store;
  d->steps = d->evals = nullptr;
  d->trainKey = trainKey;
  d->valKey = valKey;
  d->generation = d->sourceGeneration();
  d->resetData();
}

void LossPlot::setTables(const ColumnTable* steps, const QString& loss, const ColumnTable* evals,
                         const QString& valLoss) {
  d->store = nullptr;
  d->steps = steps;
  d->evals = steps ? evals : nullptr;
  d->trainKey = loss;
  d->valKey = valLoss;
  d->generation = d->sourceGeneration();
  d->resetData();
}

void LossPlot::setXColumns(const QString& step, const QString& tokens, const QString& wallTime) {
  d->xColumns[0] = step;
  d->xColumns[1] = tokens;
  d->xColumns[2] = wallTime;
  d->dirty = true;
}

void LossPlot::setXAxisKind(XAxisKind kind) {
  // A SeriesStore only knows steps.
  if (d->store) kind = XAxisKind::Step;
  PlotPanel::setXAxisKind(kind);
  d->xKind = kind;
  d->dirty = true;
}

void LossPlot::setSmoothing(double weight) {
  weight = std::clamp(weight, 0.0, 0.999);
  if (weight == d->ema.weight()) return;
  d->ema = EmaSmoother(weight);
  // Re-smooth what was pulled from the raw points (never from the smoothed ones).
  d->smoothed.clear();
  const View t = d->train();
  const qsizetype n = std::min(d->trainCount, t.n);
  d->smoothed.reserve(n);
  for (qsizetype i = 0; i < n; ++i) d->smoothed.append(d->ema.push(t.y[i]));
  d->trainCount = n;
  d->applyNames();
  d->dirty = true;
}

double LossPlot::smoothing() const { return d->ema.weight(); }

void LossPlot::setPlannedSteps(double steps) {
  if (steps == d->planned) return;
  d->planned = steps;
  d->dirty = true;
}

bool LossPlot::refresh() {
  const bool moved = d->attached() && d->revision() != d->drawnRevision;
  const bool settings = takeDirty();
  if (!moved && !d->dirty && !settings) return false;
  d->pullNewPoints();
  setXRange(0, d->xEnd(!followData()));
  setYRange(d->yMin, d->yMax, d->minPositive);
  const bool empty = d->trainCount == 0 && d->valCount == 0;
  setMessageVisible(empty);
  d->plot->legend->setVisible(!empty);
  d->drawLines();
  replotNow();
  d->drawnRevision = d->revision();
  d->dirty = false;
  return true;
}

QVector<double> LossPlot::smoothedValues() const { return d->smoothed; }
int LossPlot::validationPointCount() const { return static_cast<int>(d->valCount); }
int LossPlot::drawnPointCount() const { return d->raw->dataCount(); }
double LossPlot::drawnRawMaximum() const {
  bool found = false;
  const QCPRange r = d->raw->data()->valueRange(found);
  return found ? r.upper : std::numeric_limits<double>::quiet_NaN();
}

bool LossPlot::writeCsv(QTextStream& out) const {
  // Raw values, one row per training point, the validation loss on the rows of its x.
  const View t = d->train();
  const View v = d->validation();
  if (t.n == 0 && v.n == 0) return false;
  const QString xName = d->store ? QStringLiteral("step") : d->xColumn();
  out << xName << ",loss,loss_smoothed,val_loss\n";
  out.setRealNumberPrecision(12);
  qsizetype j = 0;
  auto writeVal = [&](qsizetype k) { out << v.x[k] << ",,," << v.y[k] << '\n'; };
  for (qsizetype i = 0; i < t.n; ++i) {
    while (j < v.n && v.x[j] < t.x[i]) writeVal(j++);
    out << t.x[i] << ',' << t.y[i] << ',';
    if (i < d->smoothed.size()) out << d->smoothed[i];
    out << ',';
    if (j < v.n && v.x[j] == t.x[i]) out << v.y[j++];
    out << '\n';
  }
  while (j < v.n) writeVal(j++);
  return true;
}

void LossPlot::applySeriesPalette(const QPalette& pal) {
  const QColor accent = pal.color(QPalette::Highlight);
  // The raw loss as the faintest tint of the accent that still reads at 3:1 on the plot (WCAG
  // 1.4.11; its legend swatch is this pen), under the full-strength smoothed line.
  const QColor base = pal.color(QPalette::Base);
  d->raw->setPen(QPen(towardsContrast(blend(accent, base, 0.3), accent, {base}, 3.0), 1.2));
  d->smooth->setPen(QPen(accent, 2.0));
  // Orange reads against both light and dark bases and against the blue-ish highlight.
  const QColor valColor(0xe8, 0x71, 0x0a);
  // Solid: a dashed pen costs ~45 ms per replot over 1,000 points; colour and markers set it apart.
  d->val->setPen(QPen(valColor, 1.5));
  d->valMarker = QCPScatterStyle(QCPScatterStyle::ssDisc, valColor, valColor, 7);
  d->val->setScatterStyle(d->valCount <= Private::kMaxValMarkers ? d->valMarker
                                                                 : QCPScatterStyle(QCPScatterStyle::ssNone));
}

}  // namespace flotilla::ui
