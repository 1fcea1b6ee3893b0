// Palette-tinted SVG icons (see icons.h).
#include "ui/common/icons.h"

#include <QPainter>
#include <QPixmap>
#include <QSvgRenderer>

// Q_INIT_RESOURCE must be used outside any namespace.
static void registerFlotillaResources() { Q_INIT_RESOURCE(flotilla); }

namespace flotilla::ui {

void initResources() {
  static const bool done = [] {
    registerFlotillaResources();
    return true;
  }();
  (void)done;
}

QPixmap tintedPixmap(const QString& name, const QColor& color, int size, qreal devicePixelRatio) {
  initResources();
  const int px = qRound(size * devicePixelRatio);
  QPixmap pixmap(px, px);
  pixmap.fill(Qt::transparent);
  QSvgRenderer renderer(QStringLiteral(":/icons/%1.svg").arg(name));
  QPainter painter(&pixmap);
  painter.setRenderHint(QPainter::Antialiasing);
  renderer.render(&painter, QRectF(0, 0, px, px));
  painter.setCompositionMode(QPainter::CompositionMode_SourceIn);
  painter.fillRect(pixmap.rect(), color);
  painter.end();
  pixmap.setDevicePixelRatio(devicePixelRatio);
  return pixmap;
}

QIcon themedIcon(const QString& name, const QPalette& palette, int size) {
  QIcon icon;
  for (const qreal dpr : {1.0, 2.0}) {
    icon.addPixmap(tintedPixmap(name, palette.color(QPalette::Active, QPalette::WindowText), size, dpr),
                   QIcon::Normal);
    icon.addPixmap(tintedPixmap(name, palette.color(QPalette::Active, QPalette::HighlightedText), size, dpr),
                   QIcon::Selected);
    icon.addPixmap(tintedPixmap(name, palette.color(QPalette::Disabled, QPalette::WindowText), size, dpr),
                   QIcon::Disabled);
  }
  return icon;
}

QIcon appIcon() {
  initResources();
  return QIcon(QStringLiteral(":/icons/flotilla.svg"));
}

}  // namespace flotilla::ui
