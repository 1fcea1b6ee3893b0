// Latency matrix widget (see latencyview.h).
#include "ui/nodes/latencyview.h"

#include <QDateTime>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QMap>
#include <QPushButton>
#include <QTableWidget>
#include <QVBoxLayout>

namespace flotilla::ui {

LatencyView::LatencyView(QWidget* parent)
    : QWidget(parent),
      m_table(new QTableWidget(this)),
      m_when(new QLabel(this)),
      m_message(new QLabel(this)),
      m_measure(new QPushButton(tr("Measure latency"), this)) {
  m_table->setObjectName(QStringLiteral("latencyMatrix"));
  m_measure->setObjectName(QStringLiteral("measureLatencyButton"));
  m_measureTip =
      tr("Measures the TCP connect time to each node's SSH port from this machine and from "
         "every other node (the selected nodes, or all). The worker is deployed to each node "
         "first if it is not there yet.");
  m_measure->setToolTip(m_measureTip);
  m_when->setObjectName(QStringLiteral("latencyMeasured"));
  m_when->setForegroundRole(QPalette::PlaceholderText);
  m_message->setObjectName(QStringLiteral("latencyMessage"));
  m_message->setWordWrap(true);
  m_message->setTextInteractionFlags(Qt::TextSelectableByMouse);
  m_table->setEditTriggers(QAbstractItemView::NoEditTriggers);
  m_table->setSelectionMode(QAbstractItemView::NoSelection);
  // Sized to its contents (a few nodes make a small square), left-aligned, scrolling past ~8 rows.
  m_table->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  m_table->horizontalHeader()->setMinimumSectionSize(84);
  m_table->verticalHeader()->setSectionResizeMode(QHeaderView::Fixed);
  m_table->verticalHeader()->setDefaultSectionSize(26);
  m_table->setSizeAdjustPolicy(QAbstractScrollArea::AdjustToContents);
  m_table->setSizePolicy(QSizePolicy::Maximum, QSizePolicy::Maximum);
  m_table->setMaximumHeight(26 * 9 + 4);
  m_table->setAlternatingRowColors(true);

  auto* title =
      new QLabel(tr("<b>Reachability</b> (TCP connect to sshd, median ms; rows: from, columns: to)"), this);
  title->setWordWrap(true);
  auto* top = new QHBoxLayout;
  top->addWidget(title, 1);
  top->addWidget(m_measure);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addLayout(top);
  layout->addWidget(m_table, 0, Qt::AlignLeft);
  layout->addWidget(m_when);
  layout->addWidget(m_message);
  connect(m_measure, &QPushButton::clicked, this, &LatencyView::measureRequested);
  setMatrix({}, 0, {});
}

void LatencyView::setMatrix(const std::vector<db::SshNode>& nodes, int64_t localId,
                            const std::vector<db::NodeLatency>& rows) {
  QMap<QPair<qint64, qint64>, const db::NodeLatency*> links;
  for (const auto& r : rows) links.insert({r.from_node, r.to_node}, &r);
  const int n = static_cast<int>(nodes.size());
  m_table->clear();
  m_table->setRowCount(n + 1);
  m_table->setColumnCount(n);
  QStringList columns, rowNames{tr("This machine")};
  std::vector<int64_t> from{localId};
  for (const auto& node : nodes) {
    columns << QString::fromStdString(node.name);
    rowNames << QString::fromStdString(node.name);
    from.push_back(node.id);
  }
  m_table->setHorizontalHeaderLabels(columns);
  m_table->setVerticalHeaderLabels(rowNames);
  double newest = 0;
  for (int r = 0; r <= n; ++r) {
    for (int c = 0; c < n; ++c) {
      auto* item = new QTableWidgetItem;
      item->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
      const int64_t to = nodes[static_cast<size_t>(c)].id;
      const db::NodeLatency* link =
          from[static_cast<size_t>(r)] == to ? nullptr : links.value({from[static_cast<size_t>(r)], to});
      if (from[static_cast<size_t>(r)] == to) {
        item->setText(QStringLiteral("—"));
        item->setForeground(palette().color(QPalette::PlaceholderText));
      } else if (!link) {
        item->setText(QStringLiteral("–"));
        item->setForeground(palette().color(QPalette::PlaceholderText));
        item->setToolTip(tr("Not measured yet"));
      } else {
        const QString when = QDateTime::fromSecsSinceEpoch(static_cast<qint64>(link->measured_at))
                                 .toString(QStringLiteral("yyyy-MM-dd HH:mm:ss"));
        newest = std::max(newest, link->measured_at);
        if (link->rtt_ms) {
          // One decimal; a loopback or same-rack link below 0.05 ms would read "0.0", as if unmeasured.
          item->setText(*link->rtt_ms < 0.05 ? QStringLiteral("<0.1")
                                             : QString::number(*link->rtt_ms, 'f', 1));
          item->setToolTip(tr("%1 → %2: %3 ms median TCP connect (measured %4)")
                               .arg(rowNames[r], columns[c], QString::number(*link->rtt_ms, 'f', 3), when));
        } else {
          const QString error = QString::fromStdString(link->error);
          item->setText(error.section(QLatin1Char(':'), 0, 0).left(18));
          item->setForeground(QColor(0xc6, 0x28, 0x28));
          item->setToolTip(tr("%1 → %2: %3 (measured %4)").arg(rowNames[r], columns[c], error, when));
        }
      }
      m_table->setItem(r, c, item);
    }
  }
  m_table->setVisible(n > 0);
  if (n == 0)
    m_when->setText(tr("No remote nodes: add nodes to measure the latency between them."));
  else if (newest > 0)
    m_when->setText(tr("Measured %1")
                        .arg(QDateTime::fromSecsSinceEpoch(static_cast<qint64>(newest))
                                 .toString(QStringLiteral("yyyy-MM-dd HH:mm:ss"))));
  else
    m_when->setText(tr("Not measured yet: use Measure latency."));
}

void LatencyView::setBusy(bool busy) {
  m_busy = busy;
  m_measure->setEnabled(!busy);
  m_measure->setText(busy ? tr("Measuring…") : tr("Measure latency"));
}

void LatencyView::setMessage(const QString& text) {
  m_message->setText(text);
  m_message->setVisible(!text.isEmpty());
}

void LatencyView::setMeasureEnabled(bool enabled, const QString& whyNot) {
  m_measure->setEnabled(enabled && !m_busy);
  m_measure->setToolTip(enabled ? m_measureTip : whyNot);
}

QString LatencyView::measuredText() const { return m_when->text(); }
QString LatencyView::messageText() const { return m_message->text(); }

}  // namespace flotilla::ui
