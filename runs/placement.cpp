// Placement and Layout as text (see placement.h).
#include "runs/placement.h"

namespace flotilla::runs {

std::string Layout::text() const {
  std::string out;
  const auto add = [&](const char* key, const std::optional<int>& v) {
    if (v) out += (out.empty() ? "" : " ") + std::string(key) + "=" + std::to_string(*v);
  };
  add("dp", dp);
  add("tp", tp);
  add("pp", pp);
  add("zero", zero);
  return out;
}

std::vector<std::string> Layout::sets() const {
  std::vector<std::string> out;
  if (dp) out.push_back("parallel.dp=" + std::to_string(*dp));
  if (tp) out.push_back("parallel.tp=" + std::to_string(*tp));
  if (pp) out.push_back("parallel.pp=" + std::to_string(*pp));
  if (zero) out.push_back("parallel.zero=" + std::to_string(*zero));
  return out;
}

std::string Placement::text() const {
  switch (kind) {
    case PlaceKind::kHere:
      return "this machine";
    case PlaceKind::kNodes: {
      std::string out = nodes.size() == 1 ? "node " : "nodes ";
      for (size_t i = 0; i < nodes.size(); ++i) out += (i ? ", " : "") + nodes[i];
      return out;
    }
    case PlaceKind::kSlurm:
      return "slurm cluster " + cluster;
  }
  return "";
}

}  // namespace flotilla::runs
