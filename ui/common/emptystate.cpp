// Empty-state panel (see emptystate.h). The icon is re-tinted when the palette changes, so a
// switch between light and dark themes while the app runs keeps it readable.
#include "ui/common/emptystate.h"

#include <QEvent>
#include <QHBoxLayout>
#include <QLabel>
#include <QPushButton>
#include <QVBoxLayout>

#include "ui/common/icons.h"

namespace flotilla::ui {

EmptyState::EmptyState(const QString& iconName, const QString& headline, const QString& text, QWidget* parent)
    : QWidget(parent), m_iconName(iconName), m_icon(new QLabel(this)), m_actions(new QWidget(this)) {
  m_icon->setAlignment(Qt::AlignCenter);
  updateIcon();

  auto* title = new QLabel(headline, this);
  title->setObjectName(QStringLiteral("emptyHeadline"));
  QFont font = title->font();
  font.setPointSizeF(font.pointSizeF() * 1.25);
  font.setWeight(QFont::DemiBold);
  title->setFont(font);
  title->setAlignment(Qt::AlignCenter);

  auto* body = new QLabel(text, this);
  body->setObjectName(QStringLiteral("emptyText"));
  body->setWordWrap(true);
  body->setAlignment(Qt::AlignHCenter | Qt::AlignTop);
  body->setForegroundRole(QPalette::PlaceholderText);

  auto* actions = new QHBoxLayout(m_actions);
  actions->setContentsMargins(0, 8, 0, 0);
  actions->addStretch();
  actions->addStretch();
  m_actions->hide();

  // A centred column of bounded width. No alignment flags on the wrapped label's layout items:
  // they would switch off height-for-width and clip the text to one line's height.
  auto* column = new QWidget(this);
  column->setMaximumWidth(540);
  column->setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Preferred);
  auto* columnLayout = new QVBoxLayout(column);
  columnLayout->setContentsMargins(0, 0, 0, 0);
  columnLayout->addWidget(m_icon);
  columnLayout->addSpacing(6);
  columnLayout->addWidget(title);
  columnLayout->addWidget(body);
  columnLayout->addWidget(m_actions);

  auto* row = new QHBoxLayout;
  row->addStretch(1);
  row->addWidget(column, 10);
  row->addStretch(1);

  auto* layout = new QVBoxLayout(this);
  layout->addStretch(2);
  layout->addLayout(row);
  layout->addStretch(3);
}

QPushButton* EmptyState::addAction(const QString& label) {
  auto* button = new QPushButton(label, m_actions);
  auto* row = static_cast<QHBoxLayout*>(m_actions->layout());
  row->insertWidget(row->count() - 1, button);
  m_actions->show();
  return button;
}

void EmptyState::changeEvent(QEvent* event) {
  if (event->type() == QEvent::PaletteChange) updateIcon();
  QWidget::changeEvent(event);
}

void EmptyState::updateIcon() {
  m_icon->setPixmap(
      tintedPixmap(m_iconName, palette().color(QPalette::PlaceholderText), 48, devicePixelRatioF()));
}

}  // namespace flotilla::ui
