// Nodes page (see nodespage.h). Store jobs run on the global thread pool, SSH on the monitor's.
#include "ui/nodes/nodespage.h"

#include <QCoreApplication>
#include <QDir>
#include <QFileInfo>
#include <QFormLayout>
#include <QFutureWatcher>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QMessageBox>
#include <QPushButton>
#include <QScrollArea>
#include <QStandardPaths>
#include <QTableView>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>

#include "db/errors.h"
#include "runs/worker_command.h"
#include "ui/common/pageheader.h"
#include "ui/nodes/gpubardelegate.h"
#include "ui/nodes/hostkeydialog.h"
#include "ui/nodes/latencyview.h"
#include "ui/nodes/linksview.h"
#include "ui/nodes/machinefacts.h"
#include "ui/nodes/machineprobe.h"
#include "ui/nodes/nodedialog.h"
#include "ui/nodes/nodemonitor.h"
#include "ui/nodes/nodesmodel.h"
#include "ui/nodes/nodestore.h"

namespace flotilla::ui {
namespace {

struct Loaded {
  std::vector<NodeEntry> entries;
  StoredLatency latency;
  LinkMatrix links;
  QString error;
};

}  // namespace

NodesPage::NodesPage(MachineProbe* probe, QWidget* parent)
    : QWidget(parent),
      m_probe(probe),
      m_model(new NodesModel(this)),
      m_monitor(new NodeMonitor(this)),
      m_table(new QTableView(this)),
      m_latency(new LatencyView(this)),
      m_links(new LinksView(this)),
      m_facts(new QFormLayout),
      m_status(new QLabel(this)),
      m_message(new QLabel(this)),
      m_emptyHint(new QLabel(this)),
      m_refresh(new QPushButton(tr("Probe again"), this)),
      m_add(new QPushButton(tr("Add node…"), this)),
      m_edit(new QPushButton(tr("Edit…"), this)),
      m_remove(new QPushButton(tr("Remove…"), this)),
      m_trust(new QPushButton(tr("Verify host key…"), this)),
      m_probeNow(new QPushButton(tr("Probe now"), this)) {
  auto* header = new PageHeader(
      tr("Nodes"),
      tr("The machines your runs can train on: this computer and remote nodes reached over SSH. While "
         "this page is open, Flotilla probes every node for its GPUs' use and memory and the latency."),
      this);
  // The table stretches; the wrapped description keeps its two lines (its height-for-width is not
  // honoured when the table's rows compete for the space).
  header->setMinimumHeight(header->heightForWidth(760));
  m_add->setObjectName(QStringLiteral("addNodeButton"));
  m_edit->setObjectName(QStringLiteral("editNodeButton"));
  m_remove->setObjectName(QStringLiteral("removeNodeButton"));
  m_trust->setObjectName(QStringLiteral("trustNodeButton"));
  m_probeNow->setObjectName(QStringLiteral("probeNodeButton"));
  auto* actions = new QHBoxLayout;
  actions->addWidget(m_add);
  actions->addWidget(m_edit);
  actions->addWidget(m_remove);
  actions->addWidget(m_trust);
  actions->addStretch(1);
  actions->addWidget(m_probeNow);

  m_table->setObjectName(QStringLiteral("nodesTable"));
  m_table->setModel(m_model);
  m_table->setItemDelegate(new GpuBarDelegate(m_table));
  m_table->setSelectionBehavior(QAbstractItemView::SelectRows);
  m_table->setSelectionMode(QAbstractItemView::ExtendedSelection);  // several nodes for Measure latency
  m_table->verticalHeader()->hide();
  m_table->verticalHeader()->setDefaultSectionSize(30);
  m_table->setShowGrid(false);
  m_table->setAlternatingRowColors(true);
  m_table->horizontalHeader()->setStretchLastSection(true);
  m_table->setMinimumHeight(150);
  m_table->setSizePolicy(QSizePolicy::Expanding,
                         QSizePolicy::Ignored);  // the header and card keep their height
  m_emptyHint->setObjectName(QStringLiteral("nodesEmptyHint"));
  m_emptyHint->setWordWrap(true);
  // Why a node is not usable, on the page (not only in the Status cell's tooltip): issue 34 #20.
  m_problems = new QLabel(this);
  m_problems->setObjectName(QStringLiteral("nodesProblems"));
  m_problems->setWordWrap(true);
  m_problems->setTextFormat(Qt::PlainText);
  m_problems->setTextInteractionFlags(Qt::TextSelectableByMouse);
  m_problems->hide();
  m_message->setObjectName(QStringLiteral("nodesMessage"));
  m_message->setWordWrap(true);
  m_message->setTextInteractionFlags(Qt::TextSelectableByMouse);

  auto* local = new QGroupBox(tr("This machine"), this);
  local->setObjectName(QStringLiteral("localMachine"));
  m_facts->setLabelAlignment(Qt::AlignLeft);
  m_facts->setHorizontalSpacing(24);
  m_facts->setVerticalSpacing(6);
  m_status->setObjectName(QStringLiteral("probeStatus"));
  m_status->setForegroundRole(QPalette::PlaceholderText);
  auto* statusRow = new QHBoxLayout;
  statusRow->addWidget(m_status, 1);
  statusRow->addWidget(m_refresh);
  auto* localLayout = new QVBoxLayout(local);
  localLayout->setContentsMargins(16, 12, 16, 10);
  localLayout->addLayout(m_facts);
  localLayout->addLayout(statusRow);

  // Everything scrolls as one, so the page never forces a minimum size on the main window.
  auto* content = new QWidget;
  auto* scroll = new QScrollArea(this);
  scroll->setFrameShape(QFrame::NoFrame);
  scroll->setWidgetResizable(true);
  scroll->setWidget(content);
  auto* outer = new QVBoxLayout(this);
  outer->setContentsMargins(0, 0, 0, 0);
  outer->addWidget(scroll);
  auto* layout = new QVBoxLayout(content);
  layout->setContentsMargins(28, 24, 28, 24);
  layout->setSpacing(12);
  layout->addWidget(header);
  layout->addLayout(actions);
  layout->addWidget(m_table, 1);
  layout->addWidget(m_problems);
  layout->addWidget(m_emptyHint);
  layout->addWidget(m_message);
  layout->addWidget(m_latency);
  layout->addWidget(m_links);
  layout->addWidget(local);

  connect(m_refresh, &QPushButton::clicked, this, [this] {
    m_probe->start();
    showProbe();
  });
  connect(m_probe, &MachineProbe::finished, this, &NodesPage::showProbe);
  connect(m_add, &QPushButton::clicked, this, &NodesPage::addNode);
  connect(m_edit, &QPushButton::clicked, this, &NodesPage::editSelected);
  connect(m_remove, &QPushButton::clicked, this, &NodesPage::removeSelected);
  connect(m_trust, &QPushButton::clicked, this, &NodesPage::trustSelected);
  connect(m_probeNow, &QPushButton::clicked, this, [this] {
    if (!selectedName().isEmpty()) m_monitor->probeNow(selectedName());
  });
  connect(m_table, &QTableView::doubleClicked, this, [this](const QModelIndex& i) {
    if (i.row() > 0) editSelected();
  });
  connect(m_table->selectionModel(), &QItemSelectionModel::selectionChanged, this, &NodesPage::updateActions);
  connect(m_model, &QAbstractItemModel::dataChanged, this, &NodesPage::updateActions);
  connect(m_model, &QAbstractItemModel::modelReset, this, &NodesPage::updateActions);
  connect(m_monitor, &NodeMonitor::statusChanged, this, &NodesPage::onStatus);
  connect(m_latency, &LatencyView::measureRequested, this, &NodesPage::measureLatency);
  connect(m_monitor, &NodeMonitor::latencyMeasured, this, [this](int stored, const QString& problems) {
    m_latency->setBusy(false);
    QString text = stored > 0 ? tr("Measured %n link(s).", nullptr, stored) : QString();
    if (!problems.isEmpty()) text += (text.isEmpty() ? QString() : QStringLiteral("\n")) + problems;
    m_latency->setMessage(text);
    reload();
  });
  connect(m_links, &LinksView::measureRequested, this, &NodesPage::measureLinks);
  connect(m_monitor, &NodeMonitor::linksMeasured, this, [this](qint64 id, const QString& problems) {
    m_links->setBusy(false);
    m_links->setMessage(id > 0 ? problems : (problems.isEmpty() ? tr("Nothing was measured.") : problems));
    reload();
  });
  connect(m_monitor, &NodeMonitor::trustFinished, this,
          [this](const QString& name, bool ok, const QString& why) {
            setMessage(ok ? tr("Trusted the host key of %1.").arg(name)
                          : tr("The host key of %1 was not trusted: %2").arg(name, why));
          });
  showProbe();
  updateActions();
}

void NodesPage::setDatabasePath(const QString& path) {
  m_databasePath = path;
  m_monitor->setDatabasePath(path);
  reload();
}

void NodesPage::reload() {
  updateActions();
  if (m_databasePath.isEmpty()) {
    m_model->setEntries({});
    m_latency->setMatrix({}, 0, {});
    m_links->setMatrix({});
    m_monitor->setNodes({});
    emit nodesReloaded();
    return;
  }
  const quint64 serial = ++m_reloadSerial;
  auto* watcher = new QFutureWatcher<Loaded>(this);
  connect(watcher, &QFutureWatcher<Loaded>::finished, this, [this, watcher, serial] {
    watcher->deleteLater();
    if (serial != m_reloadSerial) return;  // a newer reload is on its way
    Loaded loaded = watcher->result();
    if (!loaded.error.isEmpty()) setMessage(tr("The nodes could not be read: %1").arg(loaded.error));
    std::vector<db::SshNode> nodes;
    for (const auto& e : loaded.entries) nodes.push_back(e.node);
    m_model->setEntries(std::move(loaded.entries));
    m_latency->setMatrix(nodes, loaded.latency.localId, loaded.latency.rows);
    m_links->setMatrix(loaded.links);
    m_monitor->setNodes(nodes);
    if (isVisible()) m_monitor->start();
    emit nodesReloaded();
  });
  watcher->setFuture(QtConcurrent::run([path = m_databasePath] {
    Loaded out;
    try {
      out.entries = loadNodeEntries(path);
      out.latency = loadLatency(path);
      out.links = loadLinkMatrix(path);
    } catch (const std::exception& e) {
      out.error = QString::fromUtf8(e.what());
    }
    return out;
  }));
}

void NodesPage::showEvent(QShowEvent* event) {
  QWidget::showEvent(event);
  if (!m_databasePath.isEmpty()) m_monitor->start();
}

void NodesPage::hideEvent(QHideEvent* event) {
  QWidget::hideEvent(event);
  m_monitor->stop();
}

void NodesPage::onStatus(const QString& name, const NodeStatus& status) {
  m_model->setStatus(name, status);
  if (status.state == NodeState::UnknownHostKey && !status.fingerprint.isEmpty()) {
    const QString key = name + QLatin1Char(' ') + status.fingerprint;
    if (!m_prompted.contains(key) && !m_hostKeyDialog) {
      m_prompted.insert(key);  // asked once per session; later through "Verify host key…"
      promptHostKey(name, status.fingerprint);
    }
  }
}

void NodesPage::promptHostKey(const QString& name, const QString& fingerprint) {
  if (m_hostKeyDialog) return;
  const int row = m_model->rowOf(name);
  const QString address = row > 0 ? m_model->index(row, NodesModel::Address).data().toString() : QString();
  m_hostKeyDialog = new HostKeyDialog(name, address, fingerprint, this);
  m_hostKeyDialog->setAttribute(Qt::WA_DeleteOnClose);
  connect(m_hostKeyDialog, &QDialog::accepted, this, [this, name, fingerprint] {
    setMessage(tr("Trusting the host key of %1…").arg(name));
    m_monitor->trust(name, fingerprint);
  });
  connect(m_hostKeyDialog, &QObject::destroyed, this, [this] { m_hostKeyDialog = nullptr; });
  m_hostKeyDialog->open();
}

void NodesPage::trustSelected() {
  const QString name = selectedName();
  const NodeStatus st = m_model->status(name);
  if (st.state == NodeState::UnknownHostKey && !st.fingerprint.isEmpty()) promptHostKey(name, st.fingerprint);
}

QStringList NodesPage::selectedNames() const {
  QStringList names;
  for (const QModelIndex& i : m_table->selectionModel()->selectedRows()) {
    const QString name = i.data(NodesModel::NodeNameRole).toString();
    if (!name.isEmpty()) names << name;
  }
  return names;
}

QString NodesPage::workerPath() const {
  try {
    return QString::fromStdString(
        runs::find_worker(m_workerPath.toStdString()));  // one policy for every caller
  } catch (const std::exception&) {
    return {};
  }
}

void NodesPage::measureLatency() {
  if (m_databasePath.isEmpty() || m_model->nodeCount() == 0 || m_monitor->measuringLatency()) return;
  const QString worker = workerPath();
  if (worker.isEmpty() || !QFileInfo(worker).isExecutable()) {
    m_latency->setMessage(
        tr("flotilla-worker was not found next to Flotilla or on PATH; it is deployed to the "
           "nodes to measure the latency between them."));
    return;
  }
  const QStringList selected = selectedNames();
  std::vector<db::SshNode> nodes;
  for (int row = 1; row <= m_model->nodeCount(); ++row) {
    const db::SshNode& n = m_model->entry(row)->node;
    if (selected.size() < 2 || selected.contains(QString::fromStdString(n.name))) nodes.push_back(n);
  }
  if (!m_monitor->measureLatency(nodes, worker)) return;
  m_latency->setBusy(true);
  m_latency->setMessage(tr("Measuring the latency of %n node(s)…", nullptr, static_cast<int>(nodes.size())));
}

void NodesPage::measureLinks() {
  if (m_databasePath.isEmpty() || m_model->nodeCount() == 0 || m_monitor->measuringLinks()) return;
  const QString worker = workerPath();
  if (worker.isEmpty() || !QFileInfo(worker).isExecutable()) {
    m_links->setMessage(
        tr("flotilla-worker was not found next to Flotilla or on PATH; it is deployed to the "
           "nodes to measure the links between them."));
    return;
  }
  const QStringList selected = selectedNames();
  QStringList names;
  for (int row = 1; row <= m_model->nodeCount(); ++row) {
    const QString n = QString::fromStdString(m_model->entry(row)->node.name);
    if (selected.size() < 2 || selected.contains(n)) names << n;
  }
  if (!m_monitor->measureLinks(names, worker, m_linksTimeout)) return;
  m_links->setBusy(true);
  m_links->setMessage(tr("Measuring the links between %1 (at most %2 s)…")
                          .arg(names.join(QStringLiteral(", ")))
                          .arg(m_linksTimeout, 0, 'f', 0));
}

QString NodesPage::selectedName() const {
  const QModelIndexList rows = m_table->selectionModel()->selectedRows();
  return rows.isEmpty() ? QString() : rows.first().data(NodesModel::NodeNameRole).toString();
}

void NodesPage::updateActions() {
  const bool store = !m_databasePath.isEmpty();
  const QString name = selectedName();
  m_add->setEnabled(store);
  m_add->setToolTip(store ? QString() : tr("This workspace has no run database"));
  m_edit->setEnabled(store && !name.isEmpty());
  m_remove->setEnabled(store && !name.isEmpty());
  m_probeNow->setEnabled(store && !name.isEmpty());
  m_latency->setMeasureEnabled(store && m_model->nodeCount() > 0,
                               store ? tr("Add nodes first") : tr("This workspace has no run database"));
  m_links->setMeasureEnabled(store && m_model->nodeCount() > 0,
                             store ? tr("Add nodes first") : tr("This workspace has no run database"));
  m_trust->setEnabled(!name.isEmpty() && m_model->status(name).state == NodeState::UnknownHostKey);
  m_emptyHint->setText(
      m_model->nodeCount() == 0
          ? tr("No remote nodes yet. Add a machine you can reach with SSH (key or agent "
               "authentication) to train on it; Flotilla checks its host key and probes its GPUs.")
          : QString());
  m_emptyHint->setVisible(m_model->nodeCount() == 0);
  QStringList problems;
  for (int row = 1; row <= m_model->nodeCount(); ++row) {
    const QString node = QString::fromStdString(m_model->entry(row)->node.name);
    const NodeStatus st = m_model->status(node);
    if (st.state == NodeState::Reachable || st.state == NodeState::Unknown || st.message.isEmpty()) continue;
    problems << tr("%1 is %2: %3").arg(node, stateText(st.state), st.message);
  }
  m_problems->setText(problems.join(QLatin1Char('\n')));
  m_problems->setVisible(!problems.isEmpty());
}

QString NodesPage::problemsText() const {
  return m_problems->isVisibleTo(this) ? m_problems->text() : QString();
}

void NodesPage::setMessage(const QString& text) { m_message->setText(text); }

QString NodesPage::messageText() const { return m_message->text(); }

void NodesPage::runStoreJob(std::function<QString()> job) {
  auto* watcher = new QFutureWatcher<QString>(this);
  connect(watcher, &QFutureWatcher<QString>::finished, this, [this, watcher] {
    watcher->deleteLater();
    setMessage(watcher->result());
    reload();
  });
  watcher->setFuture(QtConcurrent::run([job = std::move(job)] {
    try {
      return job();
    } catch (const std::exception& e) {
      return QString::fromUtf8(e.what());
    }
  }));
}

void NodesPage::addNode() {
  if (m_databasePath.isEmpty()) return;
  QStringList taken;
  for (int row = 1; row <= m_model->nodeCount(); ++row)
    taken << QString::fromStdString(m_model->entry(row)->node.name);
  auto* dialog = new NodeDialog(taken, nullptr, this);
  dialog->setAttribute(Qt::WA_DeleteOnClose);
  connect(dialog, &QDialog::accepted, this, [this, dialog] {
    const runs::NodeFields f = dialog->fields();
    const runs::PowerFields power = dialog->power();
    runStoreJob([path = m_databasePath, f, power] {
      flotilla::ui::addNode(path, f);
      setNodePower(path, f.name, power);
      return QObject::tr("Added node %1.").arg(QString::fromStdString(f.name));
    });
  });
  dialog->open();
}

void NodesPage::editSelected() {
  const int row = m_model->rowOf(selectedName());
  const NodeEntry* e = m_model->entry(row);
  if (!e || m_databasePath.isEmpty()) return;
  QStringList taken;
  for (int r = 1; r <= m_model->nodeCount(); ++r)
    if (r != row) taken << QString::fromStdString(m_model->entry(r)->node.name);
  const runs::NodeFields initial = runs::fields_from_node(e->node);
  const runs::PowerFields initialPower =
      e->power ? runs::power_fields(e->power->idle_limit_s, e->power->stop_argv, e->power->start_argv)
               : runs::PowerFields{};
  auto* dialog = new NodeDialog(taken, &initial, this, &initialPower);
  dialog->setAttribute(Qt::WA_DeleteOnClose);
  connect(dialog, &QDialog::accepted, this, [this, dialog, oldName = e->node.name] {
    const runs::NodeFields f = dialog->fields();
    const runs::PowerFields power = dialog->power();
    runStoreJob([path = m_databasePath, oldName, f, power] {
      updateNode(path, oldName, f);
      setNodePower(path, f.name, power);
      return QObject::tr("Saved node %1.").arg(QString::fromStdString(f.name));
    });
  });
  dialog->open();
}

void NodesPage::removeSelected() {
  const QString name = selectedName();
  if (name.isEmpty() || m_databasePath.isEmpty()) return;
  auto* box = new QMessageBox(QMessageBox::Question, tr("Remove node"),
                              tr("Remove node %1? Its GPU readings go with it, and its host key unless "
                                 "another node uses the same address. Runs that used it keep it.")
                                  .arg(name),
                              QMessageBox::Cancel, this);
  box->setObjectName(QStringLiteral("removeNodeBox"));
  box->addButton(tr("Remove"), QMessageBox::AcceptRole);
  box->setAttribute(Qt::WA_DeleteOnClose);
  connect(box, &QMessageBox::accepted, this, [this, name] {
    runStoreJob([path = m_databasePath, name] {
      const bool forgot = removeNodeAndKey(path, name.toStdString());
      return forgot ? QObject::tr("Removed node %1 and its host key.").arg(name)
                    : QObject::tr("Removed node %1.").arg(name);
    });
  });
  box->open();
}

void NodesPage::showProbe() {
  while (m_facts->rowCount() > 0) m_facts->removeRow(0);
  m_refresh->setEnabled(!m_probe->isRunning());
  if (m_probe->hasResult()) {
    m_model->setLocalProbe(m_probe->result());
    for (const auto& [label, value] : machineFacts(m_probe->result())) {
      auto* valueLabel = new QLabel(value);
      valueLabel->setTextInteractionFlags(Qt::TextSelectableByMouse);
      valueLabel->setWordWrap(true);
      m_facts->addRow(label, valueLabel);
    }
  }
  if (m_probe->isRunning())
    m_status->setText(tr("Probing this machine…"));
  else if (!m_probe->error().isEmpty())
    m_status->setText(tr("The probe failed: %1").arg(m_probe->error()));
  else
    m_status->setText(m_probe->hasResult()
                          ? tr("Probed by the engine's machine probe (flotilla-worker probe).")
                          : QString());
}

QString NodesPage::localMachineText() const {
  QStringList lines;
  for (int row = 0; row < m_facts->rowCount(); ++row) {
    auto* label = qobject_cast<QLabel*>(m_facts->itemAt(row, QFormLayout::LabelRole)->widget());
    auto* value = qobject_cast<QLabel*>(m_facts->itemAt(row, QFormLayout::FieldRole)->widget());
    if (label && value) lines << label->text() + QStringLiteral(": ") + value->text();
  }
  lines << m_status->text();
  return lines.join(QLatin1Char('\n'));
}

}  // namespace flotilla::ui
