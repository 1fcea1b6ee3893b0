// Page icons tinted from the current palette, so one monochrome SVG serves light and dark themes.
//
// Decision: the SVGs in resources/icons are drawn in plain black and recoloured here (SourceIn
// composition) with the palette's text colour for the normal state and highlighted-text colour
// for the selected state; nothing in the UI hard-codes a colour that breaks under a dark palette.
#pragma once

#include <QColor>
#include <QIcon>
#include <QPalette>
#include <QString>

namespace flotilla::ui {

// Registers the compiled-in resources (the .qrc lives in a static library, whose static
// initialisers the linker may drop). Safe to call more than once.
void initResources();

// ":/icons/<name>.svg" rendered at `size` logical pixels in `color`.
QPixmap tintedPixmap(const QString& name, const QColor& color, int size, qreal devicePixelRatio = 1.0);

// An icon with Normal, Selected and Disabled modes taken from `palette`.
QIcon themedIcon(const QString& name, const QPalette& palette, int size = 20);

// The application icon in colour (resources/icons/flotilla.svg).
QIcon appIcon();

}  // namespace flotilla::ui
