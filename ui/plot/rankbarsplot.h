// Step-time breakdown per rank: one stacked bar per rank (compute / communication wait /
// pipeline bubble / data), the mean over the latest window of steps.
//
// Decision: bars over ranks, not lines over steps, because the question is "which rank waits,
// and on what" at a glance: a rank whose communication segment dwarfs the others' is the
// bottleneck (or the one the others wait for, whose compute is longest). The slowest rank's
// tick label is marked. The caller hands plain numbers; no table is needed.
#pragma once

#include <QVector>
#include <memory>

#include "ui/plot/plotpanel.h"

namespace flotilla::ui {

struct RankTimes {
  int rank = 0;
  double compute = 0;  // forward + backward + optimizer (ms)
  double comm = 0;     // blocked on collectives (ms)
  double bubble = 0;   // pipeline bubble (ms)
  double data = 0;     // data loading (ms)
  double total() const { return compute + comm + bubble + data; }
};

class RankBarsPlot : public PlotPanel {
  Q_OBJECT

 public:
  explicit RankBarsPlot(QWidget* parent = nullptr);
  ~RankBarsPlot() override;

  // The bars to draw (one per entry) and the slowest rank (-1: none marked); `window` is the
  // number of steps averaged, named in the axis label.
  void setRanks(const QVector<RankTimes>& ranks, int slowestRank, int window);
  const QVector<RankTimes>& ranks() const;
  // Drawn value of a segment (0 compute, 1 comm, 2 bubble, 3 data) of the bar for `rank`, NaN if none.
  double drawnSegment(int rank, int segment) const;
  QString rankLabel(int rank) const;
  // Not about the x axis: bars are per rank whatever the dashboard's x kind.
  void setXAxisKind(XAxisKind) override {}

  bool refresh() override;

 protected:
  bool writeCsv(QTextStream& out) const override;
  void applySeriesPalette(const QPalette& pal) override;

 private:
  struct Private;
  std::unique_ptr<Private> d;
};

}  // namespace flotilla::ui
