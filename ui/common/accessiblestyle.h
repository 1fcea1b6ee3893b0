// The app's widget style: the platform's (Fusion on Linux) with edges and focus rings that reach
// WCAG's 3:1 for non-text contrast in any palette.
//
// Decision: a QProxyStyle that draws on top of the base style, never instead of it. The base
// draws check box edges in a tone close to the window (1.2:1 in the dark theme) and a focus
// outline whose change is under 3:1; this style adds a 1 px indicator edge and a 2 px focus ring
// whose colours are derived from the palette at drawing time (contrast.h). The ring shows on
// keyboard focus (Tab) for buttons and check boxes, and whenever a field that takes typing has
// focus, as the platforms do.
#pragma once

#include <QProxyStyle>

namespace flotilla::ui {

class AccessibleStyle : public QProxyStyle {
  Q_OBJECT

 public:
  explicit AccessibleStyle(QStyle* base = nullptr);

  void drawPrimitive(PrimitiveElement element, const QStyleOption* option, QPainter* painter,
                     const QWidget* widget = nullptr) const override;
  void drawControl(ControlElement element, const QStyleOption* option, QPainter* painter,
                   const QWidget* widget = nullptr) const override;
  void drawComplexControl(ComplexControl control, const QStyleOptionComplex* option, QPainter* painter,
                          const QWidget* widget = nullptr) const override;

  // The colours, from a palette: the focus ring (3:1 against the window, buttons and fields) and
  // a check box's edge (3:1 against the window and the field colour).
  static QColor focusColor(const QPalette& palette);
  static QColor edgeColor(const QPalette& palette);
};

// Makes AccessibleStyle the application's style (wrapping the current one) unless it is already.
void installAccessibleStyle();

}  // namespace flotilla::ui
