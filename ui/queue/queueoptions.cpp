// Queue limits widget (see queueoptions.h).
#include "ui/queue/queueoptions.h"

#include <QCheckBox>
#include <QDateTime>
#include <QDateTimeEdit>
#include <QDoubleSpinBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QSpinBox>

namespace flotilla::ui {

QueueOptions::QueueOptions(QWidget* parent)
    : QWidget(parent),
      m_priority(new QSpinBox(this)),
      m_hasDeadline(new QCheckBox(tr("Finish by"), this)),
      m_deadline(new QDateTimeEdit(this)),
      m_maxUsd(new QDoubleSpinBox(this)) {
  setObjectName(QStringLiteral("queueOptions"));
  m_priority->setObjectName(QStringLiteral("queuePriority"));
  m_priority->setRange(-1000, 1000);
  m_priority->setToolTip(tr("Higher starts first; equal priorities keep their order in the queue"));
  m_hasDeadline->setObjectName(QStringLiteral("queueHasDeadline"));
  m_deadline->setObjectName(QStringLiteral("queueDeadline"));
  m_deadline->setCalendarPopup(true);
  m_deadline->setDisplayFormat(QStringLiteral("yyyy-MM-dd HH:mm"));
  m_deadline->setDateTime(QDateTime::currentDateTime().addSecs(24 * 3600));
  m_deadline->setEnabled(false);
  m_maxUsd->setObjectName(QStringLiteral("queueMaxUsd"));
  m_maxUsd->setRange(0, 1e6);
  m_maxUsd->setDecimals(2);
  m_maxUsd->setPrefix(QStringLiteral("$"));
  m_maxUsd->setSpecialValueText(tr("no limit"));
  m_maxUsd->setToolTip(tr("The most the run may cost: places predicted to cost more are not chosen"));
  connect(m_hasDeadline, &QCheckBox::toggled, m_deadline, &QWidget::setEnabled);

  auto* priorityLabel = new QLabel(tr("&Priority"), this);
  priorityLabel->setBuddy(m_priority);
  auto* maxLabel = new QLabel(tr("&Max cost"), this);
  maxLabel->setBuddy(m_maxUsd);
  auto* row = new QHBoxLayout(this);
  row->setContentsMargins(0, 0, 0, 0);
  row->addWidget(priorityLabel);
  row->addWidget(m_priority);
  row->addSpacing(12);
  row->addWidget(m_hasDeadline);
  row->addWidget(m_deadline);
  row->addSpacing(12);
  row->addWidget(maxLabel);
  row->addWidget(m_maxUsd);
  row->addStretch(1);
}

qint64 QueueOptions::priority() const { return m_priority->value(); }
std::optional<double> QueueOptions::deadline() const {
  if (!m_hasDeadline->isChecked()) return std::nullopt;
  return static_cast<double>(m_deadline->dateTime().toSecsSinceEpoch());
}
std::optional<double> QueueOptions::maxUsd() const {
  if (m_maxUsd->value() <= 0) return std::nullopt;
  return m_maxUsd->value();
}
void QueueOptions::setPriority(qint64 priority) { m_priority->setValue(static_cast<int>(priority)); }
void QueueOptions::setDeadline(std::optional<double> unixSeconds) {
  m_hasDeadline->setChecked(unixSeconds.has_value());
  if (unixSeconds) m_deadline->setDateTime(QDateTime::fromSecsSinceEpoch(static_cast<qint64>(*unixSeconds)));
}
void QueueOptions::setMaxUsd(std::optional<double> usd) { m_maxUsd->setValue(usd.value_or(0)); }

}  // namespace flotilla::ui
