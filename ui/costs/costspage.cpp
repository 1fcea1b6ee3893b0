// Costs page (see costspage.h).
#include "ui/costs/costspage.h"

#include <QVBoxLayout>

#include "ui/common/emptystate.h"
#include "ui/common/pageheader.h"

namespace flotilla::ui {

CostsPage::CostsPage(QWidget* parent) : QWidget(parent) {
  auto* header = new PageHeader(
      tr("Costs"),
      tr("What training costs: spend per run, per node and per day, priced from an editable catalogue of "
         "on-demand and spot rates per instance or GPU type, with each run's budget and its projected "
         "total."),
      this);
  auto* empty = new EmptyState(QStringLiteral("costs"), tr("No spend recorded"),
                               tr("Costs accrue while runs are running, from the price of the machines "
                                  "they run on. Local runs on this machine cost nothing unless you give it "
                                  "a price."),
                               this);

  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(28, 24, 28, 24);
  layout->addWidget(header);
  layout->addWidget(empty, 1);
}

}  // namespace flotilla::ui
