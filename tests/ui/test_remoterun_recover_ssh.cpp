// Automatic recovery of an app-started run on SSH nodes (issue 7 item 4) against two real sshd
// "nodes" on 127.0.0.1 (tests/remote/sshd_fixture.h): LocalRuns::startOnNodes with recovery on
// (as the wizard hands it over) starts a tiny dp=2 run over a and b, followed on the Live page;
// node b is then "preempted" as tests/remote/test_cli_recover.cpp does it (SIGTERM to every
// process of b's detached run, then b's sshd stopped). The ServiceRun stays running through the
// recovery, the Live page's log shows the recovery note, and the run completes on node a alone
// (1 node x 2 ranks): status completed, the launch's recovery-policy and one 'recovery' event in
// the store, every step stored exactly once, the ServiceRun's nodes now "a". Opening the stored run
// from the Runs table follows that same ServiceRun.
#include <signal.h>

#include <QSignalSpy>
#include <QtTest>
#include <algorithm>
#include <cstdio>

#include "../remote/sshd_fixture.h"
#include "db/database.h"
#include "db/nodes.h"
#include "db/sql.h"
#include "engine/config/config_io.h"
#include "remote/node_fields.h"
#include "ui/live/livepage.h"
#include "ui/runs/localruns.h"
#include "ui/runs/servicerun.h"
#include "ui/runs/storerunsview.h"
#include "ui/runs/storeservice.h"

using namespace flotilla;
using flotilla::ui::ServiceRun;
using State = flotilla::ui::RunHandle::State;

namespace {

constexpr int kSteps = 600;  // ~1 ms a step: the preemption must land mid-run, also on a fast machine

int64_t queryInt(const std::string& dbPath, const std::string& sql) {
  db::Database d(dbPath);
  return db::query_int(d, sql);
}

std::string queryText(const std::string& dbPath, const std::string& sql) {
  db::Database d(dbPath);
  db::Stmt st(d, sql);
  return st.step() ? st.text(0) : "";
}

// SIGTERM to every process of node i's detached run (a spot shutdown notice), then node i's sshd
// goes away for good. False when the run's pid file is missing.
bool preempt(flotilla_test::SshdFixture& fx, int i, const std::string& rid) {
  const std::string pid = flotilla_test::read_file(fx.node(i).home + "/.flotilla/runs/" + rid + "/pid");
  const pid_t sid = static_cast<pid_t>(std::atol(pid.c_str()));
  if (sid <= 1) return false;
  for (pid_t p : flotilla_test::all_pids())
    if (flotilla_test::proc_stat_field(p, 4) == sid) ::kill(p, SIGTERM);
  fx.stop(i);
  return true;
}

}  // namespace

class TestRemoteRunRecoverSsh : public QObject {
  Q_OBJECT

 private slots:
  void preemptedNodeRecoversOnTheOther();
};

void TestRemoteRunRecoverSsh::preemptedNodeRecoversOnTheOther() {
  flotilla_test::SshdFixture fx("ui_remoterun_recover_ssh");
  const std::string clientHome = fx.root() + "/client-home";
  if (const std::string why = flotilla_test::start_app_nodes(fx, 2, clientHome); !why.empty()) {
    std::printf("SKIP: %s\n", why.c_str());
    return;
  }

  const std::string ws = fx.root() + "/ws";
  std::filesystem::create_directories(ws);
  const std::string dbPath = ws + "/flotilla.db";
  const QString qdb = QString::fromStdString(dbPath);
  {
    db::Database d(dbPath);
    for (int i = 0; i < 2; ++i) {
      db::SshNode n;
      n.name = i == 0 ? "a" : "b";
      n.host = "127.0.0.1";
      n.port = fx.node(i).port;
      n.user = flotilla_test::local_user_name();
      n.key_path = fx.client_key();
      n.usd_per_hour = 1.0;
      n.spot = i == 1;
      db::add_ssh_node(d, n);
      remote::SessionOptions o;  // the user's "Trust this key" on the Nodes page
      o.host = n.host;
      o.port = n.port;
      o.user = n.user;
      o.identity_file = n.key_path;
      o.known_hosts_path = remote::workspace_known_hosts_path(dbPath);
      remote::Session s(o);
      flotilla_test::trust_and_connect(s);
    }
  }
  const RunConfig config = parse_config_toml(
      "[run]\nname = \"rec\"\nseed = 7\nthreads = 1\n"
      "[model]\npreset = \"custom\"\nn_layer = 2\nn_head = 2\nn_embd = 32\nvocab_size = 128\n"
      "max_seq_len = 32\n[data]\nsynthetic_tokens = 30000\n"
      "[train]\nsteps = " +
          std::to_string(kSteps) +
          "\nmicro_batch = 2\nseq_len = 16\n"
          "[parallel]\ndp = 2\ntimeout_s = 60\n[checkpoint]\nevery = 100\nkeep_last = 2\n",
      "test config");

  ui::StoreService store(qdb);
  ui::LocalRuns runs(QString::fromStdString(ws));
  runs.setStore(&store);
  runs.setWorkerPath(QStringLiteral(FLOTILLA_WORKER_PATH));
  ui::LivePage page;
  page.resize(1000, 700);
  page.show();

  ui::RecoveryChoice recovery;  // the wizard's default for a spot node, with a short settle time
  recovery.enabled = true;
  recovery.settleSeconds = 1;
  QString error;
  ServiceRun* run = runs.startOnNodes(config, {QStringLiteral("a"), QStringLiteral("b")}, recovery, &error);
  QVERIFY2(run, qPrintable(error));
  page.setRun(run);
  QSignalSpy finished(run, &ServiceRun::finished);
  QTRY_VERIFY_WITH_TIMEOUT(run->storeId() > 0 || !run->isActive(), 60000);
  QVERIFY2(run->isActive(), qPrintable(run->stateText()));
  const std::string id = std::to_string(run->storeId());
  const std::string rid = "rec-" + id;

  // Preempt b once 8 steps are in node a's metrics file.
  const std::string metrics = fx.node(0).home + "/.flotilla/runs/" + rid + "/metrics.jsonl";
  const auto eightSteps = [&] {
    const std::string m = flotilla_test::read_file(metrics);
    return std::count(m.begin(), m.end(), '\n') >= 8;
  };
  QTRY_VERIFY_WITH_TIMEOUT(!run->isActive() || eightSteps(), 60000);
  QVERIFY2(run->isActive(), qPrintable(run->stateText()));
  QVERIFY(preempt(fx, 1, rid));

  QTRY_COMPARE_WITH_TIMEOUT(finished.count(), 1, 90000);
  QString log;
  for (const auto& line : run->log()) log += line.text + QLatin1Char('\n');
  QVERIFY2(run->state() == State::Completed, qPrintable(run->stateText() + QLatin1Char('\n') + log));
  QVERIFY2(run->nodes() == QStringList{QStringLiteral("a")},
           qPrintable(run->nodes().join(QLatin1Char(',')) + QLatin1Char('\n') + log));
  QCOMPARE(run->lastStep(), qint64(kSteps));
  // The recovery reached the Live page's log, as a warning.
  QVERIFY2(page.logText().contains(
               QStringLiteral("WARNING: automatic recovery 1/3 (lost b): 1 node(s) x 2 rank(s) on a")),
           qPrintable(page.logText()));

  QCOMPARE(queryText(dbPath, "SELECT status FROM runs WHERE id = " + id), std::string("completed"));
  QCOMPARE(queryText(dbPath, "SELECT target FROM runs WHERE id = " + id), std::string("a"));
  QCOMPARE(queryInt(dbPath, "SELECT COUNT(*) FROM events WHERE run_id = " + id +
                                " AND kind = 'recovery' AND message LIKE 'automatic recovery 1/3 (lost b)%'"),
           int64_t(1));
  QCOMPARE(
      queryText(dbPath, "SELECT fields FROM events WHERE run_id = " + id + " AND kind = 'recovery-policy'"),
      std::string(R"({"after":1.0,"auto":true,"max":3,"mirror":false,"spares":[]})"));
  QCOMPARE(queryInt(dbPath, "SELECT COUNT(*) FROM metrics WHERE run_id = " + id + " AND name = 'loss'"),
           int64_t(kSteps));
  QCOMPARE(queryInt(dbPath,
                    "SELECT COUNT(DISTINCT step) FROM metrics WHERE run_id = " + id + " AND name = 'loss'"),
           int64_t(kSteps));
  QCOMPARE(queryInt(dbPath, "SELECT MAX(step) FROM metrics WHERE run_id = " + id + " AND name = 'loss'"),
           int64_t(kSteps));

  // The Runs table opens the stored run as this ServiceRun (no local folder, no question).
  ui::StoreRunsView view(&store, &runs);
  bool asked = false;
  view.confirmAttach = [&](const QString&, const QString&) {
    asked = true;
    return false;
  };
  QSignalSpy opened(&view, &ui::StoreRunsView::runOpened);
  view.openLive(run->storeId());
  QVERIFY(!asked);
  QCOMPARE(opened.count(), 1);
  QCOMPARE(qvariant_cast<ui::RunHandle*>(opened.at(0).at(0)), static_cast<ui::RunHandle*>(run));
  QCOMPARE(runs.count(), 1);  // the one run on nodes: no second (review) run was made
}

QTEST_MAIN(TestRemoteRunRecoverSsh)
#include "test_remoterun_recover_ssh.moc"
