// A horizontal bar: memory one device needs (the planner's peak stage) against what it has.
// Painted directly (no plot library): the fill turns red past 100%, the text sits on the bar.
#pragma once

#include <QWidget>

namespace flotilla::ui {

class MemoryBar : public QWidget {
  Q_OBJECT

 public:
  explicit MemoryBar(QWidget* parent = nullptr);
  // used = 0 and capacity = 0: shows "—" (no plan yet).
  void setUsage(quint64 used, quint64 capacity);
  quint64 used() const { return m_used; }
  quint64 capacity() const { return m_capacity; }
  bool overCapacity() const { return m_capacity > 0 && m_used > m_capacity; }
  QString text() const;
  QSize sizeHint() const override;
  QSize minimumSizeHint() const override;

 protected:
  void paintEvent(QPaintEvent* event) override;

 private:
  quint64 m_used = 0;
  quint64 m_capacity = 0;
};

}  // namespace flotilla::ui
