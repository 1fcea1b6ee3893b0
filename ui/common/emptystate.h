// The "nothing here yet" panel a view shows before it has data: an icon, a headline, a sentence
// on how data arrives, and optionally the action that creates it. Used instead of fake rows.
#pragma once

#include <QWidget>

class QLabel;
class QPushButton;

namespace flotilla::ui {

class EmptyState : public QWidget {
  Q_OBJECT

 public:
  EmptyState(const QString& iconName, const QString& headline, const QString& text,
             QWidget* parent = nullptr);

  // Adds the call-to-action button under the text and returns it (owned by this widget).
  QPushButton* addAction(const QString& label);

 protected:
  void changeEvent(QEvent* event) override;

 private:
  void updateIcon();

  QString m_iconName;
  QLabel* m_icon;
  QWidget* m_actions;
};

}  // namespace flotilla::ui
