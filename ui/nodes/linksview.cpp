// Link matrix widget (see linksview.h).
#include "ui/nodes/linksview.h"

#include <QDateTime>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPushButton>
#include <QTableWidget>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "runs/comm_efficiency.h"
#include "ui/plot/linkheatmap.h"

namespace flotilla::ui {
namespace {

QString when(double t) {
  return QDateTime::fromSecsSinceEpoch(static_cast<qint64>(t))
      .toString(QStringLiteral("yyyy-MM-dd HH:mm:ss"));
}

QString rate(double bytesPerS) { return QString::fromStdString(runs::rate_text(bytesPerS)); }

}  // namespace

LinkMatrix makeLinkMatrix(const db::LinkMeasurement& m, const std::map<int64_t, std::string>& names,
                          std::optional<runs::SlowestLink> slowest) {
  LinkMatrix out;
  out.id = m.id;
  out.measuredAt = m.measured_at;
  out.seconds = m.seconds;
  out.transport = QString::fromStdString(m.transport);
  out.note = QString::fromStdString(m.note);
  out.slowest = std::move(slowest);
  std::set<int64_t> ids;
  for (const db::NodeLink& l : m.links) {
    ids.insert(l.from_node);
    ids.insert(l.to_node);
  }
  const std::vector<int64_t> order(ids.begin(), ids.end());
  for (int64_t id : order) {
    const auto it = names.find(id);
    out.nodes << (it != names.end() ? QString::fromStdString(it->second) : QStringLiteral("node %1").arg(id));
  }
  const qsizetype n = out.nodes.size();
  out.cells.resize(n * n);
  auto index = [&](int64_t id) {
    return std::distance(order.begin(), std::find(order.begin(), order.end(), id));
  };
  for (const db::NodeLink& l : m.links) {
    LinkCell& c = out.cells[index(l.from_node) * n + index(l.to_node)];
    c.present = true;
    c.latencySeconds = l.latency_s;
    c.bytesPerSecond = l.bytes_per_s;
    c.error = QString::fromStdString(l.error);
  }
  return out;
}

QString LinksView::latencyText(double s) {
  if (s < 1e-3) return QStringLiteral("%1 µs").arg(std::lround(s * 1e6));
  if (s < 1) return QStringLiteral("%1 ms").arg(s * 1e3, 0, 'f', 2);
  return QStringLiteral("%1 s").arg(s, 0, 'f', 2);
}

LinksView::LinksView(QWidget* parent)
    : QWidget(parent),
      m_table(new QTableWidget(this)),
      m_heat(new LinkHeatMap(this)),
      m_slowest(new QLabel(this)),
      m_when(new QLabel(this)),
      m_note(new QLabel(this)),
      m_message(new QLabel(this)),
      m_measure(new QPushButton(tr("Measure links"), this)) {
  setObjectName(QStringLiteral("linksView"));
  m_table->setObjectName(QStringLiteral("linkMatrix"));
  m_measure->setObjectName(QStringLiteral("measureLinksButton"));
  m_measureTip =
      tr("Measures latency and bandwidth between the nodes (the selected ones, or all) over the "
         "transport runs use (Gloo TCP, NCCL where GPUs are): the worker is deployed and started on "
         "every node as one process group, one pair at a time. Stored; runs judge their "
         "communication against it.");
  m_measure->setToolTip(m_measureTip);
  m_slowest->setObjectName(QStringLiteral("linksSlowest"));
  m_slowest->setTextInteractionFlags(Qt::TextSelectableByMouse);
  QFont bold = m_slowest->font();
  bold.setWeight(QFont::DemiBold);
  m_slowest->setFont(bold);
  m_when->setObjectName(QStringLiteral("linksMeasured"));
  m_when->setForegroundRole(QPalette::PlaceholderText);
  m_note->setObjectName(QStringLiteral("linksNote"));
  m_note->setWordWrap(true);
  m_note->setTextInteractionFlags(Qt::TextSelectableByMouse);
  m_message->setObjectName(QStringLiteral("linksMessage"));
  m_message->setWordWrap(true);
  m_message->setTextInteractionFlags(Qt::TextSelectableByMouse);
  m_table->setEditTriggers(QAbstractItemView::NoEditTriggers);
  m_table->setSelectionMode(QAbstractItemView::NoSelection);
  m_table->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  m_table->horizontalHeader()->setMinimumSectionSize(120);
  m_table->verticalHeader()->setSectionResizeMode(QHeaderView::Fixed);
  m_table->verticalHeader()->setDefaultSectionSize(26);
  m_table->setSizeAdjustPolicy(QAbstractScrollArea::AdjustToContents);
  m_table->setSizePolicy(QSizePolicy::Maximum, QSizePolicy::Maximum);
  m_table->setMaximumHeight(26 * 9 + 4);
  m_table->setAlternatingRowColors(true);
  m_heat->setFixedSize(360, 240);

  auto* title = new QLabel(tr("<b>Links</b> (the transport runs use: bandwidth of large messages, one-way "
                              "latency; rows: from, columns: to, the diagonal within the node)"),
                           this);
  title->setWordWrap(true);
  auto* top = new QHBoxLayout;
  top->addWidget(title, 1);
  top->addWidget(m_measure);
  auto* row = new QHBoxLayout;
  row->addWidget(m_table, 0, Qt::AlignLeft | Qt::AlignTop);
  row->addWidget(m_heat, 0, Qt::AlignTop);
  row->addStretch(1);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addLayout(top);
  layout->addWidget(m_slowest);
  layout->addLayout(row);
  layout->addWidget(m_when);
  layout->addWidget(m_note);
  layout->addWidget(m_message);
  connect(m_measure, &QPushButton::clicked, this, &LinksView::measureRequested);
  setMatrix({});
  setMessage({});
}

void LinksView::setMatrix(const LinkMatrix& m) {
  const int n = static_cast<int>(m.nodes.size());
  m_table->clear();
  m_table->setRowCount(n);
  m_table->setColumnCount(n);
  m_table->setHorizontalHeaderLabels(m.nodes);
  m_table->setVerticalHeaderLabels(m.nodes);
  QVector<double> heat(static_cast<qsizetype>(n) * n, std::numeric_limits<double>::quiet_NaN());
  for (int r = 0; r < n; ++r) {
    for (int c = 0; c < n; ++c) {
      const LinkCell& cell = m.cells[r * n + c];
      auto* item = new QTableWidgetItem;
      item->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
      const QString pair =
          r == c ? tr("within %1").arg(m.nodes[r]) : tr("%1 → %2").arg(m.nodes[r], m.nodes[c]);
      if (!cell.present) {
        item->setText(QStringLiteral("–"));
        item->setForeground(palette().color(QPalette::PlaceholderText));
        item->setToolTip(r == c ? tr("%1: not measured (one rank per node)").arg(pair)
                                : tr("%1: not measured").arg(pair));
      } else if (cell.bytesPerSecond) {
        item->setText(QStringLiteral("%1 · %2").arg(
            rate(*cell.bytesPerSecond),
            cell.latencySeconds ? latencyText(*cell.latencySeconds) : QStringLiteral("–")));
        item->setToolTip(
            tr("%1: %2 large-message bandwidth, %3 one-way latency")
                .arg(pair, rate(*cell.bytesPerSecond),
                     cell.latencySeconds ? latencyText(*cell.latencySeconds) : QStringLiteral("–")));
        heat[r * n + c] = *cell.bytesPerSecond;
      } else {
        item->setText(cell.error.section(QLatin1Char(':'), 0, 0).left(22));
        item->setForeground(QColor(0xc6, 0x28, 0x28));
        item->setToolTip(tr("%1: %2").arg(pair, cell.error));
      }
      m_table->setItem(r, c, item);
    }
  }
  m_heat->setLinks(m.nodes, heat);
  m_table->setVisible(n > 0);
  m_heat->setVisible(n > 0);
  if (m.slowest) {
    const runs::SlowestLink& s = *m.slowest;
    const QString where = s.from == s.to ? tr("within %1").arg(QString::fromStdString(s.from))
                                         : QStringLiteral("%1 → %2").arg(QString::fromStdString(s.from),
                                                                         QString::fromStdString(s.to));
    m_slowest->setText(
        tr("Slowest link: %1, %2 (%3 latency)").arg(where, rate(s.bytes_per_s), latencyText(s.latency_s)));
  } else {
    m_slowest->setText(n > 0 ? tr("No link was measured: see the problems below.") : QString());
  }
  m_slowest->setVisible(!m_slowest->text().isEmpty());
  if (n == 0)
    m_when->setText(tr("No links measured yet: use Measure links (or flotilla nodes links a,b)."));
  else
    m_when->setText(
        tr("Measured %1 over %2 in %3 s").arg(when(m.measuredAt), m.transport).arg(m.seconds, 0, 'f', 1));
  m_note->setText(m.note.isEmpty() ? QString() : tr("Problems: %1").arg(m.note));
  m_note->setVisible(!m.note.isEmpty());
}

void LinksView::setBusy(bool busy) {
  m_busy = busy;
  m_measure->setEnabled(!busy);
  m_measure->setText(busy ? tr("Measuring…") : tr("Measure links"));
}

void LinksView::setMessage(const QString& text) {
  m_message->setText(text);
  m_message->setVisible(!text.isEmpty());
}

void LinksView::setMeasureEnabled(bool enabled, const QString& whyNot) {
  m_measure->setEnabled(enabled && !m_busy);
  m_measure->setToolTip(enabled ? m_measureTip : whyNot);
}

QString LinksView::slowestText() const { return m_slowest->text(); }
QString LinksView::measuredText() const { return m_when->text(); }
QString LinksView::noteText() const { return m_note->text(); }
QString LinksView::messageText() const { return m_message->text(); }

}  // namespace flotilla::ui
