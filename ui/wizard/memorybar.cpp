// Memory bar (see memorybar.h).
#include "ui/wizard/memorybar.h"

#include <QPainter>
#include <QPainterPath>

#include <algorithm>

#include "ui/nodes/machinefacts.h"

namespace flotilla::ui {

MemoryBar::MemoryBar(QWidget* parent) : QWidget(parent) {
  setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Fixed);
}

void MemoryBar::setUsage(quint64 used, quint64 capacity) {
  m_used = used;
  m_capacity = capacity;
  setToolTip(text());
  update();
}

QString MemoryBar::text() const {
  if (m_capacity == 0) return tr("—");
  const double pct = 100.0 * static_cast<double>(m_used) / static_cast<double>(m_capacity);
  return tr("%1 of %2 per device (%3%)")
      .arg(formatBytes(m_used), formatBytes(m_capacity))
      .arg(pct, 0, 'f', 0);
}

QSize MemoryBar::sizeHint() const { return {360, fontMetrics().height() + 12}; }
QSize MemoryBar::minimumSizeHint() const {
  return {fontMetrics().horizontalAdvance(text()) + 16, sizeHint().height()};
}

void MemoryBar::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.setRenderHint(QPainter::Antialiasing);
  const QRectF r = QRectF(rect()).adjusted(0.5, 0.5, -0.5, -0.5);
  QColor track = palette().color(QPalette::WindowText);
  track.setAlphaF(0.10);
  QPainterPath outline;
  outline.addRoundedRect(r, 4, 4);
  p.fillPath(outline, track);
  if (m_capacity > 0) {
    const double frac = std::clamp(static_cast<double>(m_used) / static_cast<double>(m_capacity), 0.0, 1.0);
    QColor fill = overCapacity() ? QColor(0xc6, 0x28, 0x28) : palette().color(QPalette::Highlight);
    fill.setAlphaF(0.75);
    QRectF filled = r;
    filled.setWidth(r.width() * frac);
    p.save();
    p.setClipRect(filled);
    p.fillPath(outline, fill);
    p.restore();
  }
  p.setPen(palette().color(QPalette::WindowText));
  p.drawText(rect(), Qt::AlignCenter, text());
}

}  // namespace flotilla::ui
