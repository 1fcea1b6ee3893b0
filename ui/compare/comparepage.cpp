// Compare page (see comparepage.h).
#include "ui/compare/comparepage.h"

#include <QVBoxLayout>

#include "ui/common/emptystate.h"
#include "ui/common/pageheader.h"

namespace flotilla::ui {

ComparePage::ComparePage(QWidget* parent) : QWidget(parent) {
  auto* header = new PageHeader(
      tr("Compare"),
      tr("Put experiments side by side: loss curves overlaid by step, tokens, wall time, GPU-hours or "
         "dollars, and a table that lines up what differs in their configurations with final and best "
         "loss, tokens per second, utilisation, total cost and cost per million tokens."),
      this);
  auto* empty = new EmptyState(QStringLiteral("compare"), tr("Nothing to compare yet"),
                               tr("Select two or more runs on the Runs page and choose Compare."), this);

  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(28, 24, 28, 24);
  layout->addWidget(header);
  layout->addWidget(empty, 1);
}

}  // namespace flotilla::ui
