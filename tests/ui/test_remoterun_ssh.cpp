// ServiceRun (the app's run on SSH nodes) against two real sshd "nodes" on 127.0.0.1
// (tests/remote/sshd_fixture.h): started from the app layer (LocalRuns::startOnNodes) with a tiny dp=2 config over nodes a
// and b, followed on the Live page until the loss falls, stopped with the page's Stop button: both
// nodes wrote their exit code, the store has every step once (1..last, no gap) and status stopped,
// and the page saw each step once. Then a second run is started and its ServiceRun destroyed
// without a stop (an app exit): the store keeps it 'running', LocalRuns::reattachRunning() picks it up at
// the next "start", and it completes with every step stored once and every step shown once.
#include <QPushButton>
#include <QSignalSpy>
#include <QtTest>
#include <cstdio>
#include <memory>

#include "../remote/sshd_fixture.h"
#include "db/database.h"
#include "db/nodes.h"
#include "db/sql.h"
#include "engine/config/config_io.h"
#include "remote/node_fields.h"
#include "ui/live/livepage.h"
#include "ui/runs/servicerun.h"
#include "ui/runs/localruns.h"
#include "ui/runs/servicerun.h"
#include "ui/runs/storeservice.h"

using namespace flotilla;
using flotilla::ui::ServiceRun;
using State = flotilla::ui::RunHandle::State;

namespace {

constexpr int kSteps = 600;

int64_t queryInt(const std::string& dbPath, const std::string& sql) {
  db::Database d(dbPath);
  return db::query_int(d, sql);
}

// The page's loss series: points, whether the steps are 1..n each once, mean of first/last five.
struct Seen {
  int points = 0;
  bool contiguous = false;
  double head = 0, tail = 0;
};
Seen seen(const ui::ServiceRun& run) {
  Seen s;
  const auto& series = run.series().series(QLatin1String(ui::kSeriesLoss));
  s.points = static_cast<int>(series.x.size());
  s.contiguous = true;
  for (int i = 0; i < s.points; ++i)
    if (series.x[i] != double(i + 1)) s.contiguous = false;
  if (s.points >= 10) {
    for (int i = 0; i < 5; ++i) {
      s.head += series.y[i] / 5;
      s.tail += series.y[s.points - 1 - i] / 5;
    }
  }
  return s;
}

}  // namespace

class TestRemoteRunSsh : public QObject {
  Q_OBJECT

 private slots:
  void startFollowStopThenReattach();
};

void TestRemoteRunSsh::startFollowStopThenReattach() {
  flotilla_test::SshdFixture fx("ui_remoterun_ssh");
  const std::string clientHome = fx.root() + "/client-home";
  if (const std::string why = flotilla_test::start_app_nodes(fx, 2, clientHome); !why.empty()) {
    std::printf("SKIP: %s\n", why.c_str());
    return;
  }

  const std::string ws = fx.root() + "/ws";
  std::filesystem::create_directories(ws);
  const std::string dbPath = ws + "/flotilla.db";
  const QString qdb = QString::fromStdString(dbPath);
  const QString mirrors = QString::fromStdString(ws + "/remote");
  {
    db::Database d(dbPath);
    for (int i = 0; i < 2; ++i) {
      db::SshNode n;
      n.name = i == 0 ? "a" : "b";
      n.host = "127.0.0.1";
      n.port = fx.node(i).port;
      n.user = flotilla_test::local_user_name();
      n.key_path = fx.client_key();
      n.usd_per_hour = i == 0 ? 3.6 : 1.8;
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
  RunConfig config = parse_config_toml(
      "[run]\nname = \"x\"\nseed = 7\nthreads = 1\n"
      "[model]\npreset = \"custom\"\nn_layer = 2\nn_head = 2\nn_embd = 32\nvocab_size = 128\n"
      "max_seq_len = 32\n[data]\nsynthetic_tokens = 30000\n"
      "[train]\nsteps = " + std::to_string(kSteps) + "\nmicro_batch = 2\nseq_len = 16\n[optim]\nlr = 0.003\n"
      "[parallel]\ndp = 2\ntimeout_s = 60\n[checkpoint]\nevery = 200\nkeep_last = 2\n",
      "test config");
  const QString worker = QStringLiteral(FLOTILLA_WORKER_PATH);

  ui::LivePage page;
  page.resize(1000, 700);
  page.show();

  // 1. Start (as the wizard's Finish does: LocalRuns::startOnNodes), follow, stop.
  {
    ui::StoreService store(qdb);
    ui::LocalRuns runs(QString::fromStdString(ws));
    runs.setStore(&store);
    runs.setWorkerPath(worker);
    config.run.name = "rr";
    config.train.steps = 1000000;  // stopped long before its end, however fast the machine
    QString error;
    ServiceRun* started = runs.startOnNodes(config, {QStringLiteral("a"), QStringLiteral("b")}, &error);
    QVERIFY2(started, qPrintable(error));
    ServiceRun& run = *started;
    QCOMPARE(runs.all().size(), 1);
    QCOMPARE(runs.count(), 1);  // one list: a run on nodes is a run like any other (issue 32)
    page.setRun(&run);
    QCOMPARE(page.followed(), static_cast<ui::RunHandle*>(&run));
    QCOMPARE(page.run(), &run);  // one handle class for every place (issue 32)
    QTRY_VERIFY_WITH_TIMEOUT(seen(run).points >= 40 || !run.isActive(), 120000);
    QVERIFY2(run.isActive(), qPrintable(run.stateText()));
    QVERIFY(page.checkpointButton()->isEnabled());  // SIGUSR1 to the master's launch
    QVERIFY(page.stopButton()->isEnabled());
    QVERIFY2(page.statusText().contains(QStringLiteral("Step ")), qPrintable(page.statusText()));
    const Seen mid = seen(run);
    QVERIFY2(mid.contiguous, "the page saw a step twice or missed one");
    QVERIFY2(mid.tail < mid.head, qPrintable(QStringLiteral("loss %1 -> %2").arg(mid.head).arg(mid.tail)));
    QVERIFY(run.storeId() > 0);
    QSignalSpy finished(&run, &ServiceRun::finished);
    page.stopButton()->click();
    QCOMPARE(run.state(), State::Stopping);
    QTRY_COMPARE_WITH_TIMEOUT(finished.count(), 1, 90000);
    QCOMPARE(run.state(), State::Stopped);
    const Seen end = seen(run);
    QVERIFY(end.contiguous);
    QVERIFY(end.points < 1000000);  // stopped early
    const std::string id = std::to_string(run.storeId());
    QCOMPARE(queryInt(dbPath, "SELECT COUNT(*) FROM runs WHERE id = " + id + " AND status = 'stopped'"), 1);
    QCOMPARE(queryInt(dbPath, "SELECT COUNT(*) FROM metrics WHERE run_id = " + id + " AND name = 'loss'"),
             int64_t(end.points));
    QCOMPARE(queryInt(dbPath, "SELECT MAX(step) FROM metrics WHERE run_id = " + id + " AND name = 'loss'"),
             int64_t(end.points));
    for (int i = 0; i < 2; ++i) {  // the stop reached both nodes: each recorded its worker's exit
      const std::string exitFile = fx.node(i).home + "/.flotilla/runs/rr-" + id + "/exit_code";
      QVERIFY2(std::filesystem::exists(exitFile), exitFile.c_str());
    }
    QCOMPARE(queryInt(dbPath, "SELECT COUNT(*) FROM runs WHERE id = " + id + " AND run_dir LIKE 'a:/%'"), 1);
  }
  QVERIFY(page.followed() == nullptr);

  // 2. Start, then the "app exits" mid-run (its LocalRuns destroyed, nothing stopped); the next
  // start's reattachRunning() re-attaches and sees it through.
  qint64 id2 = 0;
  {
    ui::StoreService store(qdb);
    ui::LocalRuns runs(QString::fromStdString(ws));
    runs.setStore(&store);
    runs.setWorkerPath(worker);
    config.run.name = "rr2";
    config.train.steps = kSteps;  // this one runs to its end
    ServiceRun* run = runs.startOnNodes(config, {QStringLiteral("a"), QStringLiteral("b")});
    QVERIFY(run);
    QTRY_VERIFY_WITH_TIMEOUT(seen(*run).points >= 20 || !run->isActive(), 120000);
    QVERIFY2(run->isActive(), qPrintable(run->stateText()));
    id2 = run->storeId();
  }  // destroyed without stop
  QVERIFY(id2 > 0);
  const std::string id = std::to_string(id2);
  QCOMPARE(queryInt(dbPath, "SELECT COUNT(*) FROM runs WHERE id = " + id + " AND status = 'running'"), 1);
  ui::StoreService store(qdb);
  ui::LocalRuns runs(QString::fromStdString(ws));
  runs.setStore(&store);
  QCOMPARE(runs.reattachRunning(), 1);
  QCOMPARE(runs.reattachRunning(), 0);  // already watched: not twice
  QCOMPARE(runs.all().size(), 1);
  ServiceRun* back = runs.all()[0];
  QCOMPARE(back->storeId(), id2);
  page.setRun(back);
  QSignalSpy finished(back, &ServiceRun::finished);
  QTRY_COMPARE_WITH_TIMEOUT(finished.count(), 1, 120000);
  QVERIFY2(back->state() == State::Completed, qPrintable(back->stateText()));
  const Seen all = seen(*back);
  QVERIFY2(all.contiguous && all.points == kSteps, qPrintable(QString::number(all.points)));
  QCOMPARE(back->lastStep(), qint64(kSteps));
  QCOMPARE(queryInt(dbPath, "SELECT COUNT(*) FROM runs WHERE id = " + id + " AND status = 'completed'"), 1);
  QCOMPARE(queryInt(dbPath, "SELECT COUNT(*) FROM metrics WHERE run_id = " + id + " AND name = 'loss'"),
           int64_t(kSteps));
  QCOMPARE(queryInt(dbPath, "SELECT COUNT(DISTINCT step) FROM metrics WHERE run_id = " + id + " AND name = 'loss'"),
           int64_t(kSteps));
  // Nothing left to re-attach.
  ui::LocalRuns again(QString::fromStdString(ws));
  again.setStore(&store);
  QCOMPARE(again.reattachRunning(), 0);
}

QTEST_MAIN(TestRemoteRunSsh)
#include "test_remoterun_ssh.moc"
