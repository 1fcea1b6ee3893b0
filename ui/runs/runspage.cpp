// Runs page (see runspage.h).
#include "ui/runs/runspage.h"

#include <QPushButton>
#include <QVBoxLayout>

#include "ui/common/emptystate.h"
#include "ui/common/pageheader.h"

namespace flotilla::ui {

RunsPage::RunsPage(QWidget* parent) : QWidget(parent) {
  auto* header = new PageHeader(
      tr("Runs"),
      tr("Every training run in this workspace: its configuration, where it runs (this machine or SSH "
         "nodes), its status, progress and spend. Select runs to watch one live or to compare several."),
      this);
  auto* empty = new EmptyState(QStringLiteral("runs"), tr("No runs yet"),
                               tr("Create a run to pick a model, data, parallelism and budget. The wizard "
                                  "checks memory, speed and cost before anything starts."),
                               this);
  m_newRun = empty->addAction(tr("New run…"));
  m_newRun->setObjectName(QStringLiteral("newRunButton"));
  m_newRun->setEnabled(false);
  m_newRun->setToolTip(tr("Arrives with the run wizard"));

  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(28, 24, 28, 24);
  layout->addWidget(header);
  layout->addWidget(empty, 1);
}

}  // namespace flotilla::ui
