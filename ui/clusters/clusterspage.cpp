// The Clusters page (see clusterspage.h).
#include "ui/clusters/clusterspage.h"

#include <QHBoxLayout>
#include <QHeaderView>
#include <QItemSelectionModel>
#include <QLabel>
#include <QMessageBox>
#include <QPushButton>
#include <QTableView>
#include <QVBoxLayout>

#include <optional>

#include "db/clusters.h"
#include "db/database.h"
#include "runs/cluster_admin.h"
#include "runs/node_ops.h"
#include "runs/ssh_options.h"
#include "ui/clusters/clusterdialog.h"
#include "ui/clusters/clustersmodel.h"
#include "ui/common/pageheader.h"
#include "ui/compare/asyncquery.h"

namespace flotilla::ui {
namespace {

// What one probe (and, when asked, the trust before it) came to.
struct ProbeOutcome {
  QString summary;      // "cluster flo probed: Slurm 22.05.8, 2 node(s), 2 partition(s); ..."
  QString error;        // why not
  QString unknownKey;   // the login key's fingerprint when it is not known yet
};

ProbeOutcome probeOnThread(const std::string& dbPath, const std::string& name, const std::string& trust) {
  ProbeOutcome out;
  db::Database db(dbPath);
  // The one set of SSH options; an encrypted key is skipped here (no passphrase prompt): the CLI
  // asks for its passphrase. A refused key is kept as data to offer its fingerprint for trust.
  std::optional<runs::HostKeyRefusal> refused;
  runs::SshAccess access;
  access.database_path = dbPath;
  access.host_key_text = [&refused](const runs::HostKeyRefusal& r) {
    refused = r;
    return runs::host_key_cli_text(r);
  };
  try {
    if (!trust.empty()) runs::trust_host_key(access, db, name, trust, true);
    const runs::ClusterProbe p = runs::check_cluster(access, db, name);
    const auto count = [](size_t n, const char* one, const char* many) {
      return n == 1 ? QStringLiteral("1 %1").arg(QLatin1String(one))
                    : QStringLiteral("%1 %2").arg(n).arg(QLatin1String(many));
    };
    out.summary = QStringLiteral("cluster %1 probed: Slurm %2, %3, %4; the table shows their states")
                      .arg(QString::fromStdString(name), QString::fromStdString(p.config.version),
                           count(p.nodes.size(), "node", "nodes"), count(p.partitions.size(), "partition", "partitions"));
  } catch (const runs::Refusal& e) {
    if (refused && refused->problem == runs::HostKeyRefusal::Problem::kUnknown && trust.empty() &&
        !refused->presented.empty()) {
      out.unknownKey = QString::fromStdString(refused->presented);
      return out;
    }
    out.error = QString::fromUtf8(e.what());
  }
  return out;
}

}  // namespace

ClustersPage::ClustersPage(const QString& databasePath, QWidget* parent)
    : QWidget(parent), m_databasePath(databasePath), m_model(new ClustersModel(this)) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(28, 24, 28, 16);  // as the other pages
  layout->setSpacing(12);
  layout->addWidget(new PageHeader(
      tr("Clusters"),
      tr("Slurm clusters as last probed: partitions, nodes idle, allocated or down, prices, and our jobs "
         "on them."),
      this));
  auto* actions = new QHBoxLayout;
  m_add = new QPushButton(tr("Add cluster…"), this);
  m_add->setObjectName(QStringLiteral("addClusterButton"));
  m_add->setToolTip(tr("A Slurm cluster reached through SSH at its login node (as flotilla clusters add)"));
  connect(m_add, &QPushButton::clicked, this, &ClustersPage::addCluster);
  actions->addWidget(m_add);
  actions->addStretch(1);
  layout->addLayout(actions);
  m_view = new QTableView(this);
  m_view->setObjectName(QStringLiteral("clustersView"));
  m_view->setModel(m_model);
  m_view->setSelectionBehavior(QAbstractItemView::SelectRows);
  m_view->setWordWrap(true);
  m_view->horizontalHeader()->setStretchLastSection(true);
  m_view->verticalHeader()->hide();
  layout->addWidget(m_view, 1);
  auto* row = new QHBoxLayout;
  m_status = new QLabel(this);
  m_status->setObjectName(QStringLiteral("clustersStatus"));
  m_status->setWordWrap(true);
  m_status->setTextInteractionFlags(Qt::TextSelectableByMouse);
  row->addWidget(m_status, 1);
  m_probe = new QPushButton(tr("Probe"), this);
  m_probe->setObjectName(QStringLiteral("probeButton"));
  m_probe->setToolTip(tr("Ask the selected cluster's login node for its nodes, partitions and settings now "
                         "(as flotilla clusters probe)"));
  connect(m_probe, &QPushButton::clicked, this, &ClustersPage::probeSelected);
  row->addWidget(m_probe);
  layout->addLayout(row);
  connect(m_view->selectionModel(), &QItemSelectionModel::selectionChanged, this, &ClustersPage::updateActions);
  updateActions();
}

void ClustersPage::updateActions() {
  const bool store = !m_databasePath.isEmpty();
  m_add->setEnabled(store && !m_probing);
  // Probe needs a cluster: the selected one, or the only one.
  const int rows = m_model->rowCount();
  const bool picked = m_view->selectionModel() && !m_view->selectionModel()->selectedRows().isEmpty();
  m_probe->setEnabled(store && !m_probing && (picked || rows == 1));
  m_probe->setToolTip(rows == 0   ? tr("No cluster to probe yet: add one first")
                      : picked || rows == 1
                          ? tr("Ask the selected cluster's login node for its nodes, partitions and settings now "
                               "(as flotilla clusters probe)")
                          : tr("Select the cluster to probe"));
}

ClusterDialog* ClustersPage::addDialog() const { return m_dialog.data(); }

void ClustersPage::addCluster() {
  if (m_databasePath.isEmpty() || (m_dialog && m_dialog->isVisible())) return;
  QStringList taken;
  for (int r = 0; r < m_model->rowCount(); ++r) taken << m_model->row(r).name;
  auto* dialog = new ClusterDialog(taken, this);
  m_dialog = dialog;
  connect(dialog, &QDialog::accepted, this, [this, dialog] { store(dialog->fields()); });
  connect(dialog, &QDialog::finished, dialog, &QObject::deleteLater);
  dialog->open();
}

void ClustersPage::store(const runs::ClusterFields& fields) {
  const std::string path = m_databasePath.toStdString();
  const QString name = QString::fromStdString(fields.name);
  m_status->setText(tr("Adding cluster %1…").arg(name));
  // The one way to store a cluster (runs/cluster_admin.h), as `flotilla clusters add`, off the UI thread.
  runAsync<bool>(
      this,
      [path, fields] {
        db::Database db(path);
        runs::add_cluster(db, fields);
        return true;
      },
      [this, name](Outcome<bool> result) {
        if (auto* failed = std::get_if<QString>(&result)) {
          m_status->setText(tr("Cluster %1 was not added: %2").arg(name, *failed));
          emit added(false);
          return;
        }
        emit added(true);
        // Then probe it: the login node's host key is checked (and offered for trust) there.
        connect(this, &ClustersPage::loaded, this, [this, name] { probe(name, QString()); }, Qt::SingleShotConnection);
        reload();
      });
}

QString ClustersPage::statusText() const { return m_status->text(); }

void ClustersPage::probeSelected() {
  if (m_probing) return;
  const QModelIndexList picked = m_view->selectionModel()->selectedRows();
  int r = picked.isEmpty() ? -1 : picked.front().row();
  if (r < 0 && m_model->rowCount() == 1) r = 0;
  if (r < 0) {
    m_status->setText(m_model->rowCount() == 0 ? tr("No cluster to probe: Add cluster… first")
                                               : tr("Select the cluster to probe."));
    return;
  }
  probe(m_model->row(r).name, QString());
}

void ClustersPage::probe(const QString& cluster, const QString& trustFingerprint) {
  m_probing = true;
  updateActions();
  m_status->setText(tr("Probing cluster %1…").arg(cluster));
  const std::string path = m_databasePath.toStdString(), name = cluster.toStdString(),
                    trust = trustFingerprint.toStdString();
  runAsync<ProbeOutcome>(
      this, [path, name, trust] { return probeOnThread(path, name, trust); },
      [this, cluster](Outcome<ProbeOutcome> result) {
        m_probing = false;
        updateActions();
        if (auto* failed = std::get_if<QString>(&result)) {
          m_status->setText(tr("Probing cluster %1 failed: %2").arg(cluster, *failed));
          emit probed(false);
          return;
        }
        const ProbeOutcome& o = std::get<ProbeOutcome>(result);
        if (!o.unknownKey.isEmpty()) {
          const bool yes =
              m_confirmTrust
                  ? m_confirmTrust(cluster, o.unknownKey)
                  : QMessageBox::question(
                        this, tr("Trust the login node of %1?").arg(cluster),
                        tr("This workspace has never seen the login node key of cluster %1:\n\n%2\n\nTrust it "
                           "only if it is the fingerprint your cluster's administrators publish (or that "
                           "ssh-keyscan shows on a network you trust).")
                            .arg(cluster, o.unknownKey)) == QMessageBox::Yes;
          if (yes) {
            probe(cluster, o.unknownKey);
            return;
          }
          m_status->setText(tr("Cluster %1 not probed: its login key %2 is not trusted").arg(cluster, o.unknownKey));
          emit probed(false);
          return;
        }
        if (!o.error.isEmpty()) {
          m_status->setText(o.error);
          emit probed(false);
          return;
        }
        m_status->setText(o.summary);
        emit probed(true);
        const QString summary = o.summary;
        connect(this, &ClustersPage::loaded, this, [this, summary] { m_status->setText(summary); },
                Qt::SingleShotConnection);
        reload();
      });
}

void ClustersPage::showEvent(QShowEvent* event) {
  QWidget::showEvent(event);
  reload();
}

void ClustersPage::reload() {
  if (m_loading || m_databasePath.isEmpty()) return;
  m_loading = true;
  const QString path = m_databasePath;
  runAsync<std::vector<ClusterRow>>(
      this, [path] { return loadClusterRows(path); },
      [this](Outcome<std::vector<ClusterRow>> result) {
        m_loading = false;
        if (auto* rows = std::get_if<std::vector<ClusterRow>>(&result)) {
          const int count = static_cast<int>(rows->size());
          m_model->setRows(std::move(*rows));
          // Whole values, not "2: 2 idle, 0 …": columns as wide as their text, rows as tall.
          m_view->resizeColumnsToContents();
          m_view->resizeRowsToContents();
          m_status->setText(count == 0   ? tr("No clusters yet: Add cluster… stores one (as flotilla clusters add "
                                                "NAME --login HOST) and probes it.")
                            : count == 1 ? tr("1 cluster")
                                         : tr("%1 clusters").arg(count));
          updateActions();
        } else {
          m_status->setText(tr("Could not read the clusters: %1").arg(std::get<QString>(result)));
        }
        emit loaded();
      });
}

}  // namespace flotilla::ui
