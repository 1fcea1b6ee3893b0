// Compare tables (see comparemodels.h).
#include "ui/compare/comparemodels.h"

#include <QFont>
#include <QPalette>

#include "db/costs.h"
#include "runs/figures.h"
#include "ui/common/numberformat.h"

namespace flotilla::ui {
namespace {

QString opt(const std::optional<double>& v, int decimals) {
  return v ? QString::number(*v, 'f', decimals) : QString();
}

bool valid(const QAbstractItemModel* m, const QModelIndex& index) {
  return m->checkIndex(index, QAbstractItemModel::CheckIndexOption::IndexIsValid |
                                  QAbstractItemModel::CheckIndexOption::ParentIsInvalid);
}

const QVariant kRight = QVariant(Qt::AlignRight | Qt::AlignVCenter);

// What the two durations mean (db/queries.h RunSummary), for their column headers.
QVariant durationTip(bool running, bool training) {
  if (running)
    return QObject::tr("How long the run was running: its price per hour is charged for this time, and "
                       "device-hours are this time x its devices");
  if (training) return QObject::tr("From the first recorded step to the last: start-up is not counted");
  return {};
}

}  // namespace

// Summaries ---------------------------------------------------------------------------------------

SummaryModel::SummaryModel(QObject* parent) : QAbstractTableModel(parent) {}

void SummaryModel::setResult(const CompareResult& result) {
  beginResetModel();
  m_rows = result.summaries;
  m_comm = result.comm;
  endResetModel();
}

void SummaryModel::setPreferences(const Preferences& prefs) {
  m_prefs = prefs;
  if (!m_rows.empty()) emit dataChanged(index(0, 0), index(rowCount() - 1, ColumnCount - 1));
  emit headerDataChanged(Qt::Horizontal, 0, ColumnCount - 1);
}

int SummaryModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(m_rows.size());
}
int SummaryModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : ColumnCount; }

QVariant SummaryModel::data(const QModelIndex& index, int role) const {
  if (!valid(this, index)) return {};
  if (role == Qt::TextAlignmentRole) return index.column() <= Status ? QVariant() : kRight;
  if (role != Qt::DisplayRole) return {};
  const db::RunSummary& s = m_rows[static_cast<size_t>(index.row())];
  switch (index.column()) {
    case Run:
      return QString::fromStdString(s.name);
    case Status:
      return QString::fromStdString(s.status);
    case Steps:
      return QVariant::fromValue<qint64>(s.steps);
    case FinalLoss:
      return opt(s.final_loss, 4);
    case BestLoss:
      return opt(s.best_loss, 4);
    case BestValLoss:
      return opt(s.best_val_loss, 4);
    case Tokens:
      return m_prefs.formatTokens(s.tokens);
    case TokensPerS:
      return opt(s.tokens_per_s, 0);
    // Figures in the formats `flotilla compare` prints (runs/figures.h).
    case Mfu:
      return s.mfu ? QString::fromStdString(runs::mfu_text(*s.mfu)) : QString();
    case RunningTime:
      return QString::fromStdString(runs::clock_text(s.running_s));
    case TrainingTime:
      return QString::fromStdString(runs::clock_text(s.training_s));
    case GpuHours:
      return QString::fromStdString(runs::device_hours_text(s.gpu_hours, db::device_hours_unit(s.on_gpus)));
    case Cost:
      return m_prefs.formatCost(s.cost_usd);
    case CostPerMTokens:
      if (!s.cost_usd) return m_prefs.formatCost(std::nullopt);
      return s.usd_per_million_tokens ? m_prefs.formatMoney(*s.usd_per_million_tokens) : QString();
    case DpLinkShare:
    case CommHidden: {  // the texts `flotilla compare` prints (runs::share_text)
      const size_t row = static_cast<size_t>(index.row());
      if (row >= m_comm.size()) return QString();
      const std::optional<double>& v =
          index.column() == DpLinkShare ? m_comm[row].dp_share : m_comm[row].hidden;
      return v ? QString::fromStdString(runs::share_text(v)) : QString();
    }
    default:
      return {};
  }
}

QVariant SummaryModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation == Qt::Horizontal && role == Qt::ToolTipRole && section == DpLinkShare)
    return tr("The data-parallel group's bus bandwidth as a share of the slowest link it crosses (measured "
              "with Nodes > Measure links or at a multi-node run's start); flotilla runs show has the "
              "whole table");
  if (orientation == Qt::Horizontal && role == Qt::ToolTipRole && section == CommHidden)
    return tr("The share of the run's communication time that overlapped compute (1 - blocked / busy)");
  if (orientation == Qt::Horizontal && role == Qt::ToolTipRole) return durationTip(section == RunningTime, section == TrainingTime);
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
  switch (section) {
    case Run:
      return tr("Run");
    case Status:
      return tr("Status");
    case Steps:
      return tr("Steps");
    case FinalLoss:
      return tr("Final loss");
    case BestLoss:
      return tr("Best loss");
    case BestValLoss:
      return tr("Best val");
    case Tokens:
      return tr("Tokens (%1)").arg(m_prefs.tokenUnitLabel());
    case TokensPerS:
      return tr("Tokens/s");
    case Mfu:
      return tr("MFU");
    case RunningTime:
      return tr("Running time");
    case TrainingTime:
      return tr("Training time");
    case GpuHours:
      return tr("Device-h");
    case Cost:
      return tr("Cost");
    case CostPerMTokens:
      return tr("Cost/M tok");
    case DpLinkShare:
      return tr("DP link share");
    case CommHidden:
      return tr("Comm hidden");
    default:
      return {};
  }
}

// Config ------------------------------------------------------------------------------------------

ConfigDiffModel::ConfigDiffModel(QObject* parent) : QAbstractTableModel(parent) {}

void ConfigDiffModel::setResult(const CompareResult& result) {
  beginResetModel();
  m_runNames.clear();
  for (const auto& r : result.runs) m_runNames << QString::fromStdString(r.name);
  m_all = result.allConfig;
  m_diffs = result.differences;
  endResetModel();
}

void ConfigDiffModel::setShowAll(bool all) {
  if (all == m_showAll) return;
  beginResetModel();
  m_showAll = all;
  endResetModel();
}

int ConfigDiffModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(shown().size());
}
int ConfigDiffModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : 1 + static_cast<int>(m_runNames.size());
}

QVariant ConfigDiffModel::data(const QModelIndex& index, int role) const {
  if (!valid(this, index)) return {};
  const db::ConfigDifference& d = shown()[static_cast<size_t>(index.row())];
  if (index.column() == 0) return role == Qt::DisplayRole ? QString::fromStdString(d.key) : QVariant();
  const auto col = static_cast<size_t>(index.column() - 1);
  const std::string& v = col < d.values.size() ? d.values[col] : std::string();
  if (role == Qt::DisplayRole) return v.empty() ? tr("(absent)") : QString::fromStdString(v);
  if (role == Qt::ForegroundRole && v.empty())
    return QVariant::fromValue(QPalette().color(QPalette::PlaceholderText));
  if (role == Qt::FontRole && m_showAll) {
    // In "all keys" mode, keys that differ are bold.
    bool differs = false;
    for (const auto& x : d.values) differs |= x != d.values.front();
    if (differs) {
      QFont f;
      f.setBold(true);
      return f;
    }
  }
  return {};
}

QVariant ConfigDiffModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
  if (section == 0) return tr("Config key");
  return m_runNames.value(section - 1);
}

// Cost to reach a loss ----------------------------------------------------------------------------

TargetModel::TargetModel(QObject* parent, Of of) : QAbstractTableModel(parent), m_of(of) {}

void TargetModel::setResult(const CompareResult& result) {
  beginResetModel();
  m_names.clear();
  m_hits = m_of == Of::Loss ? result.hits : result.scoreHits;
  if (m_hits.size() == result.runs.size())
    for (const auto& r : result.runs) m_names << QString::fromStdString(r.name);
  else
    m_hits.clear();  // no task score to measure
  endResetModel();
}

void TargetModel::setPreferences(const Preferences& prefs) {
  m_prefs = prefs;
  if (!m_hits.empty()) emit dataChanged(index(0, 0), index(rowCount() - 1, ColumnCount - 1));
}

int TargetModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(m_hits.size());
}
int TargetModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : ColumnCount; }

QVariant TargetModel::data(const QModelIndex& index, int role) const {
  if (!valid(this, index)) return {};
  if (role == Qt::TextAlignmentRole) return index.column() == Run ? QVariant() : kRight;
  if (role != Qt::DisplayRole) return {};
  const TargetHit& h = m_hits[static_cast<size_t>(index.row())];
  if (index.column() == Run) return m_names.value(index.row());
  if (!h.reached) return index.column() == Step ? tr("not reached") : QString();
  switch (index.column()) {
    case Step:
      return QVariant::fromValue<qint64>(h.step);
    case Loss:
      return formatMetric(h.lossAtStep);
    case Cost:
      return m_prefs.formatCost(h.usd);
    case GpuHours:
      return QString::fromStdString(runs::device_hours_text(h.gpuHours, db::device_hours_unit(h.onGpus)));
    case RunningTime:
      return QString::fromStdString(runs::clock_text(h.runningSeconds));
    default:
      return {};
  }
}

QVariant TargetModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation == Qt::Horizontal && role == Qt::ToolTipRole) return durationTip(section == RunningTime, false);
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
  switch (section) {
    case Run:
      return tr("Run");
    case Step:
      return tr("First step");
    case Loss:
      return m_of == Of::Loss ? tr("Loss there") : tr("Score there");
    case Cost:
      return tr("Cost");
    case GpuHours:
      return tr("Device-h");
    case RunningTime:
      return tr("Running time");
    default:
      return {};
  }
}

}  // namespace flotilla::ui
