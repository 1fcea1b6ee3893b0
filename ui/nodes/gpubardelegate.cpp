// Bar cells of the Nodes table (see gpubardelegate.h).
#include "ui/nodes/gpubardelegate.h"

#include <QApplication>
#include <QPainter>
#include <algorithm>

#include "ui/nodes/nodesmodel.h"

namespace flotilla::ui {

void GpuBarDelegate::paint(QPainter* painter, const QStyleOptionViewItem& option,
                           const QModelIndex& index) const {
  const QVariant bar = index.data(NodesModel::BarRole);
  if (!bar.isValid()) {
    QStyledItemDelegate::paint(painter, option, index);
    return;
  }
  const double fraction = std::clamp(bar.toDouble(), 0.0, 1.0);
  QStyleOptionViewItem opt = option;
  initStyleOption(&opt, index);
  const QString text = opt.text;
  opt.text.clear();
  // Background and selection only; the text is drawn over the bar below.
  QStyle* style = opt.widget ? opt.widget->style() : QApplication::style();
  style->drawPrimitive(QStyle::PE_PanelItemViewItem, &opt, painter, opt.widget);

  const QRect track = option.rect.adjusted(6, 5, -6, -5);
  painter->save();
  painter->setRenderHint(QPainter::Antialiasing);
  painter->setPen(Qt::NoPen);
  QColor base = option.palette.color(QPalette::Mid);
  base.setAlpha(70);
  painter->setBrush(base);
  painter->drawRoundedRect(track, 3, 3);
  QColor fill = fraction > 0.9 ? QColor(0xd0, 0x45, 0x3a) : option.palette.color(QPalette::Highlight);
  fill.setAlpha(150);
  painter->setBrush(fill);
  QRect filled = track;
  filled.setWidth(static_cast<int>(track.width() * fraction));
  if (filled.width() > 0) painter->drawRoundedRect(filled, 3, 3);
  painter->setPen(option.palette.color(option.state & QStyle::State_Selected ? QPalette::HighlightedText
                                                                             : QPalette::Text));
  painter->drawText(track.adjusted(6, 0, -6, 0), Qt::AlignVCenter | Qt::AlignLeft, text);
  painter->restore();
}

QSize GpuBarDelegate::sizeHint(const QStyleOptionViewItem& option, const QModelIndex& index) const {
  QSize s = QStyledItemDelegate::sizeHint(option, index);
  if (index.data(NodesModel::BarRole).isValid()) s.setWidth(std::max(s.width() + 24, 150));
  return s;
}

}  // namespace flotilla::ui
