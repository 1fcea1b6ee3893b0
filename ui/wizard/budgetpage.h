// Wizard page 6, Budget: where the price comes from, the spend and time limits, and the run's
// estimated time and cost from the planner's predicted step time.
#pragma once

#include "ui/wizard/pagebase.h"

class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QLineEdit;
#include <QList>
#include <QString>

namespace flotilla::ui {

// One price a run can name as budget.price_source: a catalogue entry ("aws:p5.48xlarge") or a
// stored node ("local"), with what it costs.
struct PriceChoice {
  QString key;    // the price_source value
  QString label;  // "aws:p5.48xlarge — $98.32/h (8 × H100)"
  double usdPerHour = 0;
};

class BudgetPage : public WizardPageBase {
  Q_OBJECT

 public:
  enum PriceSource { NoPrice = 0, HourlyPrice = 1, Catalogue = 2 };
  explicit BudgetPage(ConfigDraft* draft, QWidget* parent = nullptr);
  QString estimateText() const;
  // The store's catalogue entries and priced nodes (RunWizard::loadNodes reads them).
  void setPriceChoices(const QList<PriceChoice>& choices);
  QComboBox* catalogueBox() const { return m_catalogue; }

 protected:
  void load() override;
  void refreshDerived() override;

 private:
  void editValues();
  void syncCatalogue();
  void showCataloguePrice();
  QStringList extraProblems() const override;
  QList<PriceChoice> m_choices;
  bool m_choicesLoaded = false;

  QComboBox* m_source;
  QDoubleSpinBox* m_price;
  QComboBox* m_catalogue;
  QDoubleSpinBox* m_maxUsd;
  QDoubleSpinBox* m_warn;
  QDoubleSpinBox* m_maxHours;
  QLabel* m_estimate;
};

}  // namespace flotilla::ui
