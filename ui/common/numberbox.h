// A spin box for real numbers as people type them in ML configs: "3e-4", "0.0000003", "1000".
//
// Decision: the value is kept as typed, not rounded to a fixed number of decimals (QDoubleSpinBox
// rounds 0.0000003 to 0 at six decimals and its validator drops the exponent of 3e-4), and it is
// shown in the shortest form that reads back to the same double ("0.0003", "3e-07"). The range is
// wide on purpose: out-of-range values are the engine's validate() to explain, not a silent clamp.
// A "sane" range only warns (saneWarning()): a learning rate of 1000 is legal, and almost surely
// a typo.
#pragma once

#include <QDoubleSpinBox>
#include <QString>

namespace flotilla::ui {

class NumberBox : public QDoubleSpinBox {
  Q_OBJECT

 public:
  explicit NumberBox(QWidget* parent = nullptr);

  // Values outside [low, high] are warned about (not refused); `what` names the field in the
  // warning ("a peak learning rate").
  void setSaneRange(double low, double high, const QString& what);
  // "" inside the sane range, else what is unusual and the usual range.
  QString saneWarning() const;

  // The shortest text that reads back to exactly `value` ("0.0003", "3e-07", "1000").
  static QString shortest(double value);
  // Parses "3e-4", "3E-4", "0,0003" (the locale's decimal point) or "0.0003"; nullopt-like: ok false.
  static double parse(const QString& text, bool* ok);

 protected:
  QValidator::State validate(QString& input, int& pos) const override;
  double valueFromText(const QString& text) const override;
  QString textFromValue(double value) const override;

 private:
  double m_saneLow = 0, m_saneHigh = 0;
  QString m_what;
};

}  // namespace flotilla::ui
