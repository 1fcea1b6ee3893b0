// Runs page (see runspage.h).
#include "ui/runs/runspage.h"

#include <QAction>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPushButton>
#include <QStackedWidget>
#include <QTableView>
#include <QVBoxLayout>

#include "engine/config/config_io.h"
#include "ui/common/emptystate.h"
#include "ui/common/pageheader.h"
#include "ui/queue/queueoptions.h"
#include "ui/queue/queuestore.h"
#include "ui/runs/localruns.h"
#include "ui/runs/localrunsmodel.h"
#include "ui/runs/servicerun.h"
#include "ui/runs/storerunsmodel.h"
#include "ui/runs/storerunsview.h"
#include "ui/runs/storeservice.h"
#include "ui/wizard/modelpage.h"
#include "ui/wizard/runwizard.h"

namespace flotilla::ui {
namespace {

const char* const kDemoTip =
    "Trains the tiny GPT (4 layers, width 256) on a synthetic corpus on this machine's CPU, with the "
    "built-in demo config. Takes a few minutes; Stop on the Live page ends it with a checkpoint.";

const char* const kNewRunTip =
    "Configure a run step by step: model, data, hardware and parallel layout, batch and schedule, "
    "checkpoints and budget, with memory, time and cost predicted before it starts (Ctrl+N)";

}  // namespace

RunsPage::RunsPage(LocalRuns* runs, QWidget* parent)
    : QWidget(parent),
      m_runs(runs),
      m_model(new LocalRunsModel(runs, this)),
      m_body(new QStackedWidget(this)),
      m_table(new QTableView(this)),
      m_error(new QLabel(this)) {
  auto* header = new PageHeader(
      tr("Runs"),
      tr("Every training run in this workspace: its configuration, where it runs (this machine, SSH "
         "nodes or a Slurm cluster), its status, progress and spend. Select runs to watch one live or "
         "to compare several."),
      this);

  auto* empty = new EmptyState(QStringLiteral("runs"), tr("No runs yet"),
                               tr("Start the demo to watch a small model learn on this machine's CPU, live. "
                                  "The run wizard, which checks memory, speed and cost before anything "
                                  "starts, comes next."),
                               this);
  m_emptyDemo = empty->addAction(tr("Run the demo"));
  m_emptyDemo->setObjectName(QStringLiteral("runDemoButton"));
  m_emptyDemo->setToolTip(tr(kDemoTip));
  m_emptyDemo->setDefault(true);
  m_emptyNewRun = empty->addAction(tr("New run…"));
  m_emptyNewRun->setObjectName(QStringLiteral("newRunButton"));
  m_emptyNewRun->setToolTip(tr(kNewRunTip));

  // Once runs exist: a toolbar row over the table.
  auto* list = new QWidget(this);
  m_toolbarDemo = new QPushButton(tr("Run the demo"), list);
  m_toolbarDemo->setObjectName(QStringLiteral("runDemoToolbarButton"));
  m_toolbarDemo->setToolTip(tr(kDemoTip));
  m_toolbarNewRun = new QPushButton(tr("New run…"), list);
  m_toolbarNewRun->setObjectName(QStringLiteral("newRunToolbarButton"));
  m_toolbarNewRun->setToolTip(tr(kNewRunTip));
  auto* toolbar = new QHBoxLayout;
  toolbar->addWidget(m_toolbarDemo);
  toolbar->addWidget(m_toolbarNewRun);
  toolbar->addStretch();

  m_table->setObjectName(QStringLiteral("runsTable"));
  m_table->setModel(m_model);
  m_table->setSelectionBehavior(QAbstractItemView::SelectRows);
  m_table->setSelectionMode(QAbstractItemView::SingleSelection);
  m_table->setEditTriggers(QAbstractItemView::NoEditTriggers);
  m_table->verticalHeader()->hide();
  m_table->setAlternatingRowColors(true);
  m_table->setShowGrid(false);
  m_table->setWordWrap(false);
  // Numbers get fixed columns wide enough for their largest plausible value, with air between
  // them; the name fits its text and the status takes the rest.
  QHeaderView* columns = m_table->horizontalHeader();
  columns->setSectionResizeMode(LocalRunsModel::Name, QHeaderView::ResizeToContents);
  columns->setSectionResizeMode(LocalRunsModel::Status, QHeaderView::Stretch);
  const struct {
    int column;
    const char* widest;
  } numeric[] = {{LocalRunsModel::Progress, "99999 / 99999"},
                 {LocalRunsModel::Loss, "99.9999"},
                 {LocalRunsModel::ValLoss, "99.9999"},
                 {LocalRunsModel::TokensPerSec, "9,999,999"},
                 {LocalRunsModel::Elapsed, "999:59:59"}};
  for (const auto& n : numeric) {
    const QString title = m_model->headerData(n.column, Qt::Horizontal).toString();
    const int text = std::max(columns->fontMetrics().horizontalAdvance(title),
                              m_table->fontMetrics().horizontalAdvance(QLatin1String(n.widest)));
    columns->setSectionResizeMode(n.column, QHeaderView::Fixed);
    columns->resizeSection(n.column, text + 32);
  }
  m_table->setToolTip(tr("Double-click a run to watch it on the Live page"));
  auto* listLayout = new QVBoxLayout(list);
  listLayout->setContentsMargins(0, 0, 0, 0);
  listLayout->addLayout(toolbar);
  if (runs->store()) {
    // Every run in the store, this session's and earlier ones; the session table stays unused.
    m_storeView = new StoreRunsView(runs->store(), runs, list);
    m_storeView->setObjectName(QStringLiteral("storeRunsView"));
    listLayout->addWidget(m_storeView, 1);
    m_table->hide();
    connect(m_storeView, &StoreRunsView::runOpened, this, &RunsPage::runOpened);
    connect(m_storeView, &StoreRunsView::errorRaised, this, &RunsPage::showError);
    connect(m_storeView, &StoreRunsView::message, this,
            [this](const QString& text) { showMessage(text, false); });
    connect(m_storeView, &StoreRunsView::duplicateRequested, this, [this](const flotilla::RunConfig& config) {
      // The copy opens on Review with the run's values; Back shows them page by page.
      if (RunWizard* wizard = openNewRunWizard()) {
        wizard->setConfig(config);
        wizard->advanceTo(RunWizard::Review);
      }
    });
    connect(m_storeView->model(), &QAbstractItemModel::rowsInserted, this, &RunsPage::updateBody);
    connect(m_storeView->model(), &QAbstractItemModel::rowsRemoved, this, &RunsPage::updateBody);
  } else {
    listLayout->addWidget(m_table, 1);
  }

  m_body->addWidget(empty);
  m_body->addWidget(list);

  m_error->setObjectName(QStringLiteral("runsError"));
  m_error->setWordWrap(true);
  m_error->setTextInteractionFlags(Qt::TextSelectableByMouse);
  m_error->hide();

  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(28, 24, 28, 24);
  layout->setSpacing(16);
  layout->addWidget(header);
  layout->addWidget(m_error);
  layout->addWidget(m_body, 1);

  auto* newRunAction = new QAction(tr("New run…"), this);
  newRunAction->setObjectName(QStringLiteral("newRunAction"));
  newRunAction->setShortcut(QKeySequence::New);
  newRunAction->setShortcutContext(Qt::WindowShortcut);
  addAction(newRunAction);
  connect(newRunAction, &QAction::triggered, this, &RunsPage::openNewRunWizard);
  connect(m_emptyNewRun, &QPushButton::clicked, this, &RunsPage::openNewRunWizard);
  connect(m_toolbarNewRun, &QPushButton::clicked, this, &RunsPage::openNewRunWizard);
  connect(m_emptyDemo, &QPushButton::clicked, this, &RunsPage::startDemo);
  connect(m_toolbarDemo, &QPushButton::clicked, this, &RunsPage::startDemo);
  connect(m_table, &QTableView::doubleClicked, this, [this](const QModelIndex& index) {
    if (ServiceRun* run = m_model->runAt(index.row())) emit runOpened(run);
  });
  connect(m_model, &QAbstractItemModel::rowsInserted, this, &RunsPage::updateBody);
  updateBody();
}

QPushButton* RunsPage::runDemoButton() const {
  return m_body->currentIndex() == 0 ? m_emptyDemo : m_toolbarDemo;
}
QPushButton* RunsPage::newRunButton() const {
  return m_body->currentIndex() == 0 ? m_emptyNewRun : m_toolbarNewRun;
}
QString RunsPage::errorText() const { return m_error->isHidden() ? QString() : m_error->text(); }

void RunsPage::startDemo() {
  QString error;
  ServiceRun* run = m_runs->startDemo(&error);
  if (!run) {
    showError(tr("Cannot start the demo. %1").arg(error));
    return;
  }
  if (run->state() == ServiceRun::State::Failed) {
    showError(tr("Cannot start the demo: %1").arg(run->errorText()));
  } else {
    showError(QString());
  }
  selectRun(run);
  emit runOpened(run);
}

RunWizard* RunsPage::openNewRunWizard() {
  if (m_wizard) {
    m_wizard->raise();
    m_wizard->activateWindow();
    return m_wizard;
  }
  m_wizard = new RunWizard(m_probe, QString(), this);
  m_wizard->setWindowModality(Qt::WindowModal);
  m_wizard->setAttribute(Qt::WA_DeleteOnClose);
  RunWizard* wizard = m_wizard;
  connect(wizard, &QDialog::accepted, this, [this, wizard] {
    if (wizard->queueChosen()) {
      queueFromWizard(wizard);
      return;
    }
    // Where the wizard's target says: its cluster, its nodes (with the recovery choice), else here.
    // Deploying, submitting and watching happen on the run's own thread; it shows on the Live page.
    runs::Placement where = runs::Placement::here();
    if (const std::optional<ClusterLaunch> launch = wizard->clusterLaunch()) {
      where = placementOf(*launch);
    } else if (const QStringList nodes = wizard->targetNodes(); !nodes.isEmpty()) {
      std::vector<std::string> names;
      for (const QString& n : nodes) names.push_back(n.toStdString());
      where = runs::Placement::on_nodes(names);
      RecoveryChoice recovery;
      recovery.enabled = wizard->autoRecover();
      recovery.spares = wizard->spareNodes();
      recovery.mirrorCheckpoints = recovery.enabled;  // so that losing the master is recoverable too
      where.recovery = toRunsRecovery(recovery);
    }
    launch(wizard->config(), where);
  });
  if (m_runs->store()) wizard->loadNodes(m_runs->store()->databasePath());
  wizard->modelPage()->setWorkerPath(m_runs->findWorker());  // downloads models by name (issue 40)
  wizard->show();
  return wizard;
}

void RunsPage::queueFromWizard(RunWizard* wizard) {
  QueueRequest request;
  request.configToml = flotilla::config_to_toml(wizard->config());
  request.places = placeKeysForTarget(wizard->clusterLaunch(), wizard->targetNodes());
  request.priority = wizard->queueOptions()->priority();
  request.deadline = wizard->queueOptions()->deadline();
  request.maxUsd = wizard->queueOptions()->maxUsd();
  QString error;
  const qint64 id = addToQueue(m_runs->store(), request, &error);
  if (!id) {
    showError(tr("Cannot add the run to the queue. %1").arg(error));
    return;
  }
  showError(QString());
  emit entryQueued(id);
}

ServiceRun* RunsPage::launchConfig(const flotilla::RunConfig& config, int /*ranks: dp*tp*pp of config*/) {
  return launch(config, runs::Placement::here());
}

ServiceRun* RunsPage::launch(const flotilla::RunConfig& config, const runs::Placement& where) {
  QString error;
  ServiceRun* run = m_runs->start(config, where, &error);
  if (!run) {
    showError(tr("Cannot start the run. %1").arg(error));
    return nullptr;
  }
  showError(run->state() == ServiceRun::State::Failed ? tr("Cannot start the run: %1").arg(run->errorText())
                                                      : QString());
  selectRun(run);
  emit runOpened(run);
  return run;
}

void RunsPage::selectRun(const ServiceRun* run) {
  if (m_storeView) {
    m_storeView->selectId(run->storeId());
  } else {
    m_table->selectRow(m_model->rowCount() - 1);
  }
}

void RunsPage::showError(const QString& text) { showMessage(text, true); }

void RunsPage::showMessage(const QString& text, bool error) {
  QPalette pal = palette();
  if (error) pal.setColor(QPalette::WindowText, QColor(0xc6, 0x28, 0x28));
  m_error->setPalette(pal);
  m_error->setText(text);
  m_error->setVisible(!text.isEmpty());
}

void RunsPage::updateBody() {
  const int rows = m_storeView ? m_storeView->model()->rowCount() : m_model->rowCount();
  m_body->setCurrentIndex(rows > 0 || m_model->rowCount() > 0 ? 1 : 0);
}

QTableView* RunsPage::table() const { return m_storeView ? m_storeView->table() : m_table; }

}  // namespace flotilla::ui
