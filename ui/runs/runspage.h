// The Runs page: every run in the workspace, with status, target and cost. Until the run store
// and the wizard land it shows the honest empty state and the (disabled) way to create a run.
#pragma once

#include <QWidget>

class QPushButton;

namespace flotilla::ui {

class RunsPage : public QWidget {
  Q_OBJECT

 public:
  explicit RunsPage(QWidget* parent = nullptr);

  QPushButton* newRunButton() const { return m_newRun; }

 private:
  QPushButton* m_newRun;
};

}  // namespace flotilla::ui
