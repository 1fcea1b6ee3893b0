// `flotilla nodes links a,b` on a link whose speed is known (issue 36): two SSH nodes in network
// namespaces, each node's egress shaped to the fixture's RATE (netns-nodes.sh). The matrix,
// measured by the worker over the runs' own transport (Gloo TCP), shows a -> b and b -> a within
// 20% of RATE and each node's intra-node figure (its loopback, not shaped) far above it, and is
// stored. The matrix is printed for issue 36's closing note.
#include "check.h"
#include "db/database.h"
#include "db/links.h"
#include "db/sql.h"
#include "netns_cli.h"

using namespace flotilla_test;

namespace {

std::string node_name(const flotilla::db::Database& db, int64_t id) {
  flotilla::db::Stmt st(db, "SELECT name FROM nodes WHERE id = ?1");
  st.bind(1, id);
  return st.step() ? st.text(0) : "";
}

}  // namespace

int main() {
  const NetnsNodes net(FLOTILLA_NETNS_STATE);
  if (!net.unavailable().empty()) {
    std::printf("SKIP: %s\n", net.unavailable().c_str());
    return kNetnsSkip;
  }
  const double rate = tc_rate_bytes_per_s(net.rate());
  CHECK_MSG(rate > 0, "the fixture has no rate limit (%s)", net.rate().c_str());
  if (rate <= 0 || net.nodes().size() < 2) return flotilla_test::summary("netns_links");
  CHECK(net.limit_all(net.rate()));

  CliWorkspace ws(fresh_dir("netns_links"));
  for (size_t i = 0; i < 2; ++i) {
    const std::string why = add_trusted_netns_node(ws, net, i, i == 0 ? "a" : "b");
    CHECK_MSG(why.empty(), "%s", why.c_str());
    if (!why.empty()) return flotilla_test::summary("netns_links");
  }

  // 1. The matrix.
  const ProcResult links = ws.run({"nodes", "links", "a,b"});
  std::printf("$ flotilla nodes links a,b   (link shaped to %s = %.2f MB/s)\n%s\n", net.rate().c_str(),
              rate / 1e6, links.output.c_str());
  CHECK_MSG(links.exit_code == 0, "exit %d", links.exit_code);
  {
    flotilla::db::Database db(ws.db());
    const auto m = flotilla::db::latest_link_measurement(db);
    CHECK_MSG(m.has_value(), "no measurement stored");
    int inter = 0, intra = 0;
    for (const auto& l : m ? m->links : std::vector<flotilla::db::NodeLink>{}) {
      const std::string from = node_name(db, l.from_node), to = node_name(db, l.to_node);
      const double bw = l.bytes_per_s.value_or(0);
      if (l.from_node != l.to_node) {
        ++inter;
        CHECK_MSG(bw > 0.8 * rate && bw < 1.2 * rate, "%s -> %s: %.0f B/s, shaped to %.0f B/s", from.c_str(),
                  to.c_str(), bw, rate);
      } else {
        ++intra;
        CHECK_MSG(bw > 5 * rate, "%s intra-node: %.0f B/s", from.c_str(), bw);
      }
    }
    CHECK_MSG(inter == 2 && intra == 2, "%d inter-node and %d intra-node links", inter, intra);
  }

  return flotilla_test::summary("netns_links");
}
