// Plot frame (see plotpanel.h): palette, message, axes kinds, export and the context menu.
#include "ui/plot/plotpanel.h"

#include <qcustomplot.h>

#include <QEvent>
#include <QFile>
#include <QFileDialog>
#include <QFontMetrics>
#include <QMenu>
#include <QMouseEvent>
#include <QSvgGenerator>
#include <QTextStream>
#include <QTimer>
#include <QVBoxLayout>
#include "ui/common/savefile.h"
#include "ui/plot/plotstyle.h"

#include <algorithm>
#include <cmath>

namespace flotilla::ui {

PlotPanel::PlotPanel(const QString& objectName, const QString& title, QWidget* parent)
    : QWidget(parent), m_title(title), m_plot(new QCustomPlot(this)) {
  m_plot->setObjectName(objectName);
  // Segments instead of one stroked polyline: a decimated noisy line zig-zags over itself, and
  // stroking that as one wide antialiased path costs ~150 ms per replot.
  m_plot->setPlottingHint(QCP::phFastPolylines, true);
  m_plot->setContextMenuPolicy(Qt::CustomContextMenu);
  connect(m_plot, &QWidget::customContextMenuRequested, this, &PlotPanel::showMenu);
  m_plot->plotLayout()->insertRow(0);
  auto* heading = new QCPTextElement(m_plot, title);
  heading->setObjectName(QStringLiteral("title"));
  QFont font = this->font();
  font.setWeight(QFont::DemiBold);
  heading->setFont(font);
  m_plot->plotLayout()->addElement(0, 0, heading);
  m_message = new QCPItemText(m_plot);
  m_message->position->setType(QCPItemPosition::ptAxisRectRatio);
  m_message->position->setCoords(0.5, 0.5);
  m_message->setPositionAlignment(Qt::AlignCenter);
  m_message->setTextAlignment(Qt::AlignCenter);
  m_message->setVisible(false);
  // The legend as one row under the title, never over the data (small plots have no room for
  // an inset legend that does not hide a bar or the latest points).
  m_plot->legend->setVisible(false);
  m_plot->axisRect()->insetLayout()->take(m_plot->legend);
  m_plot->plotLayout()->insertRow(1);
  m_plot->plotLayout()->addElement(1, 0, m_plot->legend);
  m_plot->plotLayout()->setRowStretchFactor(1, 0.001);
  m_plot->plotLayout()->setRowSpacing(0);
  m_plot->legend->setWrap(3);  // a fourth entry starts a second row instead of being clipped
  m_plot->legend->setFillOrder(QCPLegend::foColumnsFirst);
  m_plot->legend->setMargins(QMargins(4, 0, 4, 0));
  m_plot->legend->setRowSpacing(0);
  m_plot->legend->setColumnSpacing(10);
  m_plot->legend->setIconSize(18, 10);
  QFont legendFont = this->font();
  legendFont.setPointSizeF(legendFont.pointSizeF() * 0.9);
  m_plot->legend->setFont(legendFont);
  m_plot->xAxis->setLabel(xLabel(m_xKind));
  installXTicker();
  // Exploring: wheel zoom and drag pan along x, double-click back; the readout follows the mouse.
  m_plot->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
  m_plot->axisRect()->setRangeDrag(Qt::Horizontal);
  m_plot->axisRect()->setRangeZoom(Qt::Horizontal);
  m_plot->setMouseTracking(true);
  m_plot->installEventFilter(this);
  connect(m_plot->xAxis, qOverload<const QCPRange&>(&QCPAxis::rangeChanged), this, [this] {
    if (m_settingRange) return;
    m_zoomed = true;  // the user's wheel or drag
    m_dirty = true;   // decimate again over the new range
    QTimer::singleShot(0, this, [this] { refresh(); });
  });
  connect(m_plot, &QCustomPlot::mouseDoubleClick, this, [this] { resetZoom(); });
  connect(m_plot, &QCustomPlot::mouseMove, this, [this](QMouseEvent* e) { showReadout(e->pos()); });
  m_cursorLine = new QCPItemStraightLine(m_plot);
  m_cursorLine->setVisible(false);
  m_cursorLine->setSelectable(false);
  m_readout = new QCPItemText(m_plot);
  m_readout->position->setType(QCPItemPosition::ptAxisRectRatio);
  m_readout->position->setCoords(0.01, 0.02);
  m_readout->setPositionAlignment(Qt::AlignLeft | Qt::AlignTop);
  m_readout->setTextAlignment(Qt::AlignLeft);
  m_readout->setPadding(QMargins(4, 2, 4, 2));
  m_readout->setClipToAxisRect(false);
  m_readout->setVisible(false);
  m_readout->setSelectable(false);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addWidget(m_plot);
  setMinimumSize(200, 140);
  applyPalette();
}

PlotPanel::~PlotPanel() = default;

QWidget* PlotPanel::plotWidget() const { return m_plot; }

void PlotPanel::setMessage(const QString& message) {
  if (message == m_messageText) return;
  m_messageText = message;
  m_message->setText(message);  // wrapped to the plot area by the next replot
  m_dirty = true;
}

void PlotPanel::setMessageVisible(bool visible) { m_message->setVisible(visible); }

bool PlotPanel::messageVisible() const { return m_message->visible(); }
QString PlotPanel::drawnMessage() const { return m_message->text(); }

QRect PlotPanel::messageRect() const {
  return QRectF(m_message->topLeft->pixelPosition(), m_message->bottomRight->pixelPosition())
      .normalized()
      .toAlignedRect();
}

QRect PlotPanel::plotAreaRect() const { return m_plot->axisRect()->rect(); }

QVector<QRectF> PlotPanel::xTickLabelRects() const {
  QVector<QRectF> rects;
  const QCPAxis* axis = m_plot->xAxis;
  if (!axis->visible() || !axis->tickLabels()) return rects;
  const QFontMetricsF fm(axis->tickLabelFont());
  const QVector<double> ticks = axis->tickVector();
  const QVector<QString> labels = axis->tickVectorLabels();
  const double top = m_plot->axisRect()->rect().bottom() + axis->tickLabelPadding();
  for (qsizetype i = 0; i < ticks.size() && i < labels.size(); ++i) {
    if (!axis->range().contains(ticks[i])) continue;
    const double w = fm.horizontalAdvance(labels[i]);
    rects.append(QRectF(axis->coordToPixel(ticks[i]) - w / 2, top, w, fm.height()));
  }
  return rects;
}

QString PlotPanel::xLabel(XAxisKind kind) {
  switch (kind) {
    case XAxisKind::Step:
      return tr("step");
    case XAxisKind::Tokens:
      return tr("tokens");
    case XAxisKind::WallTime:
      return tr("wall time (h:mm:ss)");
  }
  return {};
}

void PlotPanel::setXAxisKind(XAxisKind kind) {
  if (kind == m_xKind) return;
  m_xKind = kind;
  m_plot->xAxis->setLabel(xLabel(kind));
  installXTicker();
  m_dirty = true;
}

void PlotPanel::installXTicker() {
  m_xTicksWanted = m_xKind == XAxisKind::Step ? 5 : 4;
  m_xTicks = m_xTicksWanted;
  QSharedPointer<QCPAxisTicker> ticker;
  if (m_xKind == XAxisKind::WallTime) {
    auto time = QSharedPointer<QCPAxisTickerTime>::create();
    time->setTimeFormat(QStringLiteral("%h:%m:%s"));
    time->setFieldWidth(QCPAxisTickerTime::tuHours, 1);  // "0:02:30"
    ticker = time;
  } else {
    ticker = QSharedPointer<QCPAxisTicker>::create();
  }
  ticker->setTickCount(m_xTicks);
  m_xTicker = ticker.data();
  m_plot->xAxis->setTicker(ticker);
  m_plot->xAxis->setNumberFormat(m_xKind == XAxisKind::Tokens ? QStringLiteral("gb") : QStringLiteral("g"));
}

bool PlotPanel::fitToWidth() {
  bool changed = false;
  // The message, wrapped at words to the plot area (the item itself never wraps).
  const int width = m_plot->axisRect()->width() - 12;
  if (m_message->visible() && width > 40 && !m_messageText.isEmpty()) {
    const QFontMetrics fm(m_message->font());
    QStringList lines;
    for (const QString& line : m_messageText.split(QLatin1Char('\n'))) {
      QString current;
      for (const QString& word : line.split(QLatin1Char(' '), Qt::SkipEmptyParts)) {
        const QString trial = current.isEmpty() ? word : current + QLatin1Char(' ') + word;
        if (!current.isEmpty() && fm.horizontalAdvance(trial) > width) {
          lines << current;
          current = word;
        } else {
          current = trial;
        }
      }
      lines << current;
    }
    const QString wrapped = lines.join(QLatin1Char('\n'));
    if (wrapped != m_message->text()) {
      m_message->setText(wrapped);
      changed = true;
    }
  }
  // Fewer x labels while two neighbours overlap (long token counts on a narrow plot).
  if (m_plot->xAxis->ticker().data() == m_xTicker && m_xTicks > 2) {
    const QVector<QRectF> rects = xTickLabelRects();
    for (qsizetype i = 1; i < rects.size(); ++i) {
      if (rects[i - 1].right() + 6 > rects[i].left()) {
        m_xTicker->setTickCount(--m_xTicks);
        changed = true;
        break;
      }
    }
  }
  // Fewer y labels while two neighbours overlap (a short plot on a small window).
  for (QCPAxis* axis : {m_plot->yAxis, m_plot->yAxis2}) {
    if (!axis->visible() || !axis->tickLabels()) continue;
    const double height = QFontMetricsF(axis->tickLabelFont()).height();
    double lastPixel = NAN;
    for (const double tick : axis->tickVector()) {
      if (!axis->range().contains(tick)) continue;
      const double pixel = axis->coordToPixel(tick);
      if (std::isfinite(lastPixel) && std::abs(pixel - lastPixel) < height &&
          axis->ticker()->tickCount() > 2) {
        axis->ticker()->setTickCount(axis->ticker()->tickCount() - 1);
        changed = true;
        break;
      }
      lastPixel = pixel;
    }
  }
  return changed;
}

void PlotPanel::setLogY(bool log) {
  if (log == m_logY) return;
  m_logY = log;
  m_plot->yAxis->setScaleType(log ? QCPAxis::stLogarithmic : QCPAxis::stLinear);
  if (log)
    m_plot->yAxis->setTicker(QSharedPointer<QCPAxisTickerLog>::create());
  else
    m_plot->yAxis->setTicker(QSharedPointer<QCPAxisTicker>::create());
  m_dirty = true;
}

void PlotPanel::setXRange(double lo, double hi) {
  if (m_zoomed) return;
  m_settingRange = true;
  m_plot->xAxis->setRange(lo, hi);
  m_settingRange = false;
}

void PlotPanel::resetZoom() {
  if (!m_zoomed) return;
  m_zoomed = false;
  m_dirty = true;
  refresh();
}

void PlotPanel::setFollowData(bool follow) {
  if (follow == m_followData) return;
  m_followData = follow;
  m_dirty = true;
}

QString PlotPanel::readoutAt(double x) const {
  QStringList parts;
  double shownX = NAN;
  for (int i = 0; i < m_plot->graphCount(); ++i) {
    QCPGraph* graph = m_plot->graph(i);
    if (!graph->visible() || graph->name().isEmpty() || graph->data()->isEmpty()) continue;
    // The drawn point nearest to x: the first at or after it, or the one before.
    auto it = graph->data()->findBegin(x, false);
    if (it == graph->data()->constEnd()) --it;
    if (it != graph->data()->constBegin()) {
      auto before = it - 1;
      if (std::abs(before->key - x) < std::abs(it->key - x)) it = before;
    }
    if (!std::isfinite(it->value)) continue;
    // A line whose name says its value (a budget, a projection's end): the name alone.
    if (graph->property(kReadoutNameOnly).toBool()) {
      parts << graph->name();
      continue;
    }
    // A sparse series (validation every N steps): its value only at a point of its own under the
    // cursor, else the last one before it, named with its step.
    if (graph->property(kReadoutSparse).toBool()) {
      const QCPAxis* axis = graph->keyAxis();
      if (std::abs(axis->coordToPixel(it->key) - axis->coordToPixel(x)) > kSparseNearPixels) {
        auto last = graph->data()->findBegin(x, false);
        if (last == graph->data()->constEnd() || last->key > x) {
          if (last == graph->data()->constBegin()) continue;  // none before the cursor
          --last;
        }
        if (!std::isfinite(last->value) || last->key > x) continue;
        parts << tr("%1 %2 (last, at %3 %4)")
                     .arg(graph->name(), QString::number(last->value, 'g', 4), xLabel(m_xKind),
                          QString::number(last->key, 'g', 7));
        continue;
      }
    }
    if (std::isnan(shownX)) shownX = it->key;
    parts << QStringLiteral("%1 %2").arg(graph->name(), QString::number(it->value, 'g', 4));
  }
  if (std::isnan(shownX)) return {};
  if (parts.isEmpty()) return {};
  QString where;
  if (m_xKind == XAxisKind::WallTime) {
    const qint64 s = static_cast<qint64>(std::llround(shownX));
    where = QStringLiteral("%1:%2:%3")
                .arg(s / 3600)
                .arg((s / 60) % 60, 2, 10, QLatin1Char('0'))
                .arg(s % 60, 2, 10, QLatin1Char('0'));
  } else {
    where = QStringLiteral("%1 %2").arg(xLabel(m_xKind), QString::number(shownX, 'g', 7));
  }
  return where + QStringLiteral(" · ") + parts.join(QStringLiteral(" · "));
}

QString PlotPanel::readoutText() const { return m_readout->visible() ? m_readout->text() : QString(); }

void PlotPanel::showReadout(const QPoint& pos) {
  if (!m_plot->axisRect()->rect().contains(pos)) {
    hideReadout();
    return;
  }
  const double x = m_plot->xAxis->pixelToCoord(pos.x());
  const QString text = readoutAt(x);
  if (text.isEmpty()) {
    hideReadout();
    return;
  }
  // One line while it fits inside the plot area, else one series a line: never over the axes.
  const QFontMetrics fm(m_readout->font());
  const int room = m_plot->axisRect()->rect().width() - 16;
  m_readout->setText(fm.horizontalAdvance(text) <= room
                         ? text
                         : QString(text).replace(QStringLiteral(" · "), QStringLiteral("\n")));
  m_readout->setVisible(true);
  m_cursorLine->point1->setCoords(x, 0);
  m_cursorLine->point2->setCoords(x, 1);
  m_cursorLine->setVisible(true);
  m_plot->replot(QCustomPlot::rpQueuedReplot);
}

void PlotPanel::hideReadout() {
  if (!m_readout->visible()) return;
  m_readout->setVisible(false);
  m_cursorLine->setVisible(false);
  m_plot->replot(QCustomPlot::rpQueuedReplot);
}

bool PlotPanel::eventFilter(QObject* watched, QEvent* event) {
  if (watched == m_plot && event->type() == QEvent::Leave) hideReadout();
  return QWidget::eventFilter(watched, event);
}

void PlotPanel::setYRange(double lo, double hi, double minPositive) {
  if (m_logY) {
    if (!(minPositive > 0) || !std::isfinite(minPositive) || !(hi > 0)) {
      m_plot->yAxis->setRange(0.1, 10);
      return;
    }
    m_plot->yAxis->setRange(minPositive / 1.25, hi * 1.25);
    return;
  }
  if (!(lo <= hi)) {
    m_plot->yAxis->setRange(0, 1);
    return;
  }
  const double span = hi - lo;
  const double pad = span > 0 ? span * 0.08 : std::max(std::abs(hi) * 0.1, 0.1);
  m_plot->yAxis->setRange(lo >= 0 && lo - pad < 0 ? 0 : lo - pad, hi + pad);
}

void PlotPanel::replotNow() {
  // An empty legend (a plot with no series yet) must leave the layout: QCPLayoutGrid caps a
  // column at the smallest maximum width of its elements, and a legend without columns reports
  // only its margins, which squeezes the whole plot into its minimum width.
  QCPLayoutGrid* layout = m_plot->plotLayout();
  const bool placed = layout->hasElement(1, 0) && layout->element(1, 0) == m_plot->legend;
  if (m_plot->legend->itemCount() == 0 && placed) {
    layout->take(m_plot->legend);
  } else if (m_plot->legend->itemCount() > 0 && !placed && !layout->hasElement(1, 0)) {
    layout->addElement(1, 0, m_plot->legend);
  }
  // The message and the x labels fit the layout of the last replot; a replot that moved it (the
  // first one, a resize, longer labels) is followed by another, rarely.
  fitToWidth();
  m_plot->replot(QCustomPlot::rpImmediateRefresh);
  for (int pass = 0; pass < 3 && fitToWidth(); ++pass) m_plot->replot(QCustomPlot::rpImmediateRefresh);
  ++m_replots;
}

bool PlotPanel::exportImage(const QString& path) {
  m_error.clear();
  // Draw what is current, even when the timer has not ticked since the last record.
  refresh();
  const int w = std::max(640, m_plot->width());
  const int h = std::max(400, m_plot->height());
  const QString suffix = QFileInfo(path).suffix().toLower();
  bool ok = false;
  if (suffix == QLatin1String("png")) {
    ok = m_plot->savePng(path, w, h);
  } else if (suffix == QLatin1String("pdf")) {
    ok = m_plot->savePdf(path, w, h);
  } else if (suffix == QLatin1String("svg")) {
    QSvgGenerator svg;
    svg.setFileName(path);
    svg.setSize(QSize(w, h));
    svg.setViewBox(QRect(0, 0, w, h));
    svg.setTitle(m_title);
    QCPPainter painter;
    ok = painter.begin(&svg);
    if (ok) {
      m_plot->toPainter(&painter, w, h);
      ok = painter.end();
    }
    ok = ok && QFileInfo(path).size() > 0;
  } else {
    m_error = tr("Unknown picture format '%1': use .png, .svg or .pdf").arg(suffix);
    return false;
  }
  if (!ok) m_error = tr("Could not write %1").arg(path);
  return ok;
}

bool PlotPanel::exportCsv(const QString& path) {
  m_error.clear();
  refresh();
  QString text;
  QTextStream out(&text);
  if (!writeCsv(out)) {
    m_error = tr("Nothing to export yet: the plot has no data");
    return false;
  }
  out.flush();
  return saveFileAtomically(path, text.toUtf8(), &m_error);
}

void PlotPanel::addExportActions(QMenu* menu) {
  menu->addAction(tr("Save picture as PNG…"), this, [this] { chooseAndExport(QStringLiteral("png")); });
  menu->addAction(tr("Save picture as SVG…"), this, [this] { chooseAndExport(QStringLiteral("svg")); });
  menu->addAction(tr("Save picture as PDF…"), this, [this] { chooseAndExport(QStringLiteral("pdf")); });
  menu->addAction(tr("Export data as CSV…"), this, [this] { chooseAndExport(QStringLiteral("csv")); });
}

void PlotPanel::showMenu(const QPoint& pos) {
  auto* menu = new QMenu(this);
  menu->setAttribute(Qt::WA_DeleteOnClose);
  addExportActions(menu);
  menu->popup(m_plot->mapToGlobal(pos));
}

void PlotPanel::chooseAndExport(const QString& suffix) {
  // Non-modal: the dashboard keeps drawing while the dialog is open.
  auto* dialog = new QFileDialog(this, tr("Export %1").arg(m_title));
  dialog->setAttribute(Qt::WA_DeleteOnClose);
  dialog->setAcceptMode(QFileDialog::AcceptSave);
  dialog->setDefaultSuffix(suffix);
  dialog->setNameFilter(tr("%1 files (*.%2)").arg(suffix.toUpper(), suffix));
  QString base = m_plot->objectName();
  dialog->selectFile(base + QLatin1Char('.') + suffix);
  connect(dialog, &QFileDialog::fileSelected, this, [this, suffix](const QString& path) {
    const bool ok = suffix == QLatin1String("csv") ? exportCsv(path) : exportImage(path);
    if (!ok) setToolTip(m_error);
  });
  dialog->open();
}

void PlotPanel::applyPalette() {
  const QPalette pal = palette();
  const QColor text = pal.color(QPalette::WindowText);
  plotstyle::styleAxes(m_plot, pal, {m_plot->xAxis, m_plot->yAxis, m_plot->yAxis2});
  if (auto* heading = qobject_cast<QCPTextElement*>(m_plot->plotLayout()->element(0, 0)))
    heading->setTextColor(text);
  m_message->setColor(pal.color(QPalette::PlaceholderText));
  m_readout->setColor(text);
  m_readout->setBrush(pal.brush(QPalette::ToolTipBase));
  m_readout->setPen(QPen(pal.color(QPalette::Mid)));
  m_cursorLine->setPen(QPen(pal.color(QPalette::PlaceholderText), 1, Qt::DashLine));
  m_plot->legend->setBrush(Qt::NoBrush);
  m_plot->legend->setBorderPen(Qt::NoPen);
  m_plot->legend->setTextColor(text);
  applySeriesPalette(pal);
}

void PlotPanel::changeEvent(QEvent* event) {
  if (event->type() == QEvent::PaletteChange) {
    applyPalette();
    m_dirty = true;
    refresh();
  }
  QWidget::changeEvent(event);
}

void PlotPanel::resizeEvent(QResizeEvent* event) {
  QWidget::resizeEvent(event);
  m_dirty = true;  // another width: decimate again at the next refresh
  if (m_plot->xAxis->ticker().data() == m_xTicker && m_xTicks != m_xTicksWanted)
    m_xTicker->setTickCount(m_xTicks = m_xTicksWanted);  // room again, maybe: fitToWidth decides
  for (QCPAxis* axis : {m_plot->yAxis, m_plot->yAxis2})
    axis->ticker()->setTickCount(5);  // QCustomPlot's default
}

}  // namespace flotilla::ui
