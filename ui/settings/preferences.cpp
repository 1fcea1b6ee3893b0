// Preferences and theme palettes (see preferences.h).
#include "ui/settings/preferences.h"

#include <QApplication>
#include <QPalette>
#include <QObject>
#include <QSettings>
#include <QStyle>

#include <optional>

#include "runs/figures.h"
#include "ui/common/accessiblestyle.h"

namespace flotilla::ui {
namespace {

QSettings appSettings() { return QSettings(QStringLiteral("Flotilla"), QStringLiteral("Flotilla")); }

QPalette lightPalette() {
  QPalette p;
  const QColor window(0xf4, 0xf5, 0xf7), text(0x1f, 0x23, 0x28), base(Qt::white);
  p.setColor(QPalette::Window, window);
  p.setColor(QPalette::WindowText, text);
  p.setColor(QPalette::Base, base);
  p.setColor(QPalette::AlternateBase, QColor(0xee, 0xf0, 0xf3));
  p.setColor(QPalette::ToolTipBase, base);
  p.setColor(QPalette::ToolTipText, text);
  p.setColor(QPalette::PlaceholderText, QColor(0x62, 0x68, 0x70));  // >= 4.5:1 on Window and Base (WCAG AA)
  p.setColor(QPalette::Text, text);
  p.setColor(QPalette::Button, QColor(0xe9, 0xeb, 0xee));
  p.setColor(QPalette::ButtonText, text);
  p.setColor(QPalette::BrightText, Qt::red);
  p.setColor(QPalette::Light, Qt::white);
  p.setColor(QPalette::Midlight, QColor(0xe2, 0xe4, 0xe8));
  p.setColor(QPalette::Mid, QColor(0xc4, 0xc8, 0xce));
  p.setColor(QPalette::Dark, QColor(0x9a, 0xa0, 0xa8));
  p.setColor(QPalette::Shadow, QColor(0x50, 0x55, 0x5c));
  p.setColor(QPalette::Highlight, QColor(0x2f, 0x6f, 0xde));
  p.setColor(QPalette::HighlightedText, Qt::white);
  p.setColor(QPalette::Link, QColor(0x2f, 0x6f, 0xde));
  for (auto role : {QPalette::WindowText, QPalette::Text, QPalette::ButtonText})
    p.setColor(QPalette::Disabled, role, QColor(0x9a, 0xa0, 0xa8));
  return p;
}

QPalette darkPalette() {
  QPalette p;
  const QColor window(0x26, 0x28, 0x2c), text(0xe6, 0xe8, 0xeb), base(0x1c, 0x1e, 0x21);
  p.setColor(QPalette::Window, window);
  p.setColor(QPalette::WindowText, text);
  p.setColor(QPalette::Base, base);
  p.setColor(QPalette::AlternateBase, QColor(0x2a, 0x2d, 0x31));
  p.setColor(QPalette::ToolTipBase, window);
  p.setColor(QPalette::ToolTipText, text);
  p.setColor(QPalette::PlaceholderText, QColor(0x9c, 0xa2, 0xaa));  // >= 4.5:1 on Window and Base (WCAG AA)
  p.setColor(QPalette::Text, text);
  p.setColor(QPalette::Button, QColor(0x33, 0x36, 0x3b));
  p.setColor(QPalette::ButtonText, text);
  p.setColor(QPalette::BrightText, QColor(0xff, 0x6b, 0x6b));
  p.setColor(QPalette::Light, QColor(0x45, 0x49, 0x4f));
  p.setColor(QPalette::Midlight, QColor(0x3a, 0x3d, 0x42));
  p.setColor(QPalette::Mid, QColor(0x4a, 0x4e, 0x55));
  p.setColor(QPalette::Dark, QColor(0x16, 0x17, 0x19));
  p.setColor(QPalette::Shadow, Qt::black);
  p.setColor(QPalette::Highlight, QColor(0x2f, 0x6f, 0xde));  // white on it: 4.9:1 (WCAG AA)
  p.setColor(QPalette::HighlightedText, Qt::white);
  p.setColor(QPalette::Link, QColor(0x7a, 0xaa, 0xff));
  for (auto role : {QPalette::WindowText, QPalette::Text, QPalette::ButtonText})
    p.setColor(QPalette::Disabled, role, QColor(0x70, 0x75, 0x7c));
  return p;
}

std::optional<QPalette>& systemPalette() {
  static std::optional<QPalette> palette;
  return palette;
}

}  // namespace

Preferences Preferences::load() {
  const QSettings s = appSettings();
  Preferences p;
  p.workspaceDir = s.value(QLatin1String(kWorkspaceKey)).toString();
  p.theme = static_cast<Theme>(qBound(0, s.value(QLatin1String(kThemeKey), 0).toInt(), 2));
  p.tokens = static_cast<TokenUnit>(qBound(0, s.value(QLatin1String(kTokensKey), 1).toInt(), 1));
  p.time = static_cast<TimeUnit>(qBound(0, s.value(QLatin1String(kTimeKey), 1).toInt(), 1));
  p.notifyDesktop = s.value(QLatin1String(kNotifyKey), true).toBool();
  return p;
}

QString Preferences::save() const {
  QSettings s = appSettings();
  if (workspaceDir.isEmpty())
    s.remove(QLatin1String(kWorkspaceKey));
  else
    s.setValue(QLatin1String(kWorkspaceKey), workspaceDir);
  s.setValue(QLatin1String(kThemeKey), static_cast<int>(theme));
  s.setValue(QLatin1String(kTokensKey), static_cast<int>(tokens));
  s.setValue(QLatin1String(kTimeKey), static_cast<int>(time));
  s.setValue(QLatin1String(kNotifyKey), notifyDesktop);
  s.sync();
  if (s.status() == QSettings::NoError) return {};
  return QObject::tr("Could not save the preferences to %1: the disk is full or the folder is not writable. "
                     "The previous preferences are kept; free some space and change a setting again.")
      .arg(s.fileName());
}

QString Preferences::formatTokens(double t) const {
  if (tokens == TokenUnit::Thousands) return QString::number(t / 1e3, 'f', t < 1e4 ? 1 : 0);
  return QString::number(t / 1e6, 'f', t < 1e7 ? 2 : 1);
}
QString Preferences::tokenUnitLabel() const {
  return tokens == TokenUnit::Thousands ? QStringLiteral("k") : QStringLiteral("M");
}

QString Preferences::formatDuration(double seconds) const {
  if (time == TimeUnit::Seconds)
    return QString::number(seconds, 'f', seconds < 100 ? 1 : 0) + QStringLiteral(" s");
  return QString::number(seconds / 3600.0, 'f', seconds < 36 ? 4 : 2) + QStringLiteral(" h");
}
QString Preferences::timeUnitLabel() const {
  return time == TimeUnit::Seconds ? QStringLiteral("s") : QStringLiteral("h");
}

QString Preferences::formatMoney(double usd) const {
  return currency + QString::fromStdString(runs::usd_number(usd));  // the CLI's digits (runs/figures.h)
}

QString Preferences::formatCost(std::optional<double> usd) const {
  return usd ? formatMoney(*usd) : QObject::tr("unpriced");
}

QString themeName(Preferences::Theme theme) {
  switch (theme) {
    case Preferences::Theme::Light:
      return QObject::tr("Light");
    case Preferences::Theme::Dark:
      return QObject::tr("Dark");
    case Preferences::Theme::System:
      break;
  }
  return QObject::tr("Follow the system");
}

void applyTheme(Preferences::Theme theme) {
  if (!systemPalette()) systemPalette() = QApplication::palette();
  installAccessibleStyle();  // edges and focus rings at 3:1 in every palette
  switch (theme) {
    case Preferences::Theme::Light:
      QApplication::setPalette(lightPalette());
      break;
    case Preferences::Theme::Dark:
      QApplication::setPalette(darkPalette());
      break;
    case Preferences::Theme::System:
      QApplication::setPalette(*systemPalette());
      break;
  }
}

}  // namespace flotilla::ui
