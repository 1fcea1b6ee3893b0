// Numbers as the wizard writes them: counts with a unit suffix, durations and money; and its
// read-only summaries (a folder's facts, an adapter's) as a two-column table with faint headings.
#pragma once

#include <QColor>
#include <QList>
#include <QPair>
#include <QPalette>
#include <QString>

namespace flotilla::ui {

QString formatCount(double n);           // 3.42 M, 124 M, 1.56 B, 980 k
QString formatDuration(double seconds);  // "42 s", "12 min 5 s", "3 h 20 min", "2 d 4 h"
QString formatUsd(double usd);           // "$0.00", "$12.40", "$1,234"
// A planned cost, where cents are too coarse: "$0.0297", "< $0.0001", else as formatUsd.
QString formatEstimateUsd(double usd);

// Half way between the text and the background: headings that recede.
QColor faintText(const QPalette& palette);
// (heading, text) rows as rich text for a word-wrapped label (a table's width is its own, so the
// label is laid out as tall as its rows, where plain wrapped text is given a few lines too many).
QString summaryTable(const QList<QPair<QString, QString>>& rows, const QColor& faint);

}  // namespace flotilla::ui
