// Live page (see livepage.h).
#include "ui/live/livepage.h"

#include <QVBoxLayout>

#include "ui/common/pageheader.h"
#include "ui/plot/plotsupport.h"

namespace flotilla::ui {

LivePage::LivePage(QWidget* parent) : QWidget(parent) {
  auto* header = new PageHeader(
      tr("Live"),
      tr("Watch a running run as it trains: training and evaluation loss, tokens per second, model FLOPs "
         "utilisation, where each step's time goes, GPU utilisation and memory, and what the run has cost "
         "so far. Pick a run on the Runs page to follow it here."),
      this);
  m_lossPlot = createPlaceholderPlot(tr("step"), tr("loss"), tr("No run selected"), this);
  m_lossPlot->setMinimumHeight(260);

  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(28, 24, 28, 24);
  layout->setSpacing(16);
  layout->addWidget(header);
  layout->addWidget(m_lossPlot, 1);
}

}  // namespace flotilla::ui
