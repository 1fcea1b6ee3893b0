// What an entry may cost and by when it must finish, and its priority: the optional limits the
// wizard's "Add to queue" and the Queue page's "Add config…" both ask for.
//
// Decision: one small widget for both, so the two ways to queue ask the same questions with the
// same defaults (no deadline, no money limit, priority 0), each limit off until ticked or set.
#pragma once

#include <QWidget>

#include <optional>

class QCheckBox;
class QDateTimeEdit;
class QDoubleSpinBox;
class QSpinBox;

namespace flotilla::ui {

class QueueOptions : public QWidget {
  Q_OBJECT

 public:
  explicit QueueOptions(QWidget* parent = nullptr);

  qint64 priority() const;
  std::optional<double> deadline() const;  // unix seconds; nullopt: none
  std::optional<double> maxUsd() const;    // nullopt: no limit
  void setPriority(qint64 priority);
  void setDeadline(std::optional<double> unixSeconds);
  void setMaxUsd(std::optional<double> usd);

 private:
  QSpinBox* m_priority;
  QCheckBox* m_hasDeadline;
  QDateTimeEdit* m_deadline;
  QDoubleSpinBox* m_maxUsd;
};

}  // namespace flotilla::ui
