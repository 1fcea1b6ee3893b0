// The Compare page: overlay runs by step, tokens, wall time, GPU-hours or dollars, beside a table
// of config differences, losses, speed and cost. Empty until there are runs to compare.
#pragma once

#include <QWidget>

namespace flotilla::ui {

class ComparePage : public QWidget {
  Q_OBJECT

 public:
  explicit ComparePage(QWidget* parent = nullptr);
};

}  // namespace flotilla::ui
