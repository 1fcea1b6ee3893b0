// The stored runs table (see storerunsmodel.h).
#include "ui/runs/storerunsmodel.h"

#include <QDateTime>
#include <QHash>
#include <QLocale>
#include <QSet>

#include <algorithm>

#include "db/run_store.h"
#include "runs/figures.h"
#include "runs/run_speed.h"
#include "runs/run_status.h"
#include "ui/common/numberformat.h"
#include "ui/runs/localrunsmodel.h"
#include "ui/runs/storeservice.h"

namespace flotilla::ui {
namespace {

bool sameRow(const RunRow& a, const RunRow& b) {
  return a.name == b.name && a.status == b.status && a.target == b.target && a.tags == b.tags &&
         a.notes == b.notes && a.parameters == b.parameters && a.layout == b.layout &&
         a.plannedSteps == b.plannedSteps && a.lastStep == b.lastStep && a.loss == b.loss &&
         a.hasLoss == b.hasLoss && a.tokensPerSec == b.tokensPerSec && a.mfu == b.mfu &&
         a.startedAt == b.startedAt && a.endedAt == b.endedAt && a.costUsd == b.costUsd &&
         a.usdPerHour == b.usdPerHour && a.checkpoints == b.checkpoints;
}

QString paramsText(qint64 n) {
  if (n <= 0) return {};
  if (n >= 1000000000) return QStringLiteral("%1B").arg(double(n) / 1e9, 0, 'f', 2);
  if (n >= 1000000) return QStringLiteral("%1M").arg(double(n) / 1e6, 0, 'f', 1);
  return QStringLiteral("%1K").arg(double(n) / 1e3, 0, 'f', 0);
}

}  // namespace

StoreRunsModel::StoreRunsModel(StoreService* store, QObject* parent)
    : QAbstractTableModel(parent), m_store(store) {
  if (m_store) {
    connect(m_store, &StoreService::snapshotReady, this, &StoreRunsModel::setRows);
    setRows(m_store->lastSnapshot());
  }
}

int StoreRunsModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(m_rows.size());
}
int StoreRunsModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : ColumnCount;
}

double StoreRunsModel::runningSeconds(const RunRow& r) const {
  const bool running = r.status == QLatin1String("running");
  return r.runningSeconds + (running && r.readAt > 0 ? std::max(0.0, now() - r.readAt) : 0.0);
}

double StoreRunsModel::now() const {
  return m_now > 0 ? m_now : static_cast<double>(QDateTime::currentMSecsSinceEpoch()) / 1000.0;
}

const RunRow* StoreRunsModel::rowAt(int row) const {
  return row >= 0 && row < m_rows.size() ? &m_rows[row] : nullptr;
}

int StoreRunsModel::rowOfId(qint64 id) const {
  for (int i = 0; i < m_rows.size(); ++i)
    if (m_rows[i].id == id) return i;
  return -1;
}

void StoreRunsModel::setRows(const QVector<RunRow>& rows) {
  // Hash lookups, so a refresh stays linear in the number of runs (it runs on the UI thread).
  QSet<qint64> incoming;
  for (const RunRow& r : rows) incoming.insert(r.id);
  // Removed runs first (from the bottom so indexes stay valid).
  for (int i = static_cast<int>(m_rows.size()) - 1; i >= 0; --i) {
    if (incoming.contains(m_rows[i].id)) continue;
    beginRemoveRows({}, i, i);
    m_rows.removeAt(i);
    endRemoveRows();
  }
  QHash<qint64, int> rowOf;
  const auto reindex = [&] {
    rowOf.clear();
    for (int i = 0; i < m_rows.size(); ++i) rowOf.insert(m_rows[i].id, i);
  };
  reindex();
  // Then updates and insertions, keeping the snapshot's order for new rows.
  for (int i = 0; i < rows.size(); ++i) {
    const auto found = rowOf.constFind(rows[i].id);
    if (found == rowOf.constEnd()) {
      const int pos = std::min(i, static_cast<int>(m_rows.size()));
      beginInsertRows({}, pos, pos);
      m_rows.insert(pos, rows[i]);
      endInsertRows();
      reindex();  // new runs are rare: one per launch
    } else if (const int at = *found;
               !sameRow(m_rows[at], rows[i]) || m_rows[at].status == QLatin1String("running")) {
      m_rows[at] = rows[i];
      emit dataChanged(index(at, 0), index(at, ColumnCount - 1));
    }
  }
}

QVariant StoreRunsModel::display(const RunRow& r, int column) const {
  switch (column) {
    case Name:
      return r.name;
    case Status:
      if (r.parentKind == QLatin1String("fork") && r.status == QLatin1String("created"))
        return tr("created (fork)");
      // The runs layer's words, the same as the Live page, the status bar and the CLI say.
      return QString::fromStdString(
          runs::status_text(db::parse_run_status(r.status.toStdString()), r.statusNote.toStdString()));
    case Target:
      return r.target == QLatin1String("local") ? tr("this machine") : r.target;
    case ModelSize:
      return paramsText(r.parameters);
    case Layout:
      return r.layout;
    case Progress:
      if (r.plannedSteps <= 0) return r.lastStep > 0 ? QString::number(r.lastStep) : QString();
      {
        QString text = QStringLiteral("%1 / %2 (%3%)")
                           .arg(r.lastStep)
                           .arg(r.plannedSteps)
                           .arg(100.0 * double(r.lastStep) / double(r.plannedSteps), 0, 'f', 0);
        // Time left at the pace the run measures now (runs/run_speed.h), running runs only.
        const double left = runs::remaining_seconds(r.plannedSteps, r.lastStep, r.secondsPerStep);
        if (r.status == QLatin1String("running") && left >= 0)
          text += tr(", %1 left").arg(formatDuration(static_cast<qint64>(left * 1000)));
        return text;
      }
    case Loss:
      return r.hasLoss ? formatMetric(r.loss) : QString();
    case TokensPerSec:
      return r.tokensPerSec > 0 ? QLocale().toString(r.tokensPerSec, 'f', 0) : QString();
    case Mfu:
      return r.mfu > 0 ? QStringLiteral("%1%").arg(r.mfu * 100, 0, 'f', 1) : QString();
    case Elapsed:
      // Running time (db/queries.h RunSummary): what the price is charged for, as Compare, Costs and
      // `flotilla runs show` name it.
      if (r.startedAt <= 0) return QString();
      return QString::fromStdString(runs::clock_text(runningSeconds(r)));
    case Cost:
      // A run with no price costs nothing known: "unpriced", as the CLI says, never a $0.00 figure.
      if (r.priceUsdPerHour <= 0 && r.costUsd <= 0) return tr("unpriced");
      // Small budgets need the digits: a cent-a-second run is $0.0201, not $0.02 (runs/figures.h).
      return QString::fromStdString(runs::usd_text(r.costUsd));
    case Tags:
      return r.tags.join(QStringLiteral(", "));
    case Notes:
      return r.notes;
    case Created:
      return r.createdAt > 0 ? QDateTime::fromSecsSinceEpoch(static_cast<qint64>(r.createdAt))
                                   .toString(QStringLiteral("yyyy-MM-dd HH:mm"))
                             : QString();
    default:
      return {};
  }
}

QVariant StoreRunsModel::data(const QModelIndex& index, int role) const {
  if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid)) return {};
  const RunRow& r = m_rows[index.row()];
  switch (role) {
    case Qt::DisplayRole:
      return display(r, index.column());
    case Qt::EditRole:
      if (index.column() == Tags) return r.tags.join(QStringLiteral(", "));
      if (index.column() == Notes) return r.notes;
      return display(r, index.column());
    case Qt::ToolTipRole:
      if (index.column() == Name) return r.runDir;
      if (index.column() == Notes) return r.notes;
      if (index.column() == Status && !r.statusNote.isEmpty())
        return tr("%1 (%2)").arg(r.status, r.statusNote);
      if (index.column() == Cost && r.priceUsdPerHour > 0)
        return tr("$%1/h: %2").arg(r.priceUsdPerHour, 0, 'f', 4).arg(r.priceSource);
      return {};
    case Qt::TextAlignmentRole:
      if (index.column() >= ModelSize && index.column() <= Cost && index.column() != Layout)
        return QVariant::fromValue(Qt::AlignRight | Qt::AlignVCenter);
      return {};
    case IdRole:
      return r.id;
    case StatusRole:
      return r.status;
    case TagsRole:
      return r.tags;
    case CheckpointsRole:
      return r.checkpoints;
    case SortRole:
      switch (index.column()) {
        case ModelSize:
          return r.parameters;
        case Progress:
          return r.lastStep;
        case Loss:
          return r.hasLoss ? r.loss : 1e300;
        case TokensPerSec:
          return r.tokensPerSec;
        case Mfu:
          return r.mfu;
        case Elapsed:
          return runningSeconds(r);
        case Cost:
          return r.costUsd;
        case Name:
          return r.name.toLower();  // the arrow on Name means names in order
        case Created:
          return r.createdAt;
        default:
          return display(r, index.column());
      }
    default:
      return {};
  }
}

QVariant StoreRunsModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
  static const char* const kTitles[ColumnCount] = {"Name",     "Status", "Target",   "Model",  "Layout",
                                                   "Progress", "Loss",   "Tokens/s", "MFU",    "Running time",
                                                   "Cost",     "Tags",   "Notes",    "Created"};
  return section >= 0 && section < ColumnCount ? tr(kTitles[section]) : QVariant();
}

Qt::ItemFlags StoreRunsModel::flags(const QModelIndex& index) const {
  Qt::ItemFlags f = QAbstractTableModel::flags(index);
  if (index.isValid() && m_store && (index.column() == Tags || index.column() == Notes))
    f |= Qt::ItemIsEditable;
  return f;
}

bool StoreRunsModel::setData(const QModelIndex& index, const QVariant& value, int role) {
  if (role != Qt::EditRole || !m_store || !index.isValid()) return false;
  RunRow& r = m_rows[index.row()];
  bool ok = false;
  if (index.column() == Tags) {
    QStringList tags;
    for (const QString& t : value.toString().split(QLatin1Char(','), Qt::SkipEmptyParts))
      if (!t.trimmed().isEmpty()) tags << t.trimmed();
    ok = m_store->setTags(r.id, tags);
    if (ok) r.tags = tags;
  } else if (index.column() == Notes) {
    ok = m_store->setNotes(r.id, value.toString());
    if (ok) r.notes = value.toString();
  }
  if (ok) emit dataChanged(index, index);
  return ok;
}

RunsFilterModel::RunsFilterModel(QObject* parent) : QSortFilterProxyModel(parent) {
  setSortRole(StoreRunsModel::SortRole);
  setFilterCaseSensitivity(Qt::CaseInsensitive);
}

void RunsFilterModel::setStatusFilter(const QString& status) {
  m_status = status;
  invalidateFilter();
}
void RunsFilterModel::setTextFilter(const QString& text) {
  m_text = text.trimmed();
  invalidateFilter();
}
void RunsFilterModel::setTagFilter(const QString& tag) {
  m_tag = tag.trimmed();
  invalidateFilter();
}

bool RunsFilterModel::filterAcceptsRow(int sourceRow, const QModelIndex& sourceParent) const {
  const QAbstractItemModel* m = sourceModel();
  const QModelIndex first = m->index(sourceRow, 0, sourceParent);
  if (!m_status.isEmpty() && m->data(first, StoreRunsModel::StatusRole).toString() != m_status) return false;
  if (!m_tag.isEmpty() &&
      !m->data(first, StoreRunsModel::TagsRole).toStringList().contains(m_tag, Qt::CaseInsensitive))
    return false;
  if (m_text.isEmpty()) return true;
  for (int c : {StoreRunsModel::Name, StoreRunsModel::Target, StoreRunsModel::Notes, StoreRunsModel::Tags})
    if (m->data(m->index(sourceRow, c, sourceParent)).toString().contains(m_text, Qt::CaseInsensitive))
      return true;
  return false;
}

}  // namespace flotilla::ui
