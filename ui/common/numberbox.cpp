// NumberBox (see numberbox.h).
#include "ui/common/numberbox.h"

#include <QLocale>
#include <QRegularExpression>

#include <algorithm>
#include <cmath>
#include <limits>

namespace flotilla::ui {

NumberBox::NumberBox(QWidget* parent) : QDoubleSpinBox(parent) {
  // QDoubleSpinBox rounds every value to decimals(): enough that no double is rounded.
  setDecimals(320);
  setRange(-std::numeric_limits<double>::max(), std::numeric_limits<double>::max());
  setKeyboardTracking(false);  // "3e-" on the way to "3e-4" is not a value
}

void NumberBox::setSaneRange(double low, double high, const QString& what) {
  m_saneLow = low;
  m_saneHigh = high;
  m_what = what;
}

QString NumberBox::saneWarning() const {
  if (m_saneHigh <= m_saneLow) return {};
  const double v = value();
  if (v >= m_saneLow && v <= m_saneHigh) return {};
  return tr("%1 of %2 is %3 the usual %4 to %5: check the exponent")
      .arg(m_what, shortest(v), v > m_saneHigh ? tr("above") : tr("below"), shortest(m_saneLow),
           shortest(m_saneHigh));
}

QString NumberBox::shortest(double value) {
  // Whole numbers up to 15 digits are written out ("1000", not "1e+03").
  const int whole = std::fabs(value) >= 1 && std::fabs(value) < 1e15
                        ? static_cast<int>(std::floor(std::log10(std::fabs(value)))) + 1
                        : 1;
  for (int digits = 1; digits <= 17; ++digits) {
    const QString text = QString::number(value, 'g', std::max(digits, whole));
    if (text.toDouble() == value) return text;
  }
  return QString::number(value, 'g', 17);
}

double NumberBox::parse(const QString& text, bool* ok) {
  const QString t = text.trimmed();
  bool good = false;
  double v = QLocale::c().toDouble(t, &good);
  if (!good) v = QLocale().toDouble(t, &good);
  if (ok) *ok = good && std::isfinite(v);
  return good ? v : 0.0;
}

QValidator::State NumberBox::validate(QString& input, int&) const {
  QString t = input;
  if (!prefix().isEmpty() && t.startsWith(prefix())) t = t.mid(prefix().size());
  if (!suffix().isEmpty() && t.endsWith(suffix())) t.chop(suffix().size());
  t = t.trimmed();
  if (!specialValueText().isEmpty() && t == specialValueText()) return QValidator::Acceptable;
  bool ok = false;
  const double v = parse(t, &ok);
  if (ok) return v >= minimum() && v <= maximum() ? QValidator::Acceptable : QValidator::Intermediate;
  // On the way to a number: "", "-", "3.", "3e", "3e-".
  static const QRegularExpression partial(QStringLiteral("^[-+]?([0-9]*[.,]?[0-9]*)([eE][-+]?)?$"));
  return partial.match(t).hasMatch() ? QValidator::Intermediate : QValidator::Invalid;
}

double NumberBox::valueFromText(const QString& text) const {
  QString t = text;
  if (!prefix().isEmpty() && t.startsWith(prefix())) t = t.mid(prefix().size());
  if (!suffix().isEmpty() && t.endsWith(suffix())) t.chop(suffix().size());
  if (!specialValueText().isEmpty() && t.trimmed() == specialValueText()) return minimum();
  bool ok = false;
  const double v = parse(t, &ok);
  return ok ? v : value();
}

QString NumberBox::textFromValue(double value) const { return shortest(value); }

}  // namespace flotilla::ui
