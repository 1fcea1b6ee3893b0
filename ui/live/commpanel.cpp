// The Live page's Communication panel (see commpanel.h).
#include "ui/live/commpanel.h"

#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QListWidget>
#include <QStyle>
#include <QTableWidget>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>

#include <cmath>
#include <exception>
#include <iterator>
#include <set>

#include "ui/plot/chartplot.h"

namespace flotilla::ui {
namespace {

QString percent(const std::optional<double>& share) {
  return share ? QStringLiteral("%1%").arg(std::lround(*share * 100)) : QStringLiteral("–");
}

QString rate(const std::optional<double>& bytesPerS) {
  return bytesPerS ? QString::fromStdString(runs::rate_text(*bytesPerS)) : QStringLiteral("–");
}

// "12.4 MB/s (a -> b)", "2.00 GB/s (a, intra-node)", or "–" with the reason in the tooltip.
QString linkText(const runs::LinkCapacity& link) {
  if (!link.bytes_per_s) return QStringLiteral("–");
  const QString where = link.from == link.to
                            ? QObject::tr("%1, intra-node").arg(QString::fromStdString(link.from))
                            : QStringLiteral("%1 -> %2")
                                  .arg(QString::fromStdString(link.from), QString::fromStdString(link.to));
  return QStringLiteral("%1 (%2)").arg(rate(link.bytes_per_s), where);
}

QString opName(const std::string& op) {
  QString s = QString::fromStdString(op);
  s.replace(QLatin1Char('_'), QLatin1Char('-'));
  return s;
}

const QColor kGroupColors[] = {QColor(0x1f, 0x77, 0xb4), QColor(0xd6, 0x27, 0x28), QColor(0x2c, 0xa0, 0x2c),
                               QColor(0x94, 0x67, 0xbd), QColor(0x8c, 0x56, 0x4b)};

}  // namespace

CommSnapshot readCommSnapshot(const QString& databasePath, qint64 runId, const CommAdviceSource& advice) {
  CommSnapshot out;
  out.runId = runId;
  try {
    db::OpenOptions options;
    options.create = false;
    options.quick_check = false;
    const db::Database db(databasePath.toStdString(), options);
    out.report = runs::comm_report(db, runId);
    for (const runs::GroupEfficiency& g : out.report.groups)
      out.series[g.group] = runs::comm_series(db, runId, g.group);
    if (advice && !out.report.empty()) {
      out.advice = advice(db, runId);
      out.adviceRead = true;
    }
  } catch (const std::exception& e) {
    out.error = QString::fromUtf8(e.what());
  }
  return out;
}

CommPanel::CommPanel(QWidget* parent)
    : QWidget(parent),
      m_summary(new QLabel(this)),
      m_table(new QTableWidget(this)),
      m_plotHolder(new QWidget(this)),
      m_adviceTitle(new QLabel(tr("Advice"), this)),
      m_advice(new QListWidget(this)) {
  setObjectName(QStringLiteral("commPanel"));
  m_summary->setObjectName(QStringLiteral("commSummary"));
  m_summary->setWordWrap(true);
  m_summary->setTextInteractionFlags(Qt::TextSelectableByMouse);

  m_table->setObjectName(QStringLiteral("commTable"));
  const QStringList headers = {tr("Group"),  tr("Op"),   tr("MB/step"), tr("ms/step"),
                               tr("Bus bw"), tr("Link"), tr("Share"),   tr("Hidden")};
  m_table->setColumnCount(static_cast<int>(headers.size()));
  m_table->setHorizontalHeaderLabels(headers);
  m_table->horizontalHeaderItem(4)->setToolTip(
      tr("Bus bandwidth as nccl-tests defines it: comparable with one link's point-to-point bandwidth"));
  m_table->horizontalHeaderItem(5)->setToolTip(tr("The slowest link the group crosses (measured)"));
  m_table->horizontalHeaderItem(6)->setToolTip(tr("Bus bandwidth / the link's bandwidth"));
  m_table->horizontalHeaderItem(7)->setToolTip(
      tr("The part of the communication that ran while compute went on (1 - blocked / busy)"));
  m_table->verticalHeader()->hide();
  m_table->setEditTriggers(QAbstractItemView::NoEditTriggers);
  m_table->setSelectionBehavior(QAbstractItemView::SelectRows);
  m_table->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  m_table->horizontalHeader()->setSectionResizeMode(5, QHeaderView::Stretch);  // the link's name

  auto* plotLayout = new QVBoxLayout(m_plotHolder);
  plotLayout->setContentsMargins(0, 0, 0, 0);
  m_points.column(QStringLiteral("step"));
  rebuildPlot({});

  m_adviceTitle->setObjectName(QStringLiteral("commAdviceTitle"));
  QFont bold = m_adviceTitle->font();
  bold.setWeight(QFont::DemiBold);
  m_adviceTitle->setFont(bold);
  m_advice->setObjectName(QStringLiteral("commAdvice"));
  m_advice->setWordWrap(true);
  m_advice->setMaximumHeight(110);
  m_adviceTitle->hide();
  m_advice->hide();

  auto* right = new QVBoxLayout;
  right->addWidget(m_table, 1);
  right->addWidget(m_adviceTitle);
  right->addWidget(m_advice);
  auto* row = new QHBoxLayout;
  row->setContentsMargins(0, 0, 0, 0);
  row->addWidget(m_plotHolder, 2);
  row->addLayout(right, 3);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->setSpacing(4);
  layout->addWidget(m_summary);
  layout->addLayout(row, 1);

  connect(&m_watcher, &QFutureWatcher<CommSnapshot>::finished, this, &CommPanel::finished);
  follow(0);
}

CommPanel::~CommPanel() { m_watcher.waitForFinished(); }

void CommPanel::rebuildPlot(const QStringList& groups) {
  if (m_plot && groups == m_plotGroups) return;
  delete m_plot;
  m_plotGroups = groups;
  m_plot = new ChartPlot(QStringLiteral("commPlot"), tr("Communication: share of link, hidden"), tr("%"),
                         m_plotHolder);
  m_plot->setTable(&m_points);
  m_plot->setYFromZero(true);
  m_plot->setMessage(tr("No communication recorded yet"));
  int i = 0;
  for (const QString& g : groups) {
    const QColor c = kGroupColors[i++ % std::size(kGroupColors)];
    m_plot->addSeries(
        {g + QStringLiteral(" share"), tr("%1 share of link").arg(g), c, ChartPlot::Style::Line, false, {}});
    m_plot->addSeries({g + QStringLiteral(" hidden"),
                       tr("%1 hidden").arg(g),
                       c.darker(170),
                       ChartPlot::Style::Line,
                       false,
                       {}});
  }
  m_plotHolder->layout()->addWidget(m_plot);
}

void CommPanel::follow(qint64 runId) {
  m_runId = runId;
  ++m_generation;
  m_hasData = false;
  m_summary->clear();
  m_table->setRowCount(0);
  m_advice->clear();
  m_adviceTitle->hide();
  m_advice->hide();
  m_points.clear();
  m_points.column(QStringLiteral("step"));
  rebuildPlot({});
  m_plot->refresh();
  emit updated();
}

bool CommPanel::poll() {
  if (m_busy || m_runId <= 0 || m_path.isEmpty()) return false;
  m_busy = true;
  const quint64 generation = m_generation;
  m_watcher.setFuture(QtConcurrent::run([path = m_path, id = m_runId, advice = m_adviceSource, generation] {
    CommSnapshot s = readCommSnapshot(path, id, advice);
    s.generation = generation;
    return s;
  }));
  return true;
}

void CommPanel::finished() {
  m_busy = false;
  CommSnapshot s = m_watcher.result();
  if (s.generation != m_generation) {  // read for a run no longer followed: read for this one
    poll();
    return;
  }
  if (!s.error.isEmpty()) return;  // keep what is shown; the next poll tries again
  apply(s);
}

void CommPanel::apply(const CommSnapshot& s) {
  const runs::CommReport& r = s.report;
  m_hasData = !r.empty();
  if (r.empty()) {
    m_summary->setText(QString::fromStdString(r.note));
  } else {
    QString text = tr("Communication at step %1 (mean per step since the previous record; step %2 ms).")
                       .arg(r.step)
                       .arg(r.step_ms, 0, 'f', 1);
    // Why a group has no share: no link measured between its nodes (the command that measures it).
    for (const runs::GroupEfficiency& g : r.groups)
      if (!g.link.bytes_per_s)
        text += QStringLiteral("\n") +
                tr("%1: %2").arg(QString::fromStdString(g.group), QString::fromStdString(g.link.source));
    m_summary->setText(text);
  }

  // The table: one row per group (all its ops) then one per op.
  m_table->setRowCount(0);
  auto addRow = [this](const QStringList& cells, bool group, const QString& linkTip) {
    const int row = m_table->rowCount();
    m_table->insertRow(row);
    for (int c = 0; c < cells.size(); ++c) {
      auto* item = new QTableWidgetItem(cells[c]);
      if (c >= 2 && c != 5) item->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
      if (group) {
        QFont f = item->font();
        f.setWeight(QFont::DemiBold);
        item->setFont(f);
      }
      if (c == 5) item->setToolTip(linkTip);
      m_table->setItem(row, c, item);
    }
  };
  for (const runs::GroupEfficiency& g : r.groups) {
    const QString name = QString::fromStdString(g.group);
    const QString link = linkText(g.link);
    const QString tip = QString::fromStdString(g.link.source);
    addRow({tr("%1 (%2 ranks)").arg(name).arg(g.size), tr("all"), QString::number(g.bytes / 1e6, 'f', 2),
            QString::number(g.ms, 'f', 1), rate(g.busbw), link, percent(g.share), percent(g.hidden)},
           true, tip);
    for (const runs::OpEfficiency& op : g.ops)
      addRow({QString(), opName(op.op), QString::number(op.bytes / 1e6, 'f', 2),
              QString::number(op.ms, 'f', 1), rate(op.busbw), QString(), percent(op.share), QString()},
             false, tip);
  }

  // The plot: per comm record, each group's share of its link and its hidden share, in per cent.
  QStringList groups;
  for (const runs::GroupEfficiency& g : r.groups) groups << QString::fromStdString(g.group);
  rebuildPlot(groups);
  m_points.clear();
  const int stepCol = m_points.column(QStringLiteral("step"));
  std::set<int64_t> steps;
  for (const auto& [group, points] : s.series)
    for (const runs::CommPoint& p : points) steps.insert(p.step);
  for (int64_t step : steps) {
    m_points.beginRow();
    m_points.set(stepCol, static_cast<double>(step));
    for (const auto& [group, points] : s.series) {
      const QString g = QString::fromStdString(group);
      for (const runs::CommPoint& p : points) {
        if (p.step != step) continue;
        if (p.share) m_points.set(g + QStringLiteral(" share"), *p.share * 100);
        if (p.hidden) m_points.set(g + QStringLiteral(" hidden"), *p.hidden * 100);
      }
    }
  }
  m_plot->setMessage(m_points.rows() > 0 ? QString() : tr("No communication recorded yet"));
  m_plot->refresh();

  // The advice, each with the change to try.
  m_advice->clear();
  for (const runs::Advice& a : s.advice) {
    QString text = QString::fromStdString(a.text);
    if (!a.change.empty())
      text += QStringLiteral("\n") + tr("Try: --set %1").arg(QString::fromStdString(a.change));
    auto* item = new QListWidgetItem(text, m_advice);
    item->setIcon(style()->standardIcon(a.severity == "warning" ? QStyle::SP_MessageBoxWarning
                                                                : QStyle::SP_MessageBoxInformation));
    item->setToolTip(QString::fromStdString(a.rule));
  }
  if (s.adviceRead && s.advice.empty() && m_hasData)
    new QListWidgetItem(tr("No advice: no rule found a problem in this run's communication."), m_advice);
  m_adviceTitle->setVisible(s.adviceRead && m_hasData);
  m_advice->setVisible(s.adviceRead && m_hasData);
  emit updated();
}

QString CommPanel::summaryText() const { return m_summary->text(); }

QString CommPanel::tableText() const {
  QStringList lines;
  for (int r = 0; r < m_table->rowCount(); ++r) {
    QStringList cells;
    for (int c = 0; c < m_table->columnCount(); ++c)
      cells << (m_table->item(r, c) ? m_table->item(r, c)->text() : QString());
    lines << cells.join(QStringLiteral(" | "));
  }
  return lines.join(QLatin1Char('\n'));
}

}  // namespace flotilla::ui
