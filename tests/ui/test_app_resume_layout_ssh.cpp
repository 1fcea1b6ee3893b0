// The app resumes a run on SSH nodes on another layout (issue 32 part 3), against a real sshd
// "node" on 127.0.0.1 (tests/remote/sshd_fixture.h) and the real worker deployed to it: a tiny
// GPT-2 trained on node a with two ranks (dp 2) is stopped after a checkpoint; the Runs view's
// Resume (the app refused to resume node runs before issue 32) asks the RelaunchDialog, which offers
// the run's own node first and shows the planner's fit; answered with dp 1, the same row continues
// on node a on one rank from the checkpoint the worker re-cuts, to its last step. Checked: every
// step stored exactly once (1..N), the stored config now one rank, the worker's words that the
// checkpoint was re-cut, the run completed; and the node run's checkpoints listed from the app
// (the service lists them on the master over SSH).
#include <QComboBox>
#include <QLabel>
#include <QPushButton>
#include <QSignalSpy>
#include <QSpinBox>
#include <QtTest>

#include <cstdio>
#include <filesystem>
#include <set>

#include "../remote/sshd_fixture.h"
#include "db/database.h"
#include "db/nodes.h"
#include "db/queries.h"
#include "db/run_store.h"
#include "db/sql.h"
#include "engine/config/config_io.h"
#include "remote/node_fields.h"
#include "remote/session.h"
#include "ui/runs/localruns.h"
#include "ui/runs/relaunchdialog.h"
#include "ui/runs/servicerun.h"
#include "ui/runs/storerunsmodel.h"
#include "ui/runs/storerunsview.h"
#include "ui/runs/storeservice.h"
#include "ui/wizard/memorybar.h"

using namespace flotilla;
using flotilla::ui::RunHandle;
using flotilla::ui::ServiceRun;

namespace {

constexpr int kSteps = 2000;

QString logOf(const RunHandle* run) {
  QStringList lines;
  for (const RunHandle::LogLine& l : run->log()) lines << l.level + QStringLiteral(": ") + l.text;
  return lines.join(QLatin1Char('\n'));
}

}  // namespace

class TestAppResumeLayoutSsh : public QObject {
  Q_OBJECT

 private slots:
  void nodeRunStoppedThenResumedOnOneRank();
};

void TestAppResumeLayoutSsh::nodeRunStoppedThenResumedOnOneRank() {
  flotilla_test::SshdFixture fx("ui_resume_layout_ssh");
  const std::string clientHome = fx.root() + "/client-home";
  if (const std::string why = flotilla_test::start_app_nodes(fx, 1, clientHome); !why.empty()) {
    std::printf("SKIP: %s\n", why.c_str());
    return;
  }
  const std::string ws = fx.root() + "/ws";
  std::filesystem::create_directories(ws);
  const std::string dbPath = ws + "/flotilla.db";
  {
    db::Database d(dbPath);
    db::SshNode n;
    n.name = "a";
    n.host = "127.0.0.1";
    n.port = fx.node(0).port;
    n.user = flotilla_test::local_user_name();
    n.key_path = fx.client_key();
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
  const RunConfig config = parse_config_toml(
      "[run]\nname = \"nodes-relayout\"\nseed = 7\nthreads = 1\n"
      "[model]\npreset = \"custom\"\nn_layer = 2\nn_head = 2\nn_embd = 32\nvocab_size = 128\n"
      "max_seq_len = 32\n[data]\nsynthetic_tokens = 60000\n"
      "[train]\nsteps = " +
          std::to_string(kSteps) +
          "\nmicro_batch = 2\nseq_len = 16\n[optim]\nlr = 0.003\n"
          "[parallel]\ndp = 2\ntimeout_s = 60\n[checkpoint]\nevery = 50\nkeep_last = 3\n",
      "test config");

  ui::StoreService store(QString::fromStdString(dbPath), nullptr, 100);
  ui::LocalRuns runs(QString::fromStdString(ws));
  runs.setStore(&store);
  runs.setWorkerPath(QStringLiteral(FLOTILLA_WORKER_PATH));
  runs.setPassphrasePrompt([](const QString&, const QString&) { return std::optional<std::string>(); });

  // 1. Two ranks on node a, stopped after a checkpoint.
  QString error;
  ServiceRun* first = runs.startOnNodes(config, {QStringLiteral("a")}, &error);
  QVERIFY2(first, qPrintable(error));
  QTRY_VERIFY_WITH_TIMEOUT(!first->lastCheckpoint().isEmpty() || !first->isActive(), 120000);
  QVERIFY2(first->isActive(), qPrintable(first->stateText() + QLatin1Char('\n') + logOf(first)));
  const qint64 id = first->storeId();
  QVERIFY(id > 0);
  QSignalSpy firstDone(first, &ServiceRun::finished);
  first->stop();
  QVERIFY(firstDone.count() || firstDone.wait(90000));
  QVERIFY2(first->state() == RunHandle::State::Stopped,
           qPrintable(first->stateText() + QLatin1Char('\n') + logOf(first)));
  const int64_t stoppedAt = db::query_int(
      db::Database(dbPath),
      "SELECT MAX(step) FROM metrics WHERE run_id = " + std::to_string(id) + " AND name = 'loss'");
  QVERIFY2(stoppedAt < kSteps, "stopped before its end");

  // 2. Its checkpoints, listed from the app: on the master node, over SSH.
  flotilla::ui::StoreRunsView view(&store, &runs);
  QTRY_VERIFY(view.model()->rowOfId(id) >= 0);
  QSignalSpy listed(&view, &flotilla::ui::StoreRunsView::checkpointsListed);
  QList<flotilla::ui::CheckpointChoice> checkpoints;
  view.showCheckpoints = [&](const QList<flotilla::ui::CheckpointChoice>& list) { checkpoints = list; };
  view.listCheckpoints(id);
  QVERIFY(listed.wait(60000));
  QVERIFY2(listed.at(0).at(1).toString().isEmpty(), qPrintable(listed.at(0).at(1).toString()));
  QVERIFY(!checkpoints.isEmpty());
  QVERIFY2(checkpoints.first().label.contains(QStringLiteral("on a:")),
           qPrintable(checkpoints.first().label));

  // 3. Resume through the dialog on one rank, on the same node.
  bool asked = false;
  QString fitText, where;
  view.answerRelaunch = [&](flotilla::ui::RelaunchDialog& d) {
    asked = true;
    where = d.targetBox()->currentText();
    if (!where.contains(QStringLiteral("where it ran"))) return false;
    d.dpBox()->setValue(1);
    fitText = d.fitLabel()->text();
    return d.fit().planned && d.memoryBar()->used() > 0 && d.okButton()->isEnabled();
  };
  ServiceRun* resumed = view.resumeElsewhere(id);
  QVERIFY(asked);
  QVERIFY2(resumed, qPrintable(where + QLatin1Char('\n') + fitText));
  QCOMPARE(resumed->storeId(), id);
  QSignalSpy done(resumed, &ServiceRun::finished);
  QVERIFY(done.count() || done.wait(240000));
  const QString log = logOf(resumed);
  QVERIFY2(resumed->state() == RunHandle::State::Completed,
           qPrintable(resumed->stateText() + QLatin1Char('\n') + log));
  QVERIFY2(log.contains(QStringLiteral("re-cut")), qPrintable(log));

  // 4. Every step once; the stored config now says one rank.
  const db::Database d(dbPath);
  const std::string rid = std::to_string(id);
  QCOMPARE(db::query_int(d, "SELECT COUNT(*) FROM metrics WHERE run_id = " + rid + " AND name = 'loss'"),
           int64_t{kSteps});
  QCOMPARE(db::query_int(
               d, "SELECT COUNT(DISTINCT step) FROM metrics WHERE run_id = " + rid + " AND name = 'loss'"),
           int64_t{kSteps});
  const db::Run row = db::get_run(d, id);
  QCOMPARE(row.status, db::RunStatus::kCompleted);
  QCOMPARE(parse_config_toml(row.config_toml, "stored").parallel.dp, 1);

  // 5. Sample and export from the node run's newest checkpoint (fetched from node a to this
  // machine by the runs service): what the app refused for node runs before issue 32.
  QSignalSpy sampled(&view, &flotilla::ui::StoreRunsView::sampled);
  QString sample;
  view.showSample = [&](const QString& text) { sample = text; };
  QVERIFY(view.sampleModel(id, QStringLiteral("unused: no tokenizer")));
  QVERIFY(sampled.wait(120000));
  QVERIFY2(sampled.at(0).at(0).toBool(), qPrintable(sampled.at(0).at(1).toString()));
  QVERIFY2(sample.startsWith(QStringLiteral("Token ids")), qPrintable(sample));
  QSignalSpy exported(&view, &flotilla::ui::StoreRunsView::weightsExported);
  const QString out = QString::fromStdString(ws + "/exported/");
  QVERIFY(view.exportWeights(id, out));
  QVERIFY(exported.wait(120000));
  QVERIFY2(exported.at(0).at(0).toBool(), qPrintable(exported.at(0).at(1).toString()));
  QVERIFY(std::filesystem::exists(ws + "/exported/model.safetensors"));
}

QTEST_MAIN(TestAppResumeLayoutSsh)
#include "test_app_resume_layout_ssh.moc"
