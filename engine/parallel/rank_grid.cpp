// RankGrid arithmetic (TP innermost, then DP, then PP; see rank_grid.h) and group creation.
#include "engine/parallel/rank_grid.h"

#include "engine/core/error.h"

namespace flotilla::parallel {

RankGrid::RankGrid(int world_size, int dp, int tp, int pp) : dp_(dp), tp_(tp), pp_(pp) {
  if (dp < 1 || tp < 1 || pp < 1 || static_cast<long long>(dp) * tp * pp != world_size) {
    throw Error(ExitCode::kConfig,
                "parallel layout dp=" + std::to_string(dp) + " x tp=" + std::to_string(tp) + " x pp=" +
                    std::to_string(pp) + " = " + std::to_string(static_cast<long long>(dp) * tp * pp) +
                    " ranks, but the world has " + std::to_string(world_size) +
                    ": make parallel.dp * parallel.tp * parallel.pp equal the number of ranks");
  }
}

void RankGrid::check_rank(int rank) const {
  if (rank < 0 || rank >= world_size()) {
    throw Error(ExitCode::kInternal, "rank " + std::to_string(rank) + " outside the grid " + describe());
  }
}

RankCoord RankGrid::coord(int rank) const {
  check_rank(rank);
  RankCoord c;
  c.tp = rank % tp_;
  c.dp = (rank / tp_) % dp_;
  c.pp = rank / (tp_ * dp_);
  return c;
}

int RankGrid::rank_of(RankCoord c) const { return c.tp + tp_ * (c.dp + dp_ * c.pp); }

std::vector<int> RankGrid::dp_group(int rank) const {
  RankCoord c = coord(rank);
  std::vector<int> out;
  for (c.dp = 0; c.dp < dp_; ++c.dp) out.push_back(rank_of(c));
  return out;
}

std::vector<int> RankGrid::tp_group(int rank) const {
  RankCoord c = coord(rank);
  std::vector<int> out;
  for (c.tp = 0; c.tp < tp_; ++c.tp) out.push_back(rank_of(c));
  return out;
}

std::vector<int> RankGrid::pp_group(int rank) const {
  RankCoord c = coord(rank);
  std::vector<int> out;
  for (c.pp = 0; c.pp < pp_; ++c.pp) out.push_back(rank_of(c));
  return out;
}

namespace {
// The distinct groups produced by `of` over every rank, in order of their first member.
template <typename F>
std::vector<std::vector<int>> distinct_groups(int world, F of) {
  std::vector<std::vector<int>> out;
  for (int r = 0; r < world; ++r) {
    std::vector<int> g = of(r);
    if (g.front() == r) out.push_back(std::move(g));
  }
  return out;
}
}  // namespace

std::vector<std::vector<int>> RankGrid::all_dp_groups() const {
  return distinct_groups(world_size(), [this](int r) { return dp_group(r); });
}
std::vector<std::vector<int>> RankGrid::all_tp_groups() const {
  return distinct_groups(world_size(), [this](int r) { return tp_group(r); });
}
std::vector<std::vector<int>> RankGrid::all_pp_groups() const {
  return distinct_groups(world_size(), [this](int r) { return pp_group(r); });
}

std::string RankGrid::describe() const {
  return "dp=" + std::to_string(dp_) + " x tp=" + std::to_string(tp_) + " x pp=" + std::to_string(pp_) +
         " (TP innermost, then DP, PP outermost)";
}

ParallelGroups make_parallel_groups(comm::ProcessGroup& world, const RankGrid& grid) {
  if (grid.world_size() != world.size()) {
    throw Error(ExitCode::kConfig, "parallel layout " + grid.describe() + " needs " +
                                       std::to_string(grid.world_size()) + " ranks, but the world has " +
                                       std::to_string(world.size()));
  }
  ParallelGroups g;
  const int r = world.rank();
  g.tp = world.new_group(grid.tp_group(r), "tp");
  g.dp = world.new_group(grid.dp_group(r), "dp");
  g.pp = world.new_group(grid.pp_group(r), "pp");
  return g;
}

}  // namespace flotilla::parallel
