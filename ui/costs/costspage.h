// The Costs page: spend per run, node and day from the pricing catalogue (on-demand and spot),
// with budgets. Empty until runs accrue cost.
#pragma once

#include <QWidget>

namespace flotilla::ui {

class CostsPage : public QWidget {
  Q_OBJECT

 public:
  explicit CostsPage(QWidget* parent = nullptr);
};

}  // namespace flotilla::ui
