// RankGrid: where each rank sits in a dp x tp x pp layout, and which ranks share its DP, TP and
// PP groups.
//
// Order (fixed, documented in docs/distributed.md): TP innermost, then DP, then PP outermost:
//   rank = tp_index + tp * (dp_index + dp * pp_index)
// so the ranks of one TP group are consecutive (one node, the fastest links: TP talks twice per
// block), a DP group strides by tp, and a pipeline stage is a contiguous block of dp * tp ranks.
// Example, dp=2 tp=2 pp=1: TP groups {0,1} {2,3}; DP groups {0,2} {1,3}.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/comm/process_group.h"

namespace flotilla::parallel {

struct RankCoord {
  int dp = 0, tp = 0, pp = 0;
};

class RankGrid {
 public:
  // Throws Error(kConfig) with every factor shown when dp * tp * pp != world_size or a degree < 1.
  RankGrid(int world_size, int dp, int tp, int pp);

  int world_size() const { return dp_ * tp_ * pp_; }
  int dp() const { return dp_; }
  int tp() const { return tp_; }
  int pp() const { return pp_; }

  RankCoord coord(int rank) const;
  int rank_of(RankCoord c) const;

  // Members (world ranks, ascending) of the group that contains `rank`.
  std::vector<int> dp_group(int rank) const;  // same tp and pp index
  std::vector<int> tp_group(int rank) const;  // same dp and pp index
  std::vector<int> pp_group(int rank) const;  // same dp and tp index
  // Every group of a kind, for plans and reports.
  std::vector<std::vector<int>> all_dp_groups() const;
  std::vector<std::vector<int>> all_tp_groups() const;
  std::vector<std::vector<int>> all_pp_groups() const;

  std::string describe() const;  // "dp=2 x tp=2 x pp=1 (TP innermost)"

 private:
  void check_rank(int rank) const;
  int dp_, tp_, pp_;
};

// The three groups of one rank. A degree of 1 gives a one-rank group (collectives are no-ops).
struct ParallelGroups {
  std::unique_ptr<comm::ProcessGroup> dp, tp, pp;
};

// Creates this rank's DP, TP and PP groups from the world group (every rank calls it; order:
// tp, dp, pp). Throws Error(kConfig) if the grid does not match the world size.
ParallelGroups make_parallel_groups(comm::ProcessGroup& world, const RankGrid& grid);

}  // namespace flotilla::parallel
