// The navigation column on the left of the main window: the app's name and one row per page.
//
// Decision: a plain QListWidget (keyboard navigation, accessibility and selection painting come
// from the style) with palette-tinted icons that are re-tinted on a palette change, rather than a
// hand-painted widget that would need its own dark-mode and focus handling.
#pragma once

#include <QStringList>
#include <QWidget>

class QListWidget;

namespace flotilla::ui {

class Sidebar : public QWidget {
  Q_OBJECT

 public:
  explicit Sidebar(QWidget* parent = nullptr);

  void addPage(const QString& iconName, const QString& title);
  int count() const;
  int currentIndex() const;
  void setCurrentIndex(int index);
  QStringList titles() const;
  QListWidget* list() const { return m_list; }

 signals:
  void currentIndexChanged(int index);

 protected:
  void changeEvent(QEvent* event) override;

 private:
  void retintIcons();
  void applyListStyle();
  bool m_restyling = false;

  QListWidget* m_list;
  QStringList m_iconNames;
};

}  // namespace flotilla::ui
