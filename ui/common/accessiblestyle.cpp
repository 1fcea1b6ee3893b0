// The app's style (see accessiblestyle.h).
#include "ui/common/accessiblestyle.h"

#include <QApplication>
#include <QPainter>
#include <QStyleFactory>
#include <QStyleOption>

#include "ui/common/contrast.h"

namespace flotilla::ui {
namespace {

constexpr double kNonText = 3.0;  // WCAG 1.4.11

void drawRing(QPainter* painter, const QRect& rect, const QPalette& palette) {
  painter->save();
  painter->setRenderHint(QPainter::Antialiasing, true);
  painter->setPen(QPen(AccessibleStyle::focusColor(palette), 2.0));
  painter->setBrush(Qt::NoBrush);
  painter->drawRoundedRect(QRectF(rect).adjusted(2, 2, -2, -2), 3, 3);  // over the bevel, inside the edge
  painter->restore();
}

bool keyboardFocus(const QStyleOption* option) {
  return (option->state & QStyle::State_HasFocus) && (option->state & QStyle::State_KeyboardFocusChange);
}

}  // namespace

AccessibleStyle::AccessibleStyle(QStyle* base) : QProxyStyle(base) {}

QColor AccessibleStyle::focusColor(const QPalette& p) {
  return towardsContrast(p.color(QPalette::Highlight), p.color(QPalette::WindowText),
                         // Button lighter: the bevel and gradient the base style draws round a button.
                         {p.color(QPalette::Window), p.color(QPalette::Button),
                          p.color(QPalette::Button).lighter(180), p.color(QPalette::Base)},
                         kNonText + 0.1);
}

QColor AccessibleStyle::edgeColor(const QPalette& p) {
  return towardsContrast(p.color(QPalette::Mid), p.color(QPalette::WindowText),
                         {p.color(QPalette::Window), p.color(QPalette::Base)}, kNonText + 0.1);
}

void AccessibleStyle::drawPrimitive(PrimitiveElement element, const QStyleOption* option, QPainter* painter,
                                    const QWidget* widget) const {
  QProxyStyle::drawPrimitive(element, option, painter, widget);
  if (element == PE_IndicatorCheckBox || element == PE_IndicatorRadioButton) {
    painter->save();
    painter->setRenderHint(QPainter::Antialiasing, element == PE_IndicatorRadioButton);
    painter->setPen(QPen(edgeColor(option->palette), 1.0));
    painter->setBrush(Qt::NoBrush);
    const QRectF r = QRectF(option->rect).adjusted(0.5, 0.5, -0.5, -0.5);
    if (element == PE_IndicatorRadioButton)
      painter->drawEllipse(r);
    else
      painter->drawRect(r);
    painter->restore();
  } else if (element == PE_PanelLineEdit && (option->state & State_HasFocus) &&
             (option->state & State_Enabled)) {
    const auto* frame = qstyleoption_cast<const QStyleOptionFrame*>(option);
    if (frame && frame->lineWidth > 0) drawRing(painter, option->rect, option->palette);
  }
}

void AccessibleStyle::drawControl(ControlElement element, const QStyleOption* option, QPainter* painter,
                                  const QWidget* widget) const {
  QProxyStyle::drawControl(element, option, painter, widget);
  if ((element == CE_PushButton || element == CE_CheckBox || element == CE_RadioButton) &&
      keyboardFocus(option))
    drawRing(painter, option->rect, option->palette);
}

void AccessibleStyle::drawComplexControl(ComplexControl control, const QStyleOptionComplex* option,
                                         QPainter* painter, const QWidget* widget) const {
  QProxyStyle::drawComplexControl(control, option, painter, widget);
  if (control != CC_ComboBox && control != CC_SpinBox) return;
  const auto* combo = qstyleoption_cast<const QStyleOptionComboBox*>(option);
  const bool typing = control == CC_SpinBox || (combo && combo->editable);
  if ((typing && (option->state & State_HasFocus)) || keyboardFocus(option))
    drawRing(painter, option->rect, option->palette);
}

void installAccessibleStyle() {
  if (qobject_cast<AccessibleStyle*>(QApplication::style())) return;
  QStyle* base = QStyleFactory::create(QApplication::style()->name());
  QApplication::setStyle(new AccessibleStyle(base));
}

}  // namespace flotilla::ui
