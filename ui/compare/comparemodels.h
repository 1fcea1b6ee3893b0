// The Compare page's tables, filled from one CompareResult: run summaries (one row per run), config
// keys (one row per key, one column per run) and the cost to reach a target loss or task score (one row
// per run).
//
// Decision: the config model holds every key and filters itself (only differing keys unless
// "show all" is on), so toggling never needs another query.
#pragma once

#include <QAbstractTableModel>

#include "ui/compare/comparequery.h"
#include "ui/settings/preferences.h"

namespace flotilla::ui {

class SummaryModel : public QAbstractTableModel {
  Q_OBJECT

 public:
  enum Column {
    Run,
    Status,
    Steps,
    FinalLoss,
    BestLoss,
    BestValLoss,
    Tokens,
    TokensPerS,
    Mfu,
    RunningTime,   // what the price is charged for (db/queries.h RunSummary)
    TrainingTime,  // first to last step
    GpuHours,
    Cost,
    CostPerMTokens,
    DpLinkShare,  // the dp group's bus bandwidth / its slowest link (runs/comm_efficiency.h)
    CommHidden,   // the share of communication that overlapped compute
    ColumnCount
  };
  explicit SummaryModel(QObject* parent = nullptr);
  void setResult(const CompareResult& result);
  void setPreferences(const Preferences& prefs);

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

 private:
  std::vector<db::RunSummary> m_rows;
  std::vector<runs::CommHeadline> m_comm;  // per row (may be shorter: a result without it)
  Preferences m_prefs;
};

class ConfigDiffModel : public QAbstractTableModel {
  Q_OBJECT

 public:
  explicit ConfigDiffModel(QObject* parent = nullptr);
  void setResult(const CompareResult& result);
  void setShowAll(bool all);
  bool showAll() const { return m_showAll; }

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

 private:
  const std::vector<db::ConfigDifference>& shown() const { return m_showAll ? m_all : m_diffs; }
  QStringList m_runNames;
  std::vector<db::ConfigDifference> m_all, m_diffs;
  bool m_showAll = false;
};

// The cost to reach a loss (result.hits) or, with Of::Score, a task score (result.scoreHits: the
// Loss column then holds the score reached).
class TargetModel : public QAbstractTableModel {
  Q_OBJECT

 public:
  enum Column { Run, Step, Loss, Cost, GpuHours, RunningTime, ColumnCount };
  enum class Of { Loss, Score };
  explicit TargetModel(QObject* parent = nullptr, Of of = Of::Loss);
  Of of() const { return m_of; }
  void setResult(const CompareResult& result);
  void setPreferences(const Preferences& prefs);

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

 private:
  QStringList m_names;
  std::vector<TargetHit> m_hits;
  Preferences m_prefs;
  Of m_of = Of::Loss;
};

}  // namespace flotilla::ui
