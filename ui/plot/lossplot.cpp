// Loss plot adapter (see lossplot.h). Colours come from the palette and follow its changes; the
// raw line is the smoothed line's colour at low opacity, as in TensorBoard.
//
// Drawing large series relies on QCustomPlot's adaptive sampling, which keeps each pixel
// column's minimum and maximum, so decimation never hides a loss spike.
#include "ui/plot/lossplot.h"

#include <qcustomplot.h>
#include <QEvent>
#include <QVBoxLayout>

#include <cmath>
#include <limits>

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

  qsizetype trainCount = 0;  // points copied from the store into the graphs
  qsizetype valCount = 0;
  EmaSmoother ema{0.6};
  QVector<double> smoothed;
  double yMin = std::numeric_limits<double>::infinity();
  double yMax = -std::numeric_limits<double>::infinity();
  double xMax = 0;
  double planned = 0;
  int replots = 0;

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

  // Copies the points appended since the last call.
  void pullNewPoints() {
    if (!store) return;
    if (store->generation() != generation) {
      generation = store->generation();
      resetData();
    }
    const SeriesStore::Series& train = store->series(trainKey);
    const SeriesStore::Series& v = store->series(valKey);
    if (train.x.size() < trainCount || v.x.size() < valCount) resetData();
    if (train.x.size() > trainCount) {
      const qsizetype n = train.x.size() - trainCount;
      const QVector<double> xs = train.x.mid(trainCount, n);
      const QVector<double> ys = train.y.mid(trainCount, n);
      QVector<double> ss;
      ss.reserve(n);
      for (qsizetype i = 0; i < n; ++i) {
        ss.append(ema.push(ys[i]));
        widen(xs[i], ys[i]);
      }
      raw->addData(xs, ys, true);
      smooth->addData(xs, ss, true);
      smoothed += ss;
      trainCount = train.x.size();
    }
    if (v.x.size() > valCount) {
      const qsizetype n = v.x.size() - valCount;
      const QVector<double> xs = v.x.mid(valCount, n);
      const QVector<double> ys = v.y.mid(valCount, n);
      for (qsizetype i = 0; i < n; ++i) widen(xs[i], ys[i]);
      val->addData(xs, ys, true);
      valCount = v.x.size();
    }
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
    val->setPen(QPen(valColor, 1.5, Qt::DashLine));
    val->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, valColor, valColor, 7));
    plot->legend->setBrush(pal.brush(QPalette::Base));
    plot->legend->setBorderPen(QPen(grid, 1));
    plot->legend->setTextColor(text);
  }
};

LossPlot::LossPlot(QWidget* parent) : QWidget(parent), d(std::make_unique<Private>()) {
  d->plot = new QCustomPlot(this);
  d->plot->setObjectName(QStringLiteral("lossPlot"));
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
  // Re-smooth what is drawn from the raw points (never from the smoothed ones).
  QVector<double> xs, ys;
  for (auto it = d->raw->data()->constBegin(); it != d->raw->data()->constEnd(); ++it) {
    xs.append(it->key);
    ys.append(d->ema.push(it->value));
  }
  d->smooth->data()->clear();
  d->smooth->addData(xs, ys, true);
  d->smoothed = ys;
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
  d->plot->replot();
  d->drawnRevision = d->store ? d->store->revision() : 0;
  d->dirty = false;
  ++d->replots;
  return true;
}

int LossPlot::replotCount() const { return d->replots; }
QVector<double> LossPlot::smoothedValues() const { return d->smoothed; }
int LossPlot::validationPointCount() const { return static_cast<int>(d->valCount); }
QWidget* LossPlot::plotWidget() const { return d->plot; }

void LossPlot::changeEvent(QEvent* event) {
  if (event->type() == QEvent::PaletteChange) {
    d->applyPalette(palette());
    d->dirty = true;
    refresh();
  }
  QWidget::changeEvent(event);
}

}  // namespace flotilla::ui
