// The Clusters page (see clusterspage.h).
#include "ui/clusters/clusterspage.h"

#include <QHeaderView>
#include <QLabel>
#include <QTableView>
#include <QVBoxLayout>

#include "ui/clusters/clustersmodel.h"
#include "ui/common/pageheader.h"
#include "ui/compare/asyncquery.h"

namespace flotilla::ui {

ClustersPage::ClustersPage(const QString& databasePath, QWidget* parent)
    : QWidget(parent), m_databasePath(databasePath), m_model(new ClustersModel(this)) {
  auto* layout = new QVBoxLayout(this);
  layout->addWidget(new PageHeader(
      tr("Clusters"),
      tr("Slurm clusters as last probed: partitions, nodes idle, allocated or down, prices, and our jobs "
         "on them."),
      this));
  m_view = new QTableView(this);
  m_view->setObjectName(QStringLiteral("clustersView"));
  m_view->setModel(m_model);
  m_view->setSelectionBehavior(QAbstractItemView::SelectRows);
  m_view->setWordWrap(true);
  m_view->horizontalHeader()->setStretchLastSection(true);
  m_view->verticalHeader()->hide();
  layout->addWidget(m_view, 1);
  m_status = new QLabel(this);
  m_status->setObjectName(QStringLiteral("clustersStatus"));
  layout->addWidget(m_status);
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
          m_status->setText(count == 0 ? tr("No clusters yet: flotilla clusters add NAME --login HOST")
                                       : tr("%n cluster(s)", nullptr, count));
        } else {
          m_status->setText(tr("Could not read the clusters: %1").arg(std::get<QString>(result)));
        }
        emit loaded();
      });
}

}  // namespace flotilla::ui
