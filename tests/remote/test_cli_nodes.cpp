// The headless node commands end to end against two real sshd "nodes" on 127.0.0.1: nodes add,
// probe refused for an unknown host (fingerprint + exact trust command, S3), trust with a wrong
// fingerprint refused and the right one accepted, probe ok, then `flotilla run CONFIG --nodes a,b`
// (dp over 2 nodes x 1 rank on Gloo) with node a's sshd session killed mid-run (S4): the command
// reconnects, the run completes, and the store has every step exactly once. Hostile node fields
// are rejected and a canary is never created (S7); the database holds no key material (S10).
#include <sys/stat.h>

#include <set>

#include "check.h"
#include "db/database.h"
#include "db/sql.h"
#include "cli_fixture.h"

using namespace flotilla_test;

namespace {

constexpr int kSteps = 40;

CliWorkspace* g_ws = nullptr;
std::string g_db;

ProcResult cli(const std::vector<std::string>& args) { return g_ws->run(args); }

std::string config_text() {
  return "[run]\nname = \"cli2\"\nseed = 5\nthreads = 1\n"
         "[model]\npreset = \"custom\"\nn_layer = 2\nn_head = 2\nn_embd = 32\nvocab_size = 128\nmax_seq_len = 32\n"
         "[data]\nsynthetic_tokens = 30000\n"
         "[train]\nsteps = " + std::to_string(kSteps) + "\nmicro_batch = 2\nseq_len = 16\n"
         "[parallel]\ndp = 2\ntimeout_s = 60\n"
         "[checkpoint]\nevery = 20\nkeep_last = 2\n";
}

void test_hostile_fields(const std::string& canary) {
  const std::string c = canary;
  const std::vector<std::vector<std::string>> bad = {
      {"nodes", "add", "h1", "--host=-oProxyCommand=touch${IFS}" + c},
      {"nodes", "add", "h2", "--host", "a;touch " + c},
      {"nodes", "add", "h3", "--host", "$(touch " + c + ")"},
      {"nodes", "add", "h4", "--host", "`touch " + c + "`"},
      {"nodes", "add", "h5", "--host", "host\nProxyCommand touch " + c},
      {"nodes", "add", "h6", "--host", "host name"},
      {"nodes", "add", "h7", "--host", "127.0.0.1", "--user", "$(touch " + c + ")"},
      {"nodes", "add", "h8", "--host", "127.0.0.1", "--user=-oProxyCommand=touch " + c},
      {"nodes", "add", "h9", "--host", "127.0.0.1", "--port", "0"},
      {"nodes", "add", "h10", "--host", "127.0.0.1", "--port", "65536"},
      {"nodes", "add", "h11", "--host", "127.0.0.1", "--port", "22abc"},
      {"nodes", "add", "a;touch " + c, "--host", "127.0.0.1"},
      {"nodes", "add", "../x", "--host", "127.0.0.1"},
      {"nodes", "add", "h12", "--host", "127.0.0.1", "--key", "k\nProxyCommand touch " + c},
      {"nodes", "add", "h13", "--host", "127.0.0.1", "--label", "a,b"},
      {"nodes", "add", "h14", "--host", "127.0.0.1", "--price-per-hour", "-1"},
      {"nodes", "add", "h15", "--host", std::string(300, 'a')},
  };
  for (const auto& args : bad) {
    const ProcResult r = cli(args);
    CHECK_MSG(r.exit_code == 2, "accepted (exit %d): %s / %s", r.exit_code, args[3].c_str(), r.output.c_str());
  }
  const ProcResult list = cli({"nodes", "list", "--json"});
  CHECK(list.exit_code == 0);
  const auto j = nlohmann::json::parse(list.output, nullptr, false);
  CHECK_MSG(j.is_array() && j.size() == 2, "%s", list.output.c_str());  // only a and b
  CHECK_MSG(access(canary.c_str(), F_OK) != 0, "canary %s was created", canary.c_str());
}

}  // namespace

int main() {
  if (const std::string why = SshdFixture::unavailable(); !why.empty()) {
    std::printf("SKIP: %s\n", why.c_str());
    return 0;
  }
  SshdFixture fx("cli_nodes");
  if (!fx.start(0) || !fx.start(1)) {
    std::printf("SKIP: sshd cannot run as this user here: %s\n", fx.last_error().c_str());
    return 0;
  }
  CliWorkspace workspace(fx.root());  // its HOME has no ~/.ssh/config, no default keys, no agent
  g_ws = &workspace;
  g_db = workspace.db();
  const std::string ws = fx.root() + "/ws";
  const std::string kh = ws + "/known_hosts";
  const std::string user = local_user_name();

  for (int i = 0; i < 2; ++i) {
    const std::string name = i == 0 ? "a" : "b";
    std::vector<std::string> args = {"nodes", "add", name, "--host", "127.0.0.1", "--port",
                                     std::to_string(fx.node(i).port), "--user", user, "--key", fx.client_key()};
    if (i == 0) {
      args.insert(args.end(), {"--price-per-hour", "3.6"});
    } else {
      args.insert(args.end(), {"--price-per-hour", "1.8", "--spot", "--label", "zone:test", "--label", "cpu"});
    }
    const ProcResult r = cli(args);
    CHECK_MSG(r.exit_code == 0, "%s", r.output.c_str());
  }
  CHECK(cli({"nodes", "add", "a", "--host", "127.0.0.1"}).exit_code == 2);  // name taken
  const ProcResult list = cli({"nodes", "list", "--json"});
  const auto lj = nlohmann::json::parse(list.output, nullptr, false);
  CHECK_MSG(lj.is_array() && lj.size() == 2, "%s", list.output.c_str());
  if (lj.is_array() && lj.size() == 2) {
    CHECK(lj[1]["name"] == "b" && lj[1]["spot"] == true && lj[1]["price_per_hour"] == 1.8);
    CHECK(lj[1]["labels"].size() == 2 && lj[1]["labels"][0] == "zone:test");
    CHECK(lj[0]["port"] == fx.node(0).port && lj[0]["key"] == fx.client_key());
  }

  const std::string canary = fx.root() + "/CANARY";
  test_hostile_fields(canary);

  // S3: unknown host refused with the fingerprint and the exact trust command; nothing written.
  const ProcResult refused = cli({"nodes", "probe", "a"});
  CHECK_MSG(refused.exit_code == 9, "exit %d: %s", refused.exit_code, refused.output.c_str());
  CHECK_MSG(contains(refused.output, "flotilla nodes trust a --fingerprint SHA256:"), "%s", refused.output.c_str());
  const std::string fp_a = fingerprint_in(refused.output);
  CHECK(fp_a.size() > 20);
  CHECK(read_file(kh).empty());
  // A run on an untrusted node is refused before anything starts.
  const std::string cfg = fx.root() + "/tiny.toml";
  write_text(cfg, config_text());
  const ProcResult early = cli({"run", cfg, "--nodes", "a,b", "--name", "early"});
  CHECK_MSG(early.exit_code == 9 && contains(early.output, "SHA256:"), "exit %d: %s", early.exit_code,
            early.output.c_str());
  CHECK(!std::filesystem::exists(fx.node(0).home + "/.flotilla"));

  // Trust: another host's fingerprint is refused, the presented one accepted (one line).
  const ProcResult refused_b = cli({"nodes", "probe", "b"});
  const std::string fp_b = fingerprint_in(refused_b.output);
  CHECK(!fp_b.empty() && fp_b != fp_a);
  const ProcResult wrong = cli({"nodes", "trust", "a", "--fingerprint", fp_b});
  CHECK_MSG(wrong.exit_code == 9, "exit %d: %s", wrong.exit_code, wrong.output.c_str());
  CHECK(read_file(kh).empty());
  CHECK(cli({"nodes", "trust", "a", "--fingerprint", "not-a-fingerprint"}).exit_code == 2);
  const ProcResult right = cli({"nodes", "trust", "a", "--fingerprint", fp_a});
  CHECK_MSG(right.exit_code == 0, "%s", right.output.c_str());
  CHECK(cli({"nodes", "trust", "b", "--fingerprint", fp_b}).exit_code == 0);
  const std::string khs = read_file(kh);
  CHECK(std::count(khs.begin(), khs.end(), '\n') == 2);

  const ProcResult probe = cli({"nodes", "probe", "a", "--json"});
  CHECK_MSG(probe.exit_code == 0, "%s", probe.output.c_str());
  const auto pj = nlohmann::json::parse(probe.output, nullptr, false);
  CHECK(!pj.is_discarded() && pj["cpus"].get<int>() >= 1 && pj["fingerprint"] == fp_a);

  // The run over both nodes, with node a's sshd session killed once steps arrive (S4).
  const std::string run_log = fx.root() + "/run.log";
  const pid_t run = g_ws->spawn({"run", cfg, "--nodes", "a,b", "--no-bind"}, run_log);
  bool killed = false;
  int early_status = 0;
  bool reaped = false;
  wait_until(
      [&] {
        // The run's id in the store is 1 (the refused "early" run created nothing): cli2-1.
        const std::string m = read_file(fx.node(0).home + "/.flotilla/runs/cli2-1/metrics.jsonl");
        if (std::count(m.begin(), m.end(), '\n') >= 8) {
          killed = fx.kill_sessions(0, SIGKILL) >= 1;
          return true;
        }
        reaped = waitpid(run, &early_status, WNOHANG) == run;
        return reaped;
      },
      90);
  const int run_exit = reaped ? (WIFEXITED(early_status) ? WEXITSTATUS(early_status) : 128) : wait_exit(run);
  const std::string out = read_file(run_log);
  CHECK_MSG(run_exit == 0, "run exit %d: %s", run_exit, out.c_str());
  CHECK_MSG(killed, "the session was not killed mid-run: %s", out.c_str());
  CHECK_MSG(contains(out, "reconnected to node a"), "%s", out.c_str());

  const ProcResult csv = cli({"runs", "export", "cli2", "--csv", "--metric", "loss"});
  CHECK_MSG(csv.exit_code == 0, "%s", csv.output.c_str());
  std::set<long> steps;
  int rows = 0;
  size_t pos = csv.output.find('\n');
  while (pos != std::string::npos && pos + 1 < csv.output.size()) {
    const size_t next = csv.output.find('\n', pos + 1);
    steps.insert(std::atol(csv.output.substr(pos + 1, next - pos - 1).c_str()));
    ++rows;
    pos = next;
  }
  CHECK_MSG(rows == kSteps && static_cast<int>(steps.size()) == kSteps && *steps.begin() == 1 &&
                *steps.rbegin() == kSteps,
            "%d rows, %zu distinct steps", rows, steps.size());
  {
    flotilla::db::Database db(g_db);
    CHECK(flotilla::db::query_int(db, "SELECT COUNT(*) FROM metrics m JOIN runs r ON r.id = m.run_id WHERE "
                                      "r.name = 'cli2' AND m.name = 'loss'") == kSteps);
    CHECK(flotilla::db::query_int(db, "SELECT COUNT(*) FROM runs WHERE name = 'cli2' AND status = 'completed'") == 1);
    // Costs accrue per node at its own price: a at 3.6 $/h, b at 1.8 $/h.
    CHECK(flotilla::db::query_int(db, "SELECT COUNT(DISTINCT node_id) FROM cost_accruals") == 2);
    CHECK(flotilla::db::query_int(db, "SELECT COUNT(*) FROM cost_accruals WHERE usd_per_hour IN (3.6, 1.8)") == 2);
  }

  // S10: the store holds the key's path, never its contents.
  const std::string db_bytes = read_file(g_db) + read_file(g_db + "-wal");
  const std::string key = read_file(fx.client_key());
  const auto body_start = key.find('\n') + 1;
  CHECK(!key.empty() && !contains(db_bytes, key.substr(body_start, 40)));
  CHECK(!contains(db_bytes, "PRIVATE KEY"));

  // Remove: a node used by a run is kept; an unused one goes with its host key.
  CHECK(cli({"nodes", "remove", "a"}).exit_code == 9);
  CHECK(cli({"nodes", "add", "c", "--host", "127.0.0.2", "--port", "2200"}).exit_code == 0);
  CHECK(cli({"nodes", "remove", "c"}).exit_code == 0);
  CHECK(cli({"nodes", "remove", "c"}).exit_code == 4);
  return flotilla_test::summary("test_cli_nodes");
}
