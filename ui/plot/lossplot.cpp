// Loss plot adapter (see lossplot.h). Colours come from the palette and follow its changes; the
// raw line is the smoothed line's colour at low opacity, as in TensorBoard.
//
// Drawing: the raw points stay in the SeriesStore and the smoothed ones in a cache that grows by
// one EMA step per new point (O(1)); QCustomPlot gets only the decimated points of the visible x
// range (decimation.h: first/min/max/last per pixel column, so spikes survive), a few thousand
// whatever the series length. A 1M-point series replots in a few milliseconds instead of copying
// two million points into QCustomPlot's containers.
#include "ui/plot/lossplot.h"

#include <qcustomplot.h>
#include <QEvent>
#include <QVBoxLayout>

#include <cmath>
#include <limits>

#include "ui/plot/decimation.h"
#include "ui/plot/seriesstore.h"
#include "ui/plot/smoothing.h"

namespace flotilla::ui {

struct LossPlot::Private {
  QCustomPlot* plot = nullptr;
  QCPGraph* raw = nullptr;
  QCPGraph* smooth = nullptr;
  QCPGraph* val = nullptr;
  QCPItemText* message = nullptr;

  const SeriesStore* store = nullptr;
  QString trainKey, valKey;
  quint64 drawnRevision = 0;
  quint64 generation = 0;
  bool dirty = true;  // a setting changed: replot even at the same revision

  qsizetype trainCount = 0;  // raw points smoothed so far (the store's first trainCount)
  qsizetype valCount = 0;
  EmaSmoother ema{0.6};
  QVector<double> smoothed;  // EMA of the raw values, one per raw point
  double yMin = std::numeric_limits<double>::infinity();
  double yMax = -std::numeric_limits<double>::infinity();
  double xMax = 0;
  double planned = 0;
  int replots = 0;
  static constexpr qsizetype kMaxValMarkers = 200;
  QCPScatterStyle valMarker;
  QVector<qsizetype> picks;         // decimation scratch, reused
  QVector<QCPGraphData> drawBuffer;  // points handed to QCustomPlot, reused

  void resetData() {
    raw->data()->clear();
    smooth->data()->clear();
    val->data()->clear();
    trainCount = valCount = 0;
    ema.reset();
    smoothed.clear();
    yMin = std::numeric_limits<double>::infinity();
    yMax = -std::numeric_limits<double>::infinity();
    xMax = 0;
    dirty = true;
  }

  void widen(double x, double y) {
    xMax = std::max(xMax, x);
    if (!std::isfinite(y)) return;
    yMin = std::min(yMin, y);
    yMax = std::max(yMax, y);
  }

  const SeriesStore::Series* trainSeries() const { return store ? &store->series(trainKey) : nullptr; }

  // Smooths the points appended since the last call (O(1) each) and copies new validation points.
  void pullNewPoints() {
    if (!store) return;
    if (store->generation() != generation) {
      generation = store->generation();
      resetData();
    }
    const SeriesStore::Series& train = store->series(trainKey);
    const SeriesStore::Series& v = store->series(valKey);
    if (train.x.size() < trainCount || v.x.size() < valCount) resetData();
    const qsizetype n = train.x.size();
    if (n > trainCount) {
      if (smoothed.isEmpty()) smoothed.reserve(n);  // a whole series at once (attach, re-smooth)
      for (qsizetype i = trainCount; i < n; ++i) {
        smoothed.append(ema.push(train.y[i]));
        widen(train.x[i], train.y[i]);
      }
      trainCount = n;
    }
    const qsizetype m = v.x.size();
    for (qsizetype i = valCount; i < m; ++i) widen(v.x[i], v.y[i]);
    valCount = m;
  }

  // Hands QCustomPlot the decimated raw and smoothed lines over the visible x range.
  void drawLines() {
    const SeriesStore::Series* train = trainSeries();
    if (!train || (trainCount == 0 && valCount == 0)) {
      raw->data()->clear();
      smooth->data()->clear();
      val->data()->clear();
      return;
    }
    const int columns = std::max(64, plot->axisRect()->width() > 0 ? plot->axisRect()->width() : plot->width());
    const QCPRange range = plot->xAxis->range();
    const double* xs = train->x.constData();
    feed(raw, xs, train->y.constData(), trainCount, range, columns);
    feed(smooth, xs, smoothed.constData(), trainCount, range, columns);
    const SeriesStore::Series& v = store->series(valKey);
    feed(val, v.x.constData(), v.y.constData(), valCount, range, columns);
    // Markers only while they stay apart; a dense validation series reads as a line.
    val->setScatterStyle(valCount <= kMaxValMarkers ? valMarker : QCPScatterStyle(QCPScatterStyle::ssNone));
  }

  void feed(QCPGraph* graph, const double* xs, const double* ys, qsizetype n, const QCPRange& range, int columns) {
    decimateIndices(xs, ys, n, range.lower, range.upper, columns, &picks);
    drawBuffer.resize(picks.size());
    for (qsizetype i = 0; i < picks.size(); ++i) drawBuffer[i] = QCPGraphData(xs[picks[i]], ys[picks[i]]);
    graph->data()->set(drawBuffer, true);
  }

  void updateRanges() {
    const double xEnd = std::max({planned, xMax, 1.0});
    plot->xAxis->setRange(0, xEnd);
    if (yMin <= yMax) {
      const double span = yMax - yMin;
      const double pad = span > 0 ? span * 0.06 : std::max(std::abs(yMax) * 0.05, 0.1);
      plot->yAxis->setRange(yMin - pad, yMax + pad);
    } else {
      plot->yAxis->setRange(0, 10);
    }
    const bool empty = trainCount == 0 && valCount == 0;
    message->setVisible(empty);
    plot->legend->setVisible(!empty);
  }

  void applyNames() {
    raw->setName(tr("train loss"));
    smooth->setName(tr("smoothed (%1)").arg(ema.weight(), 0, 'f', 2));
    val->setName(tr("validation loss"));
  }

  static QString tr(const char* text) { return LossPlot::tr(text); }

  void applyPalette(const QPalette& pal) {
    const QColor text = pal.color(QPalette::WindowText);
    const QColor faint = pal.color(QPalette::PlaceholderText);
    QColor grid = text;
    grid.setAlphaF(0.12);
    plot->setBackground(pal.brush(QPalette::Base));
    for (QCPAxis* axis : {plot->xAxis, plot->yAxis}) {
      axis->setBasePen(QPen(text, 1));
      axis->setTickPen(QPen(text, 1));
      axis->setSubTickPen(QPen(text, 1));
      axis->setTickLabelColor(text);
      axis->setLabelColor(text);
      axis->grid()->setPen(QPen(grid, 1, Qt::DotLine));
    }
    message->setColor(faint);
    const QColor accent = pal.color(QPalette::Highlight);
    QColor rawColor = accent;
    rawColor.setAlphaF(0.3);
    raw->setPen(QPen(rawColor, 1.2));
    smooth->setPen(QPen(accent, 2.0));
    // Orange reads against both light and dark bases and against the blue-ish highlight.
    const QColor valColor(0xe8, 0x71, 0x0a);
    // Solid: a dashed pen costs ~45 ms per replot over 1,000 points; colour and markers set it apart.
    val->setPen(QPen(valColor, 1.5));
    valMarker = QCPScatterStyle(QCPScatterStyle::ssDisc, valColor, valColor, 7);
    val->setScatterStyle(valCount <= kMaxValMarkers ? valMarker : QCPScatterStyle(QCPScatterStyle::ssNone));
    plot->legend->setBrush(pal.brush(QPalette::Base));
    plot->legend->setBorderPen(QPen(grid, 1));
    plot->legend->setTextColor(text);
  }
};

LossPlot::LossPlot(QWidget* parent) : QWidget(parent), d(std::make_unique<Private>()) {
  d->plot = new QCustomPlot(this);
  d->plot->setObjectName(QStringLiteral("lossPlot"));
  // Segments instead of one stroked polyline: a decimated noisy loss line zig-zags over itself,
  // and stroking that as one wide antialiased path cost ~150 ms per replot.
  d->plot->setPlottingHint(QCP::phFastPolylines, true);
  d->plot->xAxis->setLabel(tr("step"));
  d->plot->yAxis->setLabel(tr("loss (nats)"));
  d->raw = d->plot->addGraph();
  d->smooth = d->plot->addGraph();
  d->val = d->plot->addGraph();
  d->val->setLineStyle(QCPGraph::lsLine);
  d->message = new QCPItemText(d->plot);
  d->message->position->setType(QCPItemPosition::ptAxisRectRatio);
  d->message->position->setCoords(0.5, 0.5);
  d->message->setPositionAlignment(Qt::AlignCenter);
  QFont font = this->font();
  font.setPointSizeF(font.pointSizeF() * 1.2);
  d->message->setFont(font);
  d->message->setText(tr("No run selected"));
  d->plot->axisRect()->insetLayout()->setInsetAlignment(0, Qt::AlignTop | Qt::AlignRight);
  d->applyNames();
  d->applyPalette(palette());
  d->updateRanges();

  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addWidget(d->plot);
}

LossPlot::~LossPlot() = default;

void LossPlot::setSource(const SeriesStore* store, const QString& trainKey, const QString& valKey) {
  d->store = store;
  d->trainKey = trainKey;
  d->valKey = valKey;
  d->generation = store ? store->generation() : 0;
  d->resetData();
}

void LossPlot::setSmoothing(double weight) {
  weight = std::clamp(weight, 0.0, 0.999);
  if (weight == d->ema.weight()) return;
  d->ema = EmaSmoother(weight);
  // Re-smooth what was pulled from the raw points (never from the smoothed ones).
  d->smoothed.clear();
  if (const SeriesStore::Series* train = d->trainSeries()) {
    const qsizetype n = std::min(d->trainCount, train->y.size());
    d->smoothed.reserve(n);
    for (qsizetype i = 0; i < n; ++i) d->smoothed.append(d->ema.push(train->y[i]));
    d->trainCount = n;
  }
  d->applyNames();
  d->dirty = true;
}

double LossPlot::smoothing() const { return d->ema.weight(); }

void LossPlot::setPlannedSteps(double steps) {
  if (steps == d->planned) return;
  d->planned = steps;
  d->dirty = true;
}

void LossPlot::setMessage(const QString& message) {
  if (message == d->message->text()) return;
  d->message->setText(message);
  d->dirty = true;
}

bool LossPlot::refresh() {
  const bool moved = d->store && d->store->revision() != d->drawnRevision;
  if (!moved && !d->dirty) return false;
  d->pullNewPoints();
  d->updateRanges();
  d->drawLines();
  d->plot->replot();
  d->drawnRevision = d->store ? d->store->revision() : 0;
  d->dirty = false;
  ++d->replots;
  return true;
}

int LossPlot::replotCount() const { return d->replots; }
QVector<double> LossPlot::smoothedValues() const { return d->smoothed; }
int LossPlot::validationPointCount() const { return static_cast<int>(d->valCount); }
int LossPlot::drawnPointCount() const { return d->raw->dataCount(); }
double LossPlot::drawnRawMaximum() const {
  bool found = false;
  const QCPRange r = d->raw->data()->valueRange(found);
  return found ? r.upper : std::numeric_limits<double>::quiet_NaN();
}
QWidget* LossPlot::plotWidget() const { return d->plot; }

void LossPlot::resizeEvent(QResizeEvent* event) {
  QWidget::resizeEvent(event);
  d->dirty = true;  // another width: decimate again at the next refresh
}

void LossPlot::changeEvent(QEvent* event) {
  if (event->type() == QEvent::PaletteChange) {
    d->applyPalette(palette());
    d->dirty = true;
    refresh();
  }
  QWidget::changeEvent(event);
}

}  // namespace flotilla::ui
