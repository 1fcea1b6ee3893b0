// The title and one-paragraph explanation at the top of every sidebar page, so each page says
// what it is for in the same place and the same type sizes.
#pragma once

#include <QWidget>

class QLabel;

namespace flotilla::ui {

class PageHeader : public QWidget {
  Q_OBJECT

 public:
  PageHeader(const QString& title, const QString& description, QWidget* parent = nullptr);

  QString title() const;

 private:
  QLabel* m_title;
  QLabel* m_description;
};

}  // namespace flotilla::ui
