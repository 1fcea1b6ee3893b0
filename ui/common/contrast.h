// WCAG contrast arithmetic for colours the app draws itself (check box edges, focus rings, plot
// swatches): relative luminance, the contrast ratio, and the faintest blend that still reaches a
// ratio.
//
// Decision: colours are derived from the palette at drawing time, not fixed per theme, so any
// palette (light, dark, the system's) gets edges and rings that reach 3:1 (WCAG 1.4.11): the
// search blends from the colour the design wants towards one that surely contrasts, and stops at
// the first step that reaches the ratio, so the result stays as close to the design as it can.
#pragma once

#include <QColor>

#include <initializer_list>

namespace flotilla::ui {

double relativeLuminance(const QColor& c);
double contrastRatio(const QColor& a, const QColor& b);
// `a` over `b` at opacity t (what a painter draws with alpha t), opaque.
QColor blend(const QColor& a, const QColor& b, double t);
// The first blend from `from` towards `to` (in 2% steps) whose contrast against every colour of
// `against` reaches `ratio`; `to` when none does.
QColor towardsContrast(const QColor& from, const QColor& to, std::initializer_list<QColor> against,
                       double ratio);

}  // namespace flotilla::ui
