// The Nodes page's latency measurement on a worker thread (see latencyjob.h).
#include "runs/latency_job.h"

#include <memory>

#include "db/database.h"
#include "flotilla/build_info.h"
#include "remote/deploy.h"
#include "runs/node_bridge.h"

namespace flotilla::runs {

LatencyJobResult run_latency_job(const std::string& database_path, const std::vector<db::SshNode>& nodes,
                                 const std::string& worker_path,
                                 const std::function<remote::SessionOptions(const db::SshNode&)>& options,
                                 const std::atomic<bool>& cancel, int count) {
  LatencyJobResult out;
  std::vector<std::unique_ptr<remote::Session>> sessions;
  std::vector<LatencyNode> refs;
  try {
    remote::DeployOptions deploy;
    deploy.worker_path = worker_path;
    deploy.version = FLOTILLA_VERSION_STRING;
    for (const auto& rec : nodes) {
      if (cancel) return out;
      LatencyNode n;
      n.node = rec;
      auto session = std::make_unique<remote::Session>(options(rec));
      try {
        session->connect();
        const remote::DeployResult d = remote::deploy_worker(*session, deploy);
        n.worker = d.worker;
        n.session = session.get();
      } catch (const remote::HostKeyError& e) {
        const bool unknown = e.problem() == remote::HostKeyProblem::kUnknown;
        n.unavailable = unknown ? "host key not trusted yet" : "host key refused";
        out.problems.push_back(
            unknown ? "Node " + rec.name +
                          ": its host key is not trusted yet, so it was not logged into; select "
                          "it and use Verify host key…"
                    : "Node " + rec.name + ": " + e.what());
      } catch (const remote::AuthError& e) {
        n.unavailable = "authentication failed";
        out.problems.push_back("Node " + rec.name + ": " + e.what());
      } catch (const std::exception& e) {
        n.unavailable = std::string("unreachable: ") + e.what();
        out.problems.push_back("Node " + rec.name + " is unreachable: " + e.what());
      }
      sessions.push_back(std::move(session));
      refs.push_back(n);
    }
    if (cancel) return out;
    db::OpenOptions o;
    o.create = false;
    o.quick_check = false;
    db::Database db(database_path, o);
    out.rows = measure_and_store_latency(db, refs, count);
  } catch (const std::exception& e) {
    out.problems.push_back(std::string("The latency could not be measured: ") + e.what());
  }
  return out;  // the sessions disconnect here, on this thread
}

}  // namespace flotilla::runs
