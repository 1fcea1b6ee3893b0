// Decision view (see decisionview.h).
#include "ui/queue/decisionview.h"

#include <QDateTime>
#include <QHeaderView>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLabel>
#include <QTableWidget>
#include <QVBoxLayout>

#include <cmath>

#include "runs/figures.h"

namespace flotilla::ui {

DecisionView::DecisionView(QWidget* parent)
    : QWidget(parent), m_words(new QLabel(this)), m_places(new QTableWidget(this)) {
  setObjectName(QStringLiteral("decisionView"));
  m_words->setObjectName(QStringLiteral("decisionWords"));
  m_words->setWordWrap(true);
  m_words->setTextInteractionFlags(Qt::TextSelectableByMouse | Qt::TextSelectableByKeyboard);
  m_places->setObjectName(QStringLiteral("decisionPlaces"));
  m_places->setColumnCount(11);
  m_places->setHorizontalHeaderLabels({tr("Place"), tr("Fits"), tr("Layout"), tr("Predicted tok/s"),
                                       tr("Basis"), tr("Wait"), tr("Predicted time"), tr("Predicted cost"),
                                       tr("$/h"), tr("Deadline · budget"), tr("Why not")});
  m_places->verticalHeader()->hide();
  m_places->setEditTriggers(QAbstractItemView::NoEditTriggers);
  m_places->setSelectionBehavior(QAbstractItemView::SelectRows);
  m_places->setAlternatingRowColors(true);
  m_places->setWordWrap(false);
  m_places->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  m_places->horizontalHeader()->setStretchLastSection(true);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addWidget(m_words);
  layout->addWidget(m_places, 1);
  setEntry(nullptr);
}

QString DecisionView::durationText(double seconds) {
  if (seconds < 60) return tr("%1 s").arg(static_cast<int>(std::lround(std::max(0.0, seconds))));
  const long minutes = std::lround(seconds / 60);
  if (minutes < 60) return tr("%1 min").arg(minutes);
  const long hours = minutes / 60;
  if (hours >= 48)
    return hours % 24 == 0 ? tr("%1 d").arg(hours / 24) : tr("%1 d %2 h").arg(hours / 24).arg(hours % 24);
  if (minutes % 60 == 0) return tr("%1 h").arg(hours);
  return tr("%1 h %2 min").arg(hours).arg(minutes % 60);
}

void DecisionView::setEntry(const db::QueueEntry* entry) {
  m_places->setRowCount(0);
  if (!entry) {
    m_words->setText(tr("Select an entry to see where the scheduler would run it, and why."));
    return;
  }
  const QJsonObject d = QJsonDocument::fromJson(QByteArray::fromStdString(entry->decision_json)).object();
  const QString words = d.value(QStringLiteral("words")).toString();
  QString head;
  if (d.contains(QStringLiteral("time")))
    head = tr("Decided %1: ")
               .arg(QDateTime::fromSecsSinceEpoch(
                        static_cast<qint64>(d.value(QStringLiteral("time")).toDouble()))
                        .toString(QStringLiteral("yyyy-MM-dd HH:mm:ss")));
  if (words.isEmpty())
    m_words->setText(entry->why.empty() ? tr("No decision yet: the scheduler has not weighed this entry.")
                                        : QString::fromStdString(entry->why));
  else
    m_words->setText(head + words);
  const QString chosen = d.value(QStringLiteral("chosen")).toString();
  const QJsonArray places = d.value(QStringLiteral("places")).toArray();
  m_places->setRowCount(places.size());
  // null: not known (a wait behind runs whose end is not known, a time that never ends).
  auto duration = [](const QJsonValue& v) {
    return v.isDouble() ? durationText(v.toDouble()) : tr("unknown");
  };
  auto money = [](const QJsonValue& v) {
    return v.isDouble() ? QString::fromStdString(runs::usd_text(v.toDouble())) : tr("unpriced");
  };
  for (int r = 0; r < places.size(); ++r) {
    const QJsonObject p = places[r].toObject();
    const QString key = p.value(QStringLiteral("key")).toString();
    const QString label = p.value(QStringLiteral("label")).toString();
    const bool fits = p.value(QStringLiteral("fits")).toBool();
    QStringList limits;
    limits << (p.value(QStringLiteral("meets_deadline")).toBool(true) ? tr("in time")
                                                                      : tr("past the deadline"));
    limits << (p.value(QStringLiteral("within_budget")).toBool(true) ? tr("within budget")
                                                                     : tr("over budget"));
    const double speed = p.value(QStringLiteral("tokens_per_s")).toDouble();
    const QStringList cells = {
        (key == chosen ? QStringLiteral("▶ ") : QString()) + (label.isEmpty() ? key : label),
        fits ? tr("yes") : tr("no"),
        p.value(QStringLiteral("layout")).toString(),
        speed > 0 ? QString::number(speed, 'f', 0) : QStringLiteral("-"),
        p.value(QStringLiteral("basis")).toString(),
        fits ? duration(p.value(QStringLiteral("wait_s"))) : QStringLiteral("-"),
        fits ? duration(p.value(QStringLiteral("seconds"))) : QStringLiteral("-"),
        money(p.value(QStringLiteral("usd"))),
        p.value(QStringLiteral("usd_per_hour")).isDouble()
            ? QString::fromStdString(runs::usd_text(p.value(QStringLiteral("usd_per_hour")).toDouble()))
            : tr("unpriced"),
        limits.join(QStringLiteral(" · ")),
        p.value(QStringLiteral("why_not")).toString(),
    };
    for (int c = 0; c < cells.size(); ++c) {
      auto* item = new QTableWidgetItem(cells[c]);
      item->setToolTip(c == 0 ? cells[c] + QStringLiteral(" · ") + key : cells[c]);
      if (key == chosen) {
        QFont f = item->font();
        f.setBold(true);
        item->setFont(f);
      }
      m_places->setItem(r, c, item);
    }
  }
}

QString DecisionView::wordsText() const { return m_words->text(); }

QString DecisionView::placesText() const {
  QStringList rows;
  for (int r = 0; r < m_places->rowCount(); ++r) {
    QStringList cells;
    for (int c = 0; c < m_places->columnCount(); ++c)
      cells << (m_places->item(r, c) ? m_places->item(r, c)->text() : QString());
    rows << cells.join(QStringLiteral(" | "));
  }
  return rows.join(QLatin1Char('\n'));
}

}  // namespace flotilla::ui
