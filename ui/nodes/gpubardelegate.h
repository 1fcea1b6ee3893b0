// Draws a cell's NodesModel::BarRole fraction as a horizontal bar behind its text (GPU use and
// GPU memory columns); cells without a fraction draw as usual.
#pragma once

#include <QStyledItemDelegate>

namespace flotilla::ui {

class GpuBarDelegate : public QStyledItemDelegate {
  Q_OBJECT

 public:
  using QStyledItemDelegate::QStyledItemDelegate;
  void paint(QPainter* painter, const QStyleOptionViewItem& option, const QModelIndex& index) const override;
  QSize sizeHint(const QStyleOptionViewItem& option, const QModelIndex& index) const override;
};

}  // namespace flotilla::ui
