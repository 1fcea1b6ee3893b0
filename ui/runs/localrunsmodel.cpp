// Runs table model (see localrunsmodel.h).
#include "ui/runs/localrunsmodel.h"

#include <QLocale>
#include <QTimer>

#include <cmath>

#include "ui/common/numberformat.h"
#include "ui/runs/localruns.h"
#include "ui/runs/servicerun.h"

namespace flotilla::ui {

QString formatDuration(qint64 ms) {
  const qint64 s = ms / 1000;
  const qint64 h = s / 3600, m = (s / 60) % 60, sec = s % 60;
  if (h > 0)
    return QStringLiteral("%1:%2:%3")
        .arg(h)
        .arg(m, 2, 10, QLatin1Char('0'))
        .arg(sec, 2, 10, QLatin1Char('0'));
  return QStringLiteral("%1:%2").arg(m).arg(sec, 2, 10, QLatin1Char('0'));
}

LocalRunsModel::LocalRunsModel(LocalRuns* runs, QObject* parent)
    : QAbstractTableModel(parent), m_runs(runs), m_rows(runs->count()), m_elapsedTimer(new QTimer(this)) {
  connect(m_runs, &LocalRuns::runAdded, this, [this] {
    const int n = m_runs->count();
    if (n <= m_rows) return;
    beginInsertRows({}, m_rows, n - 1);
    m_rows = n;
    endInsertRows();
  });
  connect(m_runs, &LocalRuns::runChanged, this, [this](int row) {
    if (row < 0 || row >= m_rows) return;
    emit dataChanged(index(row, 0), index(row, ColumnCount - 1));
  });
  // The elapsed column moves with the clock, not with records.
  m_elapsedTimer->setInterval(1000);
  connect(m_elapsedTimer, &QTimer::timeout, this, &LocalRunsModel::tickElapsed);
  m_elapsedTimer->start();
}

int LocalRunsModel::rowCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : m_rows; }
int LocalRunsModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : ColumnCount;
}

ServiceRun* LocalRunsModel::runAt(int row) const {
  return row >= 0 && row < m_rows ? m_runs->at(row) : nullptr;
}

QVariant LocalRunsModel::data(const QModelIndex& index, int role) const {
  if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid)) return {};
  const ServiceRun* run = runAt(index.row());
  if (!run) return {};
  switch (role) {
    case Qt::DisplayRole:
      return display(run, index.column());
    case Qt::ToolTipRole:
      if (index.column() == Status && !run->errorText().isEmpty()) return run->errorText();
      return run->runDir();
    case Qt::TextAlignmentRole:
      return index.column() >= Progress ? QVariant(int(Qt::AlignRight | Qt::AlignVCenter))
                                        : QVariant(int(Qt::AlignLeft | Qt::AlignVCenter));
    case RunRole:
      return QVariant::fromValue(static_cast<QObject*>(const_cast<ServiceRun*>(run)));
    default:
      return {};
  }
}

QVariant LocalRunsModel::display(const ServiceRun* run, int column) const {
  const QLocale locale;
  switch (column) {
    case Name:
      return run->name();
    case Status:
      return run->stateText();
    case Progress:
      return run->plannedSteps() > 0 ? tr("%1 / %2").arg(run->lastStep()).arg(run->plannedSteps())
                                     : QString::number(run->lastStep());
    case Loss:
      return std::isnan(run->lastLoss()) ? QString() : formatMetric(run->lastLoss());
    case ValLoss:
      return std::isnan(run->lastValLoss()) ? QString() : formatMetric(run->lastValLoss());
    case TokensPerSec:
      return run->tokensPerSec() > 0 ? locale.toString(run->tokensPerSec(), 'f', 0) : QString();
    case Elapsed:
      return formatDuration(run->elapsedMs());
    default:
      return {};
  }
}

QVariant LocalRunsModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole)
    return QAbstractTableModel::headerData(section, orientation, role);
  switch (section) {
    case Name:
      return tr("Run");
    case Status:
      return tr("Status");
    case Progress:
      return tr("Step");
    case Loss:
      return tr("Loss");
    case ValLoss:
      return tr("Val. loss");
    case TokensPerSec:
      return tr("Tokens/s");
    case Elapsed:
      return tr("Elapsed");
    default:
      return {};
  }
}

void LocalRunsModel::tickElapsed() {
  for (int row = 0; row < m_rows; ++row)
    if (m_runs->at(row)->isActive())
      emit dataChanged(index(row, Elapsed), index(row, Elapsed), {Qt::DisplayRole});
}

}  // namespace flotilla::ui
