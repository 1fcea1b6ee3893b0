// Costs tables (see costmodels.h).
#include "ui/costs/costmodels.h"

#include <QBrush>
#include <QColor>

#include "runs/figures.h"

namespace flotilla::ui {
namespace {

bool valid(const QAbstractItemModel* m, const QModelIndex& index) {
  return m->checkIndex(index, QAbstractItemModel::CheckIndexOption::IndexIsValid |
                                  QAbstractItemModel::CheckIndexOption::ParentIsInvalid);
}

const QVariant kRight = QVariant(Qt::AlignRight | Qt::AlignVCenter);

// Money as every page and `flotilla` write it (runs/figures.h).
QString money(double usd) { return QString::fromStdString(runs::usd_text(usd)); }

// A number from an edited cell: "12.5", "$12.5" or "" (nullopt). ok=false for anything else.
std::optional<double> parseMoney(const QVariant& value, bool* ok) {
  QString text = value.toString().trimmed();
  if (text.startsWith(QLatin1Char('$'))) text.remove(0, 1);
  *ok = true;
  if (text.isEmpty()) return std::nullopt;
  const double v = text.toDouble(ok);
  if (!*ok || v < 0) {
    *ok = false;
    return std::nullopt;
  }
  return v;
}

}  // namespace

// Spend lines ------------------------------------------------------------------------------------

CostLinesModel::CostLinesModel(const QString& keyTitle, QObject* parent)
    : QAbstractTableModel(parent), m_keyTitle(keyTitle) {}

void CostLinesModel::setLines(std::vector<db::CostLine> lines) {
  beginResetModel();
  m_lines = std::move(lines);
  endResetModel();
}

int CostLinesModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(m_lines.size());
}
int CostLinesModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : ColumnCount;
}

QVariant CostLinesModel::data(const QModelIndex& index, int role) const {
  if (!valid(this, index)) return {};
  if (role == Qt::TextAlignmentRole) return index.column() == Key ? QVariant() : kRight;
  if (role != Qt::DisplayRole) return {};
  const db::CostLine& l = m_lines[static_cast<size_t>(index.row())];
  switch (index.column()) {
    case Key:
      return QString::fromStdString(l.key);
    // Figures as `flotilla costs` prints them: "unpriced" where no time had a price, never $0.00.
    case Usd:
      return QString::fromStdString(runs::usd_text(l.priced ? std::optional<double>(l.usd) : std::nullopt));
    case GpuHours:
      return QString::fromStdString(runs::device_hours_text(l.gpu_hours, l.unit));
    case Hours:
      return QString::fromStdString(runs::clock_text(l.running_s));
    default:
      return {};
  }
}

QVariant CostLinesModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation == Qt::Horizontal && role == Qt::ToolTipRole) {
    if (section == Hours)
      return tr("How long it was running (overlapping nodes count once): the price per hour is charged for this "
                "time");
    if (section == GpuHours) return tr("Running time x devices: GPU-h for GPU runs, CPU-h for CPU runs");
    return {};
  }
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
  switch (section) {
    case Key:
      return m_keyTitle;
    case Usd:
      return tr("Spend");
    case GpuHours:
      return tr("Device-h");
    case Hours:
      return tr("Running time");
    default:
      return {};
  }
}

// Pricing catalogue ------------------------------------------------------------------------------

PricingModel::PricingModel(QObject* parent) : QAbstractTableModel(parent) {}

void PricingModel::setPrices(std::vector<db::PriceEntry> prices) {
  beginResetModel();
  m_prices = std::move(prices);
  endResetModel();
}

int PricingModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(m_prices.size());
}
int PricingModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : ColumnCount; }

QVariant PricingModel::data(const QModelIndex& index, int role) const {
  if (!valid(this, index)) return {};
  const db::PriceEntry& p = m_prices[static_cast<size_t>(index.row())];
  if (role == PriceIdRole) return QVariant::fromValue<qint64>(p.id);
  if (role == Qt::TextAlignmentRole)
    return index.column() == Gpus || index.column() == OnDemand || index.column() == Spot ? kRight
                                                                                          : QVariant();
  if (role == Qt::ToolTipRole) return QString::fromStdString(p.source);
  if (role != Qt::DisplayRole && role != Qt::EditRole) return {};
  const bool edit = role == Qt::EditRole;
  switch (index.column()) {
    case Provider:
      return QString::fromStdString(p.provider);
    case Item:
      return QString::fromStdString(p.item);
    case GpuType:
      return QString::fromStdString(p.gpu_type);
    case Gpus:
      return QVariant::fromValue<qint64>(p.gpus);
    case OnDemand:
      return edit ? QVariant(p.on_demand_usd_per_hour) : QVariant(money(p.on_demand_usd_per_hour));
    case Spot:
      if (!p.spot_usd_per_hour) return QString();
      return edit ? QVariant(*p.spot_usd_per_hour) : QVariant(money(*p.spot_usd_per_hour));
    case AsOf:
      return QString::fromStdString(p.as_of);
    case Edited:
      return p.user_edited ? tr("yes") : QString();
    default:
      return {};
  }
}

QVariant PricingModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
  switch (section) {
    case Provider:
      return tr("Provider");
    case Item:
      return tr("Instance");
    case GpuType:
      return tr("GPU");
    case Gpus:
      return tr("GPUs");
    case OnDemand:
      return tr("On-demand $/h");
    case Spot:
      return tr("Spot $/h");
    case AsOf:
      return tr("As of");
    case Edited:
      return tr("Edited");
    default:
      return {};
  }
}

Qt::ItemFlags PricingModel::flags(const QModelIndex& index) const {
  if (!index.isValid()) return Qt::NoItemFlags;
  Qt::ItemFlags f = Qt::ItemIsEnabled | Qt::ItemIsSelectable;
  if (index.column() == OnDemand || index.column() == Spot || index.column() == GpuType ||
      index.column() == Gpus)
    f |= Qt::ItemIsEditable;
  return f;
}

bool PricingModel::setData(const QModelIndex& index, const QVariant& value, int role) {
  if (role != Qt::EditRole || !valid(this, index) || !(flags(index) & Qt::ItemIsEditable)) return false;
  db::PriceEntry p = m_prices[static_cast<size_t>(index.row())];
  bool ok = true;
  switch (index.column()) {
    case OnDemand: {
      const auto v = parseMoney(value, &ok);
      if (!ok || !v) return false;  // on-demand is required
      p.on_demand_usd_per_hour = *v;
      break;
    }
    case Spot: {
      const auto v = parseMoney(value, &ok);
      if (!ok) return false;
      p.spot_usd_per_hour = v;
      break;
    }
    case GpuType:
      p.gpu_type = value.toString().trimmed().toStdString();
      break;
    case Gpus: {
      const qint64 n = value.toLongLong(&ok);
      if (!ok || n < 1) return false;
      p.gpus = n;
      break;
    }
    default:
      return false;
  }
  p.user_edited = true;
  m_prices[static_cast<size_t>(index.row())] = p;
  emit dataChanged(this->index(index.row(), 0), this->index(index.row(), ColumnCount - 1));
  emit priceEdited(p);
  return true;
}

// Budgets ----------------------------------------------------------------------------------------

BudgetModel::BudgetModel(QObject* parent) : QAbstractTableModel(parent) {}

void BudgetModel::setBudgets(std::vector<BudgetLine> budgets) {
  beginResetModel();
  m_lines = std::move(budgets);
  endResetModel();
}

int BudgetModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(m_lines.size());
}
int BudgetModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : ColumnCount; }

QVariant BudgetModel::data(const QModelIndex& index, int role) const {
  if (!valid(this, index)) return {};
  const BudgetLine& b = m_lines[static_cast<size_t>(index.row())];
  if (role == Qt::TextAlignmentRole) return index.column() <= Status ? QVariant() : kRight;
  if (role == Qt::ForegroundRole && index.column() == Projected && b.capUsd && b.projectedUsd > *b.capUsd)
    return QBrush(QColor(0xd6, 0x3a, 0x3a));  // projected over the cap
  if (role != Qt::DisplayRole && role != Qt::EditRole) return {};
  const bool edit = role == Qt::EditRole;
  switch (index.column()) {
    case Run:
      return QString::fromStdString(b.name);
    case Status:
      return QString::fromStdString(b.status);
    case Spent:
      return m_prefs.formatCost(b.priced ? std::optional<double>(b.spentUsd) : std::nullopt);
    case Projected:
      return m_prefs.formatCost(b.priced ? std::optional<double>(b.projectedUsd) : std::nullopt);
    case Cap:
      if (!b.capUsd) return edit ? QVariant(QString()) : QVariant(tr("no cap"));
      return edit ? QVariant(*b.capUsd) : QVariant(m_prefs.formatMoney(*b.capUsd));
    case WarnAt:
      return edit ? QVariant(b.warnFraction * 100)
                  : QVariant(QStringLiteral("%1%").arg(b.warnFraction * 100, 0, 'f', 0));
    default:
      return {};
  }
}

QVariant BudgetModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
  switch (section) {
    case Run:
      return tr("Run");
    case Status:
      return tr("Status");
    case Spent:
      return tr("Spent");
    case Projected:
      return tr("Projected total");
    case Cap:
      return tr("Max spend");
    case WarnAt:
      return tr("Warn at");
    default:
      return {};
  }
}

Qt::ItemFlags BudgetModel::flags(const QModelIndex& index) const {
  if (!index.isValid()) return Qt::NoItemFlags;
  Qt::ItemFlags f = Qt::ItemIsEnabled | Qt::ItemIsSelectable;
  if (index.column() == Cap || index.column() == WarnAt) f |= Qt::ItemIsEditable;
  return f;
}

bool BudgetModel::setData(const QModelIndex& index, const QVariant& value, int role) {
  if (role != Qt::EditRole || !valid(this, index) || !(flags(index) & Qt::ItemIsEditable)) return false;
  BudgetLine& b = m_lines[static_cast<size_t>(index.row())];
  bool ok = true;
  if (index.column() == Cap) {
    auto v = parseMoney(value, &ok);
    if (!ok) return false;
    if (v && *v == 0) v.reset();
    b.capUsd = v;
  } else {
    QString text = value.toString().trimmed();
    if (text.endsWith(QLatin1Char('%'))) text.chop(1);
    const double pct = text.toDouble(&ok);
    if (!ok || pct < 1 || pct > 100) return false;
    b.warnFraction = pct / 100.0;
  }
  emit dataChanged(this->index(index.row(), 0), this->index(index.row(), ColumnCount - 1));
  emit budgetEdited(b.runId, b.capUsd, b.warnFraction);
  return true;
}

}  // namespace flotilla::ui
