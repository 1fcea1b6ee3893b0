// New Run wizard (see runwizard.h).
#include "ui/wizard/runwizard.h"

#include "ui/nodes/machineprobe.h"
#include "ui/wizard/batchpage.h"
#include "ui/wizard/budgetpage.h"
#include "ui/wizard/checkpointpage.h"
#include "ui/wizard/configdraft.h"
#include "ui/wizard/datapage.h"
#include "ui/wizard/hardwarepage.h"
#include "ui/wizard/modelpage.h"
#include "ui/wizard/reviewpage.h"
#include "ui/wizard/templates.h"

namespace flotilla::ui {

RunWizard::RunWizard(MachineProbe* probe, const QString& templatesDir, QWidget* parent)
    : QWizard(parent),
      m_templates(new TemplateStore(templatesDir)),
      m_draft(new ConfigDraft(TemplateStore::demoConfig(), this)),
      m_probe(probe) {
  setObjectName(QStringLiteral("runWizard"));
  setWindowTitle(tr("New run"));
  setWizardStyle(QWizard::ModernStyle);
  setOption(QWizard::NoBackButtonOnStartPage);
  setOption(QWizard::HaveHelpButton, false);
  m_model = new ModelPage(m_draft, m_templates, this);
  m_data = new DataPage(m_draft, this);
  m_hardware = new HardwarePage(m_draft, this);
  m_batch = new BatchPage(m_draft, this);
  m_checkpoints = new CheckpointPage(m_draft, this);
  m_budget = new BudgetPage(m_draft, this);
  m_review = new ReviewPage(m_draft, m_templates, this);
  setPage(Model, m_model);
  setPage(Data, m_data);
  setPage(Hardware, m_hardware);
  setPage(Batch, m_batch);
  setPage(Checkpoints, m_checkpoints);
  setPage(Budget, m_budget);
  setPage(Review, m_review);
  setButtonText(QWizard::FinishButton, tr("Launch"));
  connect(m_review, &ReviewPage::templateSaved, m_model, &ModelPage::reloadTemplates);
  resize(860, 680);

  if (!m_probe) m_probe = new MachineProbe(this);
  connect(m_probe, &MachineProbe::finished, this, &RunWizard::useProbe);
  if (m_probe->hasResult()) useProbe();
  else m_probe->start();
}

RunWizard::~RunWizard() { delete m_templates; }

const flotilla::RunConfig& RunWizard::config() const { return m_draft->config(); }
int RunWizard::ranks() const { return m_draft->ranks(); }
void RunWizard::setConfig(const flotilla::RunConfig& config) { m_draft->replace(config); }

void RunWizard::setMachine(const flotilla::ProbeResult& probe) {
  m_machineSet = true;
  m_draft->setMachine(probe);
}

void RunWizard::useProbe() {
  if (m_machineSet || !m_probe->hasResult()) return;
  m_draft->setMachine(m_probe->result());
}

}  // namespace flotilla::ui
