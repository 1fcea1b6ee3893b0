// New Run wizard (see runwizard.h).
#include "ui/wizard/runwizard.h"

#include <QAbstractButton>
#include <QFileInfo>
#include <QLabel>
#include <QScopedValueRollback>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>

#include "db/clusters.h"
#include "db/costs.h"
#include "db/database.h"
#include "db/nodes.h"

#include "runs/plan_history.h"
#include "ui/nodes/machineprobe.h"
#include "ui/queue/queueoptions.h"
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
  // "Add to queue" beside Launch: the same config, started by the queue's scheduler where and when
  // it is cheapest within these limits (shown on the Review page, where the button is).
  m_queueOptions = new QueueOptions(m_review);
  auto* queueBlock = new QWidget(m_review);
  auto* queueLayout = new QVBoxLayout(queueBlock);
  queueLayout->setContentsMargins(0, 6, 0, 0);
  auto* queueLabel = new QLabel(tr("Add to queue instead: the scheduler starts it on the chosen place (or "
                                   "waits for it) with these limits."),
                                queueBlock);
  queueLabel->setWordWrap(true);
  queueLayout->addWidget(queueLabel);
  queueLayout->addWidget(m_queueOptions);
  m_review->addBelow(queueBlock);
  setOption(QWizard::HaveCustomButton1);
  setButtonText(QWizard::CustomButton1, tr("Add to &queue"));
  button(QWizard::CustomButton1)->setObjectName(QStringLiteral("addToQueueButton"));
  button(QWizard::CustomButton1)
      ->setToolTip(
          tr("Queue this run instead of starting it now: the Queue page shows where and when it starts"));
  // Beside Launch, on the Review page only (QWizard shows a custom button whenever it is in the
  // layout, so the layout changes with the page).
  auto buttonsFor = [this](int id) {
    QList<QWizard::WizardButton> layout{QWizard::Stretch, QWizard::BackButton, QWizard::NextButton};
    if (id == Review) layout << QWizard::CustomButton1;
    layout << QWizard::FinishButton << QWizard::CancelButton;
    setButtonLayout(layout);
  };
  buttonsFor(Model);
  connect(this, &QWizard::currentIdChanged, this, buttonsFor);
  connect(this, &QWizard::customButtonClicked, this, [this](int which) {
    if (which == QWizard::CustomButton1) addToQueue();
  });
  connect(m_review, &ReviewPage::templateSaved, m_model, &ModelPage::reloadTemplates);
  // A model by name: the Review page shows it and its commit, and Launch waits for its download.
  connect(m_model, &ModelPage::modelStateChanged, this,
          [this] { m_review->setModelState(m_model->modelNote(), m_model->launchBlocker()); });
  // advanceTo() waiting on a page: go on once its check passes, unless the user moved or edited.
  connect(m_draft, &ConfigDraft::changed, this, [this] {
    if (!m_machineUpdate) ++m_draftChanges;
  });
  connect(this, &QWizard::currentIdChanged, this, [this] {
    if (!m_advancing) m_advanceTarget = -1;
  });
  for (int id = Model; id < PageCount; ++id) {
    connect(page(id), &QWizardPage::completeChanged, this, [this, id] {
      if (m_advanceTarget < 0 || currentId() != id) return;
      if (m_draftChanges != m_changesAtStop) {
        m_advanceTarget = -1;
        return;
      }
      // Not from inside the page's own signal: the next page initialises on a clean stack.
      QMetaObject::invokeMethod(
          this,
          [this, id] {
            if (m_advanceTarget >= 0 && currentId() == id && currentPage()->isComplete()) continueAdvance();
          },
          Qt::QueuedConnection);
    });
  }
  resize(860, 680);

  connect(&m_pricesWatcher, &QFutureWatcher<QList<PriceChoice>>::finished, this,
          [this] { m_budget->setPriceChoices(m_pricesWatcher.result()); });
  connect(&m_historyWatcher, &QFutureWatcher<std::vector<flotilla::RunObservation>>::finished, this, [this] {
    {
      const QScopedValueRollback<bool> machine(m_machineUpdate, true);
      m_draft->setPlanHistory(m_historyWatcher.result());
    }
    emit planHistoryLoaded();
  });
  connect(&m_nodesWatcher, &QFutureWatcher<StoreTargets>::finished, this, [this] {
    const StoreTargets found = m_nodesWatcher.result();
    setNodes(found.nodes);
    setClusters(found.clusters);
    m_draft->setNodeLinks(found.links);
    emit nodesLoaded();
  });
  if (!m_probe) m_probe = new MachineProbe(this);
  connect(m_probe, &MachineProbe::finished, this, &RunWizard::useProbe);
  if (m_probe->hasResult())
    useProbe();
  else
    m_probe->start();
}

RunWizard::~RunWizard() {
  m_nodesWatcher.waitForFinished();
  m_pricesWatcher.waitForFinished();
  m_historyWatcher.waitForFinished();
  delete m_templates;
}

void RunWizard::loadNodes(const QString& databasePath) {
  // Never creates a store: without one there are no nodes to offer.
  loadPriceChoices(databasePath);
  loadPlanHistory(databasePath);
  if (databasePath.isEmpty() || m_nodesWatcher.isRunning() || !QFileInfo::exists(databasePath)) return;
  const std::string path = databasePath.toStdString();
  m_nodesWatcher.setFuture(QtConcurrent::run([path] {
    StoreTargets out;
    try {
      const flotilla::db::Database db(path);
      for (const flotilla::db::SshNode& n : flotilla::db::list_ssh_nodes(db))
        out.nodes.append(StoredNode{QString::fromStdString(n.name), QString::fromStdString(n.gpu_type),
                                    static_cast<int>(n.gpu_count), n.usd_per_hour.value_or(0.0), n.spot});
      for (const flotilla::db::SlurmCluster& c : flotilla::db::list_clusters(db))
        out.clusters.append(storedCluster(c, flotilla::db::partition_prices(db, c.id)));
      out.links = flotilla::runs::stored_links(db);
    } catch (const std::exception&) {
      // An unreadable store offers no nodes; the Runs page reports store problems itself.
    }
    return out;
  }));
}

void RunWizard::loadPlanHistory(const QString& databasePath) {
  if (databasePath.isEmpty() || m_historyWatcher.isRunning() || !QFileInfo::exists(databasePath)) return;
  const std::string path = databasePath.toStdString();
  m_historyWatcher.setFuture(QtConcurrent::run([path] {
    try {
      const flotilla::db::Database db(path);
      return flotilla::runs::plan_history(db);
    } catch (const std::exception&) {
      return std::vector<flotilla::RunObservation>();  // an unreadable store calibrates nothing
    }
  }));
}

void RunWizard::loadPriceChoices(const QString& databasePath) {
  if (databasePath.isEmpty() || m_pricesWatcher.isRunning() || !QFileInfo::exists(databasePath)) return;
  const std::string path = databasePath.toStdString();
  m_pricesWatcher.setFuture(QtConcurrent::run([path] {
    QList<PriceChoice> out;
    try {
      const flotilla::db::Database db(path);
      for (const flotilla::db::PriceEntry& p : flotilla::db::list_pricing(db)) {
        const QString key = QString::fromStdString(p.provider + ":" + p.item);
        out.append({key,
                    tr("%1 — $%2/h (%3 × %4)")
                        .arg(key)
                        .arg(p.on_demand_usd_per_hour, 0, 'f', 2)
                        .arg(p.gpus)
                        .arg(QString::fromStdString(p.gpu_type)),
                    p.on_demand_usd_per_hour});
      }
      // A stored node with a price of its own is a price source too ("local").
      for (const flotilla::db::Node& n : flotilla::db::list_nodes(db)) {
        const flotilla::db::Rate r = flotilla::db::node_rate(db, n.id, 1);
        if (r.usd_per_hour <= 0) continue;
        out.append({QString::fromStdString(n.name),
                    tr("node %1 — $%2/h (%3)")
                        .arg(QString::fromStdString(n.name))
                        .arg(r.usd_per_hour, 0, 'f', 2)
                        .arg(QString::fromStdString(r.source)),
                    r.usd_per_hour});
      }
    } catch (const std::exception&) {
      // An unreadable store offers no choices; the Runs page reports store problems itself.
    }
    return out;
  }));
}

void RunWizard::setNodes(const QList<StoredNode>& nodes) {
  const QScopedValueRollback<bool> machine(m_machineUpdate, true);
  m_draft->setNodes(nodes);
}
void RunWizard::setClusters(const QList<StoredCluster>& clusters) {
  const QScopedValueRollback<bool> machine(m_machineUpdate, true);
  m_draft->setClusters(clusters);
}
std::optional<ClusterLaunch> RunWizard::clusterLaunch() const {
  if (!m_draft->targetCluster()) return std::nullopt;
  return m_draft->clusterLaunch();
}
QStringList RunWizard::targetNodes() const { return m_draft->targetNodes(); }
bool RunWizard::autoRecover() const { return !targetNodes().isEmpty() && m_draft->autoRecover(); }
QStringList RunWizard::spareNodes() const { return autoRecover() ? m_draft->spareNodes() : QStringList(); }

bool RunWizard::addToQueue() {
  if (currentId() != Review || !currentPage()->isComplete() || !validateCurrentPage()) return false;
  m_queueChosen = true;
  accept();
  return true;
}

const flotilla::RunConfig& RunWizard::config() const { return m_draft->config(); }
int RunWizard::ranks() const { return m_draft->ranks(); }
void RunWizard::setConfig(const flotilla::RunConfig& config) { m_draft->replace(config); }

int RunWizard::advanceTo(PageId page) {
  m_advanceTarget = page;
  m_advancing = true;
  restart();
  m_advancing = false;
  continueAdvance();
  return currentId();
}

void RunWizard::continueAdvance() {
  m_advancing = true;
  while (currentId() != m_advanceTarget) {
    const int before = currentId();
    next();  // refused (no move) while the page has problems
    if (currentId() == before) break;
  }
  m_advancing = false;
  m_changesAtStop = m_draftChanges;
  if (currentId() == m_advanceTarget) m_advanceTarget = -1;
}

void RunWizard::setMachine(const flotilla::ProbeResult& probe) {
  m_machineSet = true;
  const QScopedValueRollback<bool> machine(m_machineUpdate, true);
  m_draft->setMachine(probe);
}

void RunWizard::useProbe() {
  if (m_machineSet || !m_probe->hasResult()) return;
  const QScopedValueRollback<bool> machine(m_machineUpdate, true);
  m_draft->setMachine(m_probe->result());
}

}  // namespace flotilla::ui
