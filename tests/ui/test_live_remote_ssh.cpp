// Runs on SSH nodes as the Live page shows them, against real sshd "nodes" on 127.0.0.1
// (tests/remote/sshd_fixture.h) whose only accepted key for the app is passphrase-protected:
//
// 1. Passphrase prompt: a stored 'running' run on node a (never started there) is re-attached;
//    connecting needs the key's passphrase, asked on the UI thread while the run's thread waits:
//    by a prompt function (right: authenticated, then "never started"; wrong: "wrong
//    passphrase"), then through the real dialog (typed into its password field: authenticated;
//    cancelled: "no passphrase given").
// 2. A real run over nodes a and b (dp=2, one rank each) started as the wizard does, followed on
//    the Live page: per-rank step times of both ranks (rank 0's records carry every rank's), and
//    GPU readings the test writes into system_samples for a and b (as the node monitor does)
//    drawn as "a/0", "b/0" lines.
// Finally S10: the passphrase is in no file of the workspace (store, WAL, mirrors) and no log.
#include <QApplication>
#include <QComboBox>
#include <QDirIterator>
#include <QLineEdit>
#include <QSignalSpy>
#include <QTimer>
#include <QtTest>

#include <cstdio>
#include <filesystem>

#include "../remote/sshd_fixture.h"
#include "db/database.h"
#include "db/nodes.h"
#include "db/run_store.h"
#include "db/sql.h"
#include "engine/config/config_io.h"
#include "remote/node_fields.h"
#include "ui/live/livedashboard.h"
#include "ui/live/livepage.h"
#include "ui/plot/chartplot.h"
#include "ui/runs/localruns.h"
#include "ui/runs/passphraseprompt.h"
#include "ui/runs/servicerun.h"
#include "ui/runs/storeservice.h"

using namespace flotilla;
using ui::ServiceRun;
using State = ui::RunHandle::State;

namespace {

const std::string kSecret = "Flotilla-S3cret pass";

// Answers the next passphrase dialog: types `text` and connects, or cancels when `text` is null.
// Records what the dialog said.
struct DialogAnswer {
  QString prompt;
  bool password = false;
  int answered = 0;
};
void answerDialogs(QObject* owner, DialogAnswer* out, std::optional<QString> text) {
  auto* timer = new QTimer(owner);
  timer->setInterval(30);
  QObject::connect(timer, &QTimer::timeout, owner, [timer, out, text] {
    auto* dialog = qobject_cast<ui::PassphraseDialog*>(QApplication::activeModalWidget());
    if (!dialog) return;
    out->prompt = dialog->promptText();
    out->password = dialog->passphraseEdit()->echoMode() == QLineEdit::Password;
    ++out->answered;
    if (text) {
      QTest::keyClicks(dialog->passphraseEdit(), *text);
      dialog->accept();
    } else {
      dialog->reject();
    }
    timer->stop();
    timer->deleteLater();
  });
  timer->start();
}

// Re-attaches every stored running run with `prompt` and waits for the one run to end.
QString reattachAndWait(const QString& dbPath, const QString& ws, const ui::PassphrasePrompt& prompt,
                        QVector<ui::RunHandle::LogLine>* log = nullptr) {
  ui::StoreService store(dbPath);
  ui::LocalRuns runs(ws);
  runs.setStore(&store);
  if (prompt) runs.setPassphrasePrompt(prompt);
  if (runs.reattachRunning() != 1) return QStringLiteral("nothing re-attached");
  ServiceRun* run = runs.all()[0];
  QSignalSpy finished(run, &ServiceRun::finished);
  if (!finished.wait(30000) && finished.isEmpty()) return QStringLiteral("no end");
  if (log) *log += run->log();
  return run->errorText();
}

bool fileHas(const QString& path, const QByteArray& needle) {
  QFile f(path);
  return f.open(QIODevice::ReadOnly) && f.readAll().contains(needle);
}

}  // namespace

class TestLiveRemoteSsh : public QObject {
  Q_OBJECT

 private slots:
  void passphraseAskedAndRunFollowedWithNodeGpus();
};

void TestLiveRemoteSsh::passphraseAskedAndRunFollowedWithNodeGpus() {
  flotilla_test::SshdFixture fx("ui_live_remote_ssh");
  const std::string clientHome = fx.root() + "/client-home";
  if (const std::string why = flotilla_test::start_app_nodes(fx, 2, clientHome); !why.empty()) {
    std::printf("SKIP: %s\n", why.c_str());
    return;
  }

  // The app's key for the nodes: passphrase-protected, authorized on both.
  const std::string locked = fx.root() + "/keys/locked";
  const std::string keygen = "ssh-keygen -q -t ed25519 -N '" + kSecret + "' -C flotilla-locked -f '" + locked +
                             "' </dev/null >/dev/null && cat '" + locked + ".pub' >> '" + fx.root() +
                             "/keys/authorized_keys'";
  QCOMPARE(std::system(keygen.c_str()), 0);

  const std::string ws = fx.root() + "/ws";
  std::filesystem::create_directories(ws);
  const std::string dbPath = ws + "/flotilla.db";
  const QString qdb = QString::fromStdString(dbPath), qws = QString::fromStdString(ws);
  int64_t probeRun = 0;
  {
    db::Database d(dbPath);
    for (int i = 0; i < 2; ++i) {
      db::SshNode n;
      n.name = i == 0 ? "a" : "b";
      n.host = "127.0.0.1";
      n.port = fx.node(i).port;
      n.user = flotilla_test::local_user_name();
      n.key_path = locked;
      const int64_t id = db::add_ssh_node(d, n);
      remote::SessionOptions o = fx.options(i);  // the user's "Trust this key" (with the test's own key)
      o.known_hosts_path = remote::workspace_known_hosts_path(dbPath);
      remote::Session s(o);
      flotilla_test::trust_and_connect(s);
      if (i == 0) {
        db::NewRun nr;
        nr.name = "pp";
        nr.config_json = "{}";
        nr.target = "a";
        nr.run_dir = "a:" + fx.node(0).home + "/.flotilla/runs/pp-1";
        probeRun = db::create_run(d, nr);
        db::attach_node(d, probeRun, id, 1);
        db::set_status(d, probeRun, db::RunStatus::kRunning);
      }
    }
  }
  QVector<ui::RunHandle::LogLine> logs;

  // 1a. A prompt function, the right passphrase: authenticated (the run was never started there).
  QStringList asked;
  QString error = reattachAndWait(qdb, qws, [&](const QString& node, const QString& key) {
    asked << node << key;
    return std::optional<std::string>(kSecret);
  }, &logs);
  QCOMPARE(asked, (QStringList{"a", QString::fromStdString(locked)}));
  QVERIFY2(error.contains(QStringLiteral("never started")), qPrintable(error));
  // 1b. Wrong passphrase.
  error = reattachAndWait(qdb, qws, [](const QString&, const QString&) { return std::optional<std::string>("nope"); }, &logs);
  QVERIFY2(error.contains(QStringLiteral("wrong passphrase")), qPrintable(error));
  // 1c. The real dialog, typed into.
  DialogAnswer typed;
  answerDialogs(this, &typed, QString::fromStdString(kSecret));
  error = reattachAndWait(qdb, qws, {}, &logs);
  QCOMPARE(typed.answered, 1);
  QVERIFY(typed.password);
  QVERIFY2(typed.prompt.contains(QStringLiteral("Node a")) && typed.prompt.contains(QString::fromStdString(locked)),
           qPrintable(typed.prompt));
  QVERIFY2(error.contains(QStringLiteral("never started")), qPrintable(error));
  // 1d. The dialog cancelled.
  DialogAnswer cancelled;
  answerDialogs(this, &cancelled, std::nullopt);
  error = reattachAndWait(qdb, qws, {}, &logs);
  QCOMPARE(cancelled.answered, 1);
  QVERIFY2(error.contains(QStringLiteral("no passphrase given")), qPrintable(error));
  {
    db::Database d(dbPath);  // out of the way of the next re-attach
    db::set_status(d, probeRun, db::RunStatus::kFailed, 0, "test: probe run done");
  }

  // 2. A real run over a and b, followed on the Live page.
  RunConfig config = parse_config_toml(
      "[run]\nname = \"live2\"\nseed = 7\nthreads = 1\n"
      "[model]\npreset = \"custom\"\nn_layer = 2\nn_head = 2\nn_embd = 32\nvocab_size = 128\n"
      "max_seq_len = 32\n[data]\nsynthetic_tokens = 30000\n"
      "[train]\nsteps = 3000\nmicro_batch = 2\nseq_len = 16\n[optim]\nlr = 0.003\n"
      "[parallel]\ndp = 2\ntimeout_s = 60\n",
      "test config");
  ui::LivePage page;
  page.resize(1400, 900);
  page.show();
  QVERIFY(QTest::qWaitForWindowExposed(&page));
  ui::StoreService store(qdb);
  ui::LocalRuns runs(qws);
  runs.setStore(&store);
  runs.setWorkerPath(QStringLiteral(FLOTILLA_WORKER_PATH));
  int prompts = 0;
  runs.setPassphrasePrompt([&](const QString&, const QString&) {
    ++prompts;
    return std::optional<std::string>(kSecret);
  });
  page.setRuns(&runs);
  QString why;
  ServiceRun* run = runs.startOnNodes(config, {QStringLiteral("a"), QStringLiteral("b")}, &why);
  QVERIFY2(run, qPrintable(why));
  page.setRun(run);
  QCOMPARE(page.runPicker()->count(), 1);
  QTRY_VERIFY_WITH_TIMEOUT(run->storeId() > 0 && run->lastStep() >= 5, 120000);
  QVERIFY(prompts >= 2);  // each node's session asked once
  // The node monitor's readings, written as it writes them, while the run goes on.
  {
    db::Database d(dbPath);
    const int64_t a = db::get_ssh_node(d, "a").id, b = db::get_ssh_node(d, "b").id;
    const double now = std::max(db::now_seconds(), db::get_run(d, run->storeId()).started_at.value_or(0) + 1);
    db::insert_system_samples(d, {{a, 0, now, 61.0, int64_t(30e9), int64_t(80e9), {}, {}},
                                  {b, 0, now + 0.5, 47.0, int64_t(20e9), int64_t(80e9), {}, {}}});
  }
  ui::LiveDashboard* dash = page.dashboard();
  QTRY_VERIFY_WITH_TIMEOUT(dash->data().nodeDevices().contains(QStringLiteral("b/0")), 10000);
  QVERIFY2(run->isActive(), "the readings were read by the 2 s poll while the run went on");
  QVERIFY(dash->data().nodeDevices().contains(QStringLiteral("a/0")));
  QTRY_VERIFY_WITH_TIMEOUT(dash->gpuFromNodes(), 2000);
  // Per-rank timing: rank 0's records carry both ranks.
  QTRY_VERIFY_WITH_TIMEOUT(dash->data().rankWindow().size() == 2, 30000);
  QCOMPARE(dash->data().worldSize(), 2);
  // Checkpoint now, on a run on nodes: the master's launch gets SIGUSR1, training goes on, and the
  // checkpoint reaches the store with reason "request".
  QVERIFY(run->canCheckpoint());
  run->checkpointNow();
  QTRY_VERIFY_WITH_TIMEOUT(
      [&] {
        db::Database d(dbPath);
        return db::query_int(d, "SELECT COUNT(*) FROM checkpoints WHERE run_id = " + std::to_string(run->storeId()) +
                                    " AND reason = 'request'") >= 1;
      }(),
      60000);
  QSignalSpy finished(run, &ServiceRun::finished);
  QTRY_COMPARE_WITH_TIMEOUT(finished.count(), 1, 180000);
  QVERIFY2(run->state() == State::Completed, qPrintable(run->stateText()));
  dash->refreshAll();
  QVERIFY(!dash->gpuPlot()->messageVisible());
  QVERIFY(dash->data().rankWindow()[1].total() > 0);
  QVERIFY2(page.grab().save(qws + QStringLiteral("/live-remote.png")), "screenshot");
  logs += run->log();

  // S10: the passphrase is nowhere at rest.
  const QByteArray secret = QByteArray::fromStdString(kSecret);
  QStringList hits;
  for (const QString& root : {qws, QString::fromStdString(clientHome)}) {
    QDirIterator it(root, QDir::Files | QDir::Hidden, QDirIterator::Subdirectories);
    while (it.hasNext()) {
      const QString f = it.next();
      if (fileHas(f, secret)) hits << f;
    }
  }
  QVERIFY2(hits.isEmpty(), qPrintable(hits.join(QStringLiteral(", "))));
  for (const auto& line : logs) QVERIFY2(!line.text.contains(QString::fromStdString(kSecret)), qPrintable(line.text));
}

QTEST_MAIN(TestLiveRemoteSsh)
#include "test_live_remote_ssh.moc"
