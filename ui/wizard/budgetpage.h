// Wizard page 6, Budget: where the price comes from, the spend and time limits, and the run's
// estimated time and cost from the planner's predicted step time.
#pragma once

#include "ui/wizard/pagebase.h"

class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QLineEdit;

namespace flotilla::ui {

class BudgetPage : public WizardPageBase {
  Q_OBJECT

 public:
  enum PriceSource { NoPrice = 0, HourlyPrice = 1, Catalogue = 2 };
  explicit BudgetPage(ConfigDraft* draft, QWidget* parent = nullptr);
  QString estimateText() const;

 protected:
  void load() override;
  void refreshDerived() override;

 private:
  void editValues();

  QComboBox* m_source;
  QDoubleSpinBox* m_price;
  QLineEdit* m_catalogue;
  QDoubleSpinBox* m_maxUsd;
  QDoubleSpinBox* m_warn;
  QDoubleSpinBox* m_maxHours;
  QLabel* m_estimate;
};

}  // namespace flotilla::ui
