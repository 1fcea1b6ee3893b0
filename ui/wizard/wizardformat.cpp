// Wizard number formats (see wizardformat.h).
#include "ui/wizard/wizardformat.h"

#include <QLocale>

#include <cmath>

namespace flotilla::ui {

QString formatCount(double n) {
  const struct {
    double scale;
    const char* suffix;
  } units[] = {{1e12, "T"}, {1e9, "B"}, {1e6, "M"}, {1e3, "k"}};
  for (const auto& u : units) {
    if (std::abs(n) >= u.scale) {
      const double v = n / u.scale;
      const int decimals = v >= 100 ? 0 : v >= 10 ? 1 : 2;
      return QStringLiteral("%1 %2").arg(v, 0, 'f', decimals).arg(QLatin1String(u.suffix));
    }
  }
  return QString::number(n, 'f', 0);
}

QString formatDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return QStringLiteral("—");
  const auto s = static_cast<qint64>(std::llround(seconds));
  if (s < 60)
    return QStringLiteral("%1 s").arg(seconds < 10 ? QString::number(seconds, 'f', 1) : QString::number(s));
  if (s < 3600) return QStringLiteral("%1 min %2 s").arg(s / 60).arg(s % 60);
  if (s < 86400) return QStringLiteral("%1 h %2 min").arg(s / 3600).arg((s % 3600) / 60);
  return QStringLiteral("%1 d %2 h").arg(s / 86400).arg((s % 86400) / 3600);
}

QString formatUsd(double usd) {
  if (!std::isfinite(usd)) return QStringLiteral("—");
  if (std::abs(usd) >= 1000) return QLatin1Char('$') + QLocale(QLocale::English).toString(std::llround(usd));
  return QLatin1Char('$') + QString::number(usd, 'f', 2);
}

QString formatEstimateUsd(double usd) {
  if (usd > 0 && usd < 0.0001) return QStringLiteral("< $0.0001");
  if (usd > 0 && usd < 1) return QLatin1Char('$') + QString::number(usd, 'f', 4);
  return formatUsd(usd);
}

QColor faintText(const QPalette& palette) {
  const QColor a = palette.color(QPalette::WindowText), b = palette.color(QPalette::Window);
  return QColor((a.red() + b.red()) / 2, (a.green() + b.green()) / 2, (a.blue() + b.blue()) / 2);
}

QString summaryTable(const QList<QPair<QString, QString>>& rows, const QColor& faint) {
  QString html = QStringLiteral("<table cellspacing=\"0\" cellpadding=\"1\">");
  for (const auto& [heading, text] : rows)
    html += QStringLiteral("<tr><td style=\"color:%1; padding-right:10px\">%2</td><td>%3</td></tr>")
                .arg(faint.name(), heading.toHtmlEscaped(), text.toHtmlEscaped());
  return html + QStringLiteral("</table>");
}

}  // namespace flotilla::ui
