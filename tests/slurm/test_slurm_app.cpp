// The desktop app trains on the real loopback Slurm (issue 20): the New Run wizard's "Slurm
// cluster" target, Finish, and the ServiceRun that submits (deploy, batch script, sbatch) and
// watches the job on its own thread, as a user does it. The run's state names the cluster and the
// job, every step arrives in the app and in the store once, the run ends completed and priced.
// Then a second run is left mid-way (the app closing: the job goes on under Slurm) and re-attached
// as the next app start does it (ServiceRun::reattachOne): the history is replayed from the
// cluster, the rest is tailed from the committed offset, and the store holds each step once. A
// third run is stopped from the app: it checkpoints and is stored as stopped; then it is resumed
// (its job submitted again) and runs from that checkpoint to completion. A fourth run (dp 2 over
// the two nodes) is stopped and resumed from the Runs view on another layout through the Resume
// dialog (its cluster offered first, dp 1 x tp 2 on the job's same two ranks, the planner's fit
// shown): the worker re-cuts the checkpoint, every step is stored once and the stored config says
// tp 2 (issue 32). Last, the Clusters page
// probes a cluster whose login key is new to its workspace (declined, then trusted).
//
// GPU readings come from inside each job's allocation (srun --overlap, nvidia-smi on every node).
// The test machine has no GPU, so the login node's PATH puts a stand-in nvidia-smi first (the only
// part that is not real): it prints one GPU per node in nvidia-smi's CSV, busier on n2.
#include <QApplication>
#include <QComboBox>
#include <QDir>
#include <QFile>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSpinBox>
#include <QTest>

#include <fstream>
#include <memory>
#include <set>

#include "check.h"
#include "db/clusters.h"
#include "db/costs.h"
#include "db/queries.h"
#include "db/run_store.h"
#include "db/sql.h"
#include "engine/config/config_io.h"
#include "slurm_fixture.h"
#include "ui/clusters/clustersmodel.h"
#include "ui/clusters/clusterspage.h"
#include "ui/runs/localruns.h"
#include "ui/runs/relaunchdialog.h"
#include "ui/runs/storerunsmodel.h"
#include "ui/runs/storerunsview.h"
#include "ui/wizard/memorybar.h"
#include "ui/runs/servicerun.h"
#include "ui/runs/runspage.h"
#include "ui/live/livedashboard.h"
#include "ui/live/livepage.h"
#include "ui/runs/storeservice.h"
#include "ui/wizard/configdraft.h"
#include "ui/wizard/runwizard.h"

using namespace flotilla_test;
using flotilla::ui::RunHandle;

namespace {

std::string config_text(const std::string& name, int steps) {
  return "[run]\nname = \"" + name +
         "\"\nseed = 5\nthreads = 1\n"
         "[model]\npreset = \"custom\"\nn_layer = 2\nn_head = 2\nn_embd = 32\nvocab_size = 128\nmax_seq_len "
         "= 32\n"
         "[data]\nsynthetic_tokens = 30000\n"
         "[train]\nsteps = " +
         std::to_string(steps) +
         "\nmicro_batch = 2\nseq_len = 16\n"
         "[parallel]\ndp = 2\nzero = 1\ntimeout_s = 60\n"
         "[checkpoint]\nevery = 20\nkeep_last = 2\n";
}

// Loss rows of the run in the store, and how many distinct steps they cover.
int lossRows(const std::string& dbPath, int64_t runId, int& distinct) {
  flotilla::db::Database db(dbPath);
  flotilla::db::Stmt st(db, "SELECT count(*), count(DISTINCT step) FROM metrics WHERE run_id = ?1 AND name = 'loss'");
  st.bind(1, runId);
  st.step();
  distinct = static_cast<int>(st.i64(1));
  return static_cast<int>(st.i64(0));
}

QString logOf(const RunHandle* run) {
  QString out;
  for (const auto& line : run->log()) out += line.text + QLatin1Char('\n');
  return out;
}

template <typename T>
T* child(QWidget* page, const char* name) {
  T* w = page->findChild<T*>(QLatin1String(name));
  if (!w) qFatal("no child %s", name);
  return w;
}

}  // namespace

int main(int argc, char** argv) {
  std::string why;
  const std::string conf = fixture_slurm_conf(why);
  if (conf.empty()) {
    std::printf("SKIP: %s\n", why.c_str());
    return kSkipExit;
  }
  SshdFixture fx("slurm_app");
  if (const std::string w = start_login_node(fx, conf); !w.empty()) {
    std::printf("SKIP: %s\n", w.c_str());
    return kSkipExit;
  }
  {
    const std::string bin = fx.node(0).home + "/fakebin";
    QDir().mkpath(QString::fromStdString(bin));
    std::ofstream(bin + "/nvidia-smi")
        << "#!/bin/sh\n# stand-in for nvidia-smi --query-gpu=... --format=csv,noheader,nounits\n"
           "case \"$SLURMD_NODENAME\" in n2) u=64;; *) u=37;; esac\n"
           "echo \"0, Stand-in GPU, 81559, 2048, $u, 41, 120.5, 550.54\"\n";
    QFile::setPermissions(QString::fromStdString(bin + "/nvidia-smi"),
                          QFileDevice::ReadOwner | QFileDevice::WriteOwner | QFileDevice::ExeOwner);
    std::ofstream(fx.node(0).home + "/.bash_profile", std::ios::app) << "export PATH=\"$HOME/fakebin:$PATH\"\n";
  }
  qunsetenv("SSH_AUTH_SOCK");  // the cluster's key file, not an agent of the machine running the test
  QApplication app(argc, argv);

  CliWorkspace ws(fx.root());
  const std::string added = add_trusted_cluster(ws, fx, "flo");
  CHECK_MSG(added.empty(), "%s", added.c_str());
  const ProcResult r = ws.run({"clusters", "probe", "flo"});  // trusted now: partitions, nodes and CPUs stored for the wizard
  CHECK_MSG(r.exit_code == 0, "%s", r.output.c_str());
  CHECK(ws.run({"clusters", "price", "flo", "cpu", "--cpu-hour", "36"}).exit_code == 0);

  const QString dbPath = QString::fromStdString(ws.db());
  const QString workspace = QString::fromStdString(fx.root() + "/app-ws");
  flotilla::ui::StoreService store(dbPath);
  flotilla::ui::LocalRuns runs(workspace);
  runs.setStore(&store);
  runs.setWorkerPath(QStringLiteral(FLOTILLA_WORKER_PATH));
  runs.setPassphrasePrompt([](const QString&, const QString&) { return std::optional<std::string>(); });
  flotilla::ui::RunsPage page(&runs);
  page.resize(1100, 750);
  page.show();

  // 1. The wizard: cluster flo, partition cpu, 2 nodes, a 10-minute limit; Finish.
  constexpr int kSteps = 300;  // seconds of running: the watcher sees the job RUNNING and reads its GPUs
  page.newRunButton()->click();
  flotilla::ui::RunWizard* wizard = page.wizard();
  CHECK(wizard != nullptr);
  if (!wizard) return summary("test_slurm_app");
  CHECK(QTest::qWaitFor([&] { return wizard->draft()->targets().size() >= 2 && !wizard->draft()->storedClusters().isEmpty(); },
                        15000));
  wizard->setConfig(flotilla::parse_config_toml(config_text("app-slurm", kSteps), "test"));
  while (wizard->currentId() != flotilla::ui::RunWizard::Hardware) wizard->next();
  QWidget* hw = wizard->currentPage();
  auto* target = child<QComboBox>(hw, "target");
  target->setCurrentIndex(target->count() - 1);
  CHECK(wizard->clusterLaunch().has_value());
  CHECK_MSG(target->currentText().startsWith(QStringLiteral("Slurm cluster flo (2 partition(s), 2 node(s)")), "%s",
            target->currentText().toStdString().c_str());
  child<QComboBox>(hw, "slurmPartition")->setCurrentText(QStringLiteral("cpu"));
  child<QSpinBox>(hw, "slurmNodes")->setValue(2);
  auto* time = child<QLineEdit>(hw, "slurmTime");
  time->setText(QStringLiteral("00:10:00"));
  emit time->textEdited(time->text());
  CHECK_MSG(wizard->currentPage()->isComplete(), "hardware page: %s",
            wizard->draft()->problemsUnder({QString()}).join(QStringLiteral("; ")).toStdString().c_str());
  const QString shots = QStringLiteral(FLOTILLA_SCREENSHOT_DIR);
  wizard->resize(1000, 860);
  CHECK(wizard->grab().save(shots + QStringLiteral("/wizard-slurm-hardware.png")));
  while (wizard->currentId() != flotilla::ui::RunWizard::Review) wizard->next();
  CHECK(QTest::qWaitFor([&] { return wizard->currentPage()->isComplete(); }, 10000));
  CHECK(wizard->grab().save(shots + QStringLiteral("/wizard-slurm-review.png")));
  wizard->button(QWizard::FinishButton)->click();
  CHECK(runs.all().size() == 1);
  if (runs.all().size() != 1) return summary("test_slurm_app");
  flotilla::ui::ServiceRun* run = runs.all().front();
  // The Live page follows it as any run.
  flotilla::ui::LivePage live;
  live.resize(1400, 900);
  live.setDatabasePath(dbPath);
  live.show();
  live.setRun(run);
  CHECK(QTest::qWaitFor([&] { return !run->jobId().isEmpty() || !run->isActive(); }, 60000));
  CHECK_MSG(run->stateText().contains(QStringLiteral("on slurm cluster flo, job ") + run->jobId()),
            "state: %s", run->stateText().toStdString().c_str());
  CHECK(QTest::qWaitFor([&] { return !run->isActive(); }, 180000));
  CHECK_MSG(run->state() == RunHandle::State::Completed, "state %s\n%s", run->stateText().toStdString().c_str(),
            logOf(run).toStdString().c_str());
  CHECK_MSG(run->lastStep() == kSteps, "last step %lld", static_cast<long long>(run->lastStep()));
  CHECK_MSG(logOf(run).contains(QStringLiteral("submitted job")), "%s", logOf(run).toStdString().c_str());
  // The GPU plot draws each node's GPU, read by srun --overlap while the job ran.
  CHECK_MSG(logOf(run).contains(QStringLiteral("GPU readings of job ") + run->jobId() +
                                QStringLiteral(" by srun --overlap: n1: 1 GPU(s), n2: 1 GPU(s)")),
            "%s", logOf(run).toStdString().c_str());
  CHECK(QTest::qWaitFor([&] { return live.dashboard()->data().nodeDevices().size() >= 2; }, 15000));
  CHECK_MSG(live.dashboard()->data().nodeDevices() == (QStringList{"n1/0", "n2/0"}), "%s",
            live.dashboard()->data().nodeDevices().join(QStringLiteral(", ")).toStdString().c_str());
  // The dashboard switches its GPU plot to nodes at its next refresh after the readings arrive
  // (a timer): waited for, not read at once (CI once read it between the two).
  CHECK(QTest::qWaitFor([&] { return live.dashboard()->gpuFromNodes(); }, 5000));
  live.refresh();
  live.dashboard()->refreshAll();
  QTest::qWait(200);
  CHECK(live.grab().save(shots + QStringLiteral("/live-slurm.png")));
  {
    flotilla::db::Database db(ws.db());
    const flotilla::db::Run stored = flotilla::db::get_run(db, run->storeId());
    CHECK(stored.status == flotilla::db::RunStatus::kCompleted);
    CHECK(stored.target == "slurm:flo");
    CHECK_MSG(stored.usd_per_hour && *stored.usd_per_hour == 72.0, "usd/h %g", stored.usd_per_hour.value_or(-1));
    CHECK(flotilla::db::run_cost_usd(db, run->storeId()) > 0);
    const auto job = flotilla::db::find_slurm_job(db, run->storeId());
    CHECK(job && job->job_id == run->jobId().toStdString() && job->nodes == 2 && job->partition == "cpu");
    // Device-hours count what Slurm allocated (TRES cpu=2: one CPU per node's task).
    CHECK_MSG(job && job->alloc_devices == 2, "allocated devices %lld",
              static_cast<long long>(job ? job->alloc_devices.value_or(-1) : -2));
    const auto accruals = flotilla::db::run_accruals(db, run->storeId());
    CHECK(!accruals.empty());
    for (const auto& a : accruals) CHECK_MSG(a.devices == 2, "accrual of %lld devices", static_cast<long long>(a.devices));
    int distinct = 0;
    const int rows = lossRows(ws.db(), run->storeId(), distinct);
    CHECK_MSG(rows == kSteps && distinct == kSteps, "%d loss rows over %d steps", rows, distinct);
    bool n1 = false, n2 = false;
    for (const auto& g : flotilla::db::job_samples(db, run->storeId())) {
      n1 = n1 || (g.node == "n1" && g.device == 0 && g.utilization == 37.0 && g.memory_used == int64_t{2048} << 20);
      n2 = n2 || (g.node == "n2" && g.device == 0 && g.utilization == 64.0 && g.power_w == 120.5);
    }
    CHECK_MSG(n1 && n2, "GPU readings stored: n1 %d, n2 %d", n1, n2);
  }

  // 2. Left mid-way (the app closing), then re-attached as the next start does it.
  constexpr int kLong = 300;
  flotilla::ui::ClusterLaunch launch;
  launch.cluster = QStringLiteral("flo");
  launch.partition = QStringLiteral("cpu");
  launch.nodes = 2;
  launch.timeLimit = QStringLiteral("00:10:00");
  // Another session's runs (as another app window would be): destroyed below, the job left going.
  const auto session = [&] {
    auto s = std::make_unique<flotilla::ui::LocalRuns>(workspace);
    s->setStore(&store);
    s->setWorkerPath(QStringLiteral(FLOTILLA_WORKER_PATH));
    s->setPassphrasePrompt([](const QString&, const QString&) { return std::optional<std::string>(); });
    return s;
  };
  auto leftSession = session();
  flotilla::ui::ServiceRun* left =
      leftSession->startOnCluster(flotilla::parse_config_toml(config_text("app-left", kLong), "test"), launch);
  CHECK(left != nullptr);
  if (!left) return summary("test_slurm_app");
  CHECK(QTest::qWaitFor([&] { return left->lastStep() >= 5 || !left->isActive(); }, 120000));
  const qint64 leftId = left->storeId();
  const qint64 seenBefore = left->lastStep();
  CHECK_MSG(left->isActive() && leftId > 0, "state %s\n%s", left->stateText().toStdString().c_str(),
            logOf(left).toStdString().c_str());
  leftSession.reset();  // leaves the job running under Slurm and the run as the store has it
  {
    flotilla::db::Database db(ws.db());
    // Steps arrived, so Slurm was asked at once: running, not queued.
    const flotilla::db::RunStatus st = flotilla::db::get_run(db, leftId).status;
    CHECK_MSG(st == flotilla::db::RunStatus::kRunning, "left as %s", flotilla::db::to_string(st));
  }
  QString error;
  const double reattachedAt = flotilla::db::now_seconds();
  auto againSession = session();
  flotilla::ui::ServiceRun* again = againSession->attachRun(leftId, &error);
  CHECK_MSG(again != nullptr, "reattach: %s", error.toStdString().c_str());
  if (!again) return summary("test_slurm_app");
  CHECK(again->cluster() == QStringLiteral("flo"));
  CHECK(!again->canCheckpoint());
  CHECK(QTest::qWaitFor([&] { return !again->isActive(); }, 240000));
  CHECK_MSG(again->state() == RunHandle::State::Completed, "state %s\n%s", again->stateText().toStdString().c_str(),
            logOf(again).toStdString().c_str());
  CHECK_MSG(again->lastStep() == kLong, "last step %lld (seen %lld before leaving)",
            static_cast<long long>(again->lastStep()), static_cast<long long>(seenBefore));
  CHECK_MSG(logOf(again).contains(QStringLiteral("re-attached to slurm cluster flo, job ")), "%s",
            logOf(again).toStdString().c_str());
  int distinct = 0;
  const int rows = lossRows(ws.db(), leftId, distinct);
  CHECK_MSG(rows == kLong && distinct == kLong, "%d loss rows over %d steps", rows, distinct);
  {
    // The re-attached watch reads the GPUs again, at once (then every 10 s, which the rest of the
    // run may not last).
    flotilla::db::Database db(ws.db());
    std::set<double> instants;
    for (const auto& g : flotilla::db::job_samples(db, leftId))
      if (g.node == "n2" && g.time >= reattachedAt) instants.insert(g.time);
    CHECK_MSG(!instants.empty(), "no GPU reading of n2 after the re-attach");
  }
  std::printf("left at step %lld, re-attached, completed %d steps, each stored once\n",
              static_cast<long long>(seenBefore), kLong);

  // 3. Stop from the app: TERM to the job's tasks, a checkpoint, the run stopped (not failed).
  constexpr int kEndless = 1500;  // far more than the steps before the stop arrives
  auto stopSession = session();
  flotilla::ui::ServiceRun* stopped =
      stopSession->startOnCluster(flotilla::parse_config_toml(config_text("app-stop", kEndless), "test"), launch);
  CHECK(stopped != nullptr);
  if (!stopped) return summary("test_slurm_app");
  CHECK(QTest::qWaitFor([&] { return stopped->lastStep() >= 5 || !stopped->isActive(); }, 120000));
  stopped->stop();
  CHECK(QTest::qWaitFor([&] { return !stopped->isActive(); }, 180000));
  CHECK_MSG(stopped->state() == RunHandle::State::Stopped, "state %s\n%s", stopped->stateText().toStdString().c_str(),
            logOf(stopped).toStdString().c_str());
  CHECK_MSG(logOf(stopped).contains(QStringLiteral("checkpoint at step")), "%s",
            logOf(stopped).toStdString().c_str());
  {
    flotilla::db::Database db(ws.db());
    const flotilla::db::Run stored = flotilla::db::get_run(db, stopped->storeId());
    CHECK_MSG(stored.status == flotilla::db::RunStatus::kStopped, "stored as %s", flotilla::db::to_string(stored.status));
    CHECK(stopped->lastStep() < kEndless);
  }

  // 4. Resume from the Runs page's store view: the job is submitted again on the cluster and
  // continues from the stop's checkpoint to the end; each step is stored once.
  const qint64 stoppedId = stopped->storeId();
  const QString oldJob = stopped->jobId();
  QString resumeError;
  flotilla::ui::ServiceRun* resumed = runs.resumeRun(stoppedId, &resumeError);
  CHECK_MSG(resumed != nullptr, "resume: %s", resumeError.toStdString().c_str());
  if (!resumed) return summary("test_slurm_app");
  CHECK(QTest::qWaitFor([&] { return !resumed->isActive(); }, 240000));
  CHECK_MSG(resumed->state() == RunHandle::State::Completed, "state %s\n%s", resumed->stateText().toStdString().c_str(),
            logOf(resumed).toStdString().c_str());
  CHECK_MSG(resumed->jobId() != oldJob && logOf(resumed).contains(QStringLiteral("(was job ") + oldJob + QLatin1Char(')')),
            "%s", logOf(resumed).toStdString().c_str());
  {
    int distinct = 0;
    const int rows = lossRows(ws.db(), stoppedId, distinct);
    CHECK_MSG(rows == kEndless && distinct == kEndless, "%d loss rows over %d steps", rows, distinct);
    flotilla::db::Database db(ws.db());
    CHECK(flotilla::db::get_run(db, stoppedId).status == flotilla::db::RunStatus::kCompleted);
  }
  // A completed run is not resumed again: the reason, and no ServiceRun.
  CHECK(runs.resumeRun(stoppedId, &resumeError) == nullptr);
  CHECK_MSG(resumeError.contains(QStringLiteral("is completed")), "%s", resumeError.toStdString().c_str());

  // 4b. Resume on another layout from the Runs view: dp 2 -> dp 1 x tp 2 on the job's two ranks.
  {
    constexpr int kRelayout = 400;
    auto relayoutSession = session();
    flotilla::ui::ServiceRun* before = relayoutSession->startOnCluster(
        flotilla::parse_config_toml(config_text("app-relayout", kRelayout), "test"), launch);
    CHECK(before != nullptr);
    if (!before) return summary("test_slurm_app");
    CHECK(QTest::qWaitFor([&] { return !before->lastCheckpoint().isEmpty() || !before->isActive(); }, 120000));
    CHECK_MSG(before->isActive(), "state %s\n%s", before->stateText().toStdString().c_str(),
              logOf(before).toStdString().c_str());
    before->stop();
    CHECK(QTest::qWaitFor([&] { return !before->isActive(); }, 180000));
    CHECK_MSG(before->state() == RunHandle::State::Stopped, "state %s\n%s", before->stateText().toStdString().c_str(),
              logOf(before).toStdString().c_str());
    const qint64 relayoutId = before->storeId();
    flotilla::ui::StoreRunsView view(&store, &runs);
    CHECK(QTest::qWaitFor([&] { return view.model()->rowOfId(relayoutId) >= 0; }, 10000));
    QString offered, fit;
    view.answerRelaunch = [&](flotilla::ui::RelaunchDialog& d) {
      offered = d.targetBox()->currentText();
      d.dpBox()->setValue(1);
      d.tpBox()->setValue(2);
      d.zeroBox()->setValue(0);
      fit = d.fitLabel()->text();
      return d.fit().planned && d.memoryBar()->used() > 0 && d.okButton()->isEnabled();
    };
    flotilla::ui::ServiceRun* after = view.resumeElsewhere(relayoutId);
    CHECK_MSG(offered.startsWith(QStringLiteral("Slurm cluster flo")) && offered.contains(QStringLiteral("where it ran")),
              "offered: %s", offered.toStdString().c_str());
    CHECK_MSG(after != nullptr, "fit: %s", fit.toStdString().c_str());
    if (!after) return summary("test_slurm_app");
    CHECK(after->storeId() == relayoutId);
    CHECK(QTest::qWaitFor([&] { return !after->isActive(); }, 240000));
    CHECK_MSG(after->state() == RunHandle::State::Completed, "state %s\n%s", after->stateText().toStdString().c_str(),
              logOf(after).toStdString().c_str());
    CHECK_MSG(logOf(after).contains(QStringLiteral("re-cut")), "%s", logOf(after).toStdString().c_str());
    int distinct = 0;
    const int rows = lossRows(ws.db(), relayoutId, distinct);
    CHECK_MSG(rows == kRelayout && distinct == kRelayout, "%d loss rows over %d steps", rows, distinct);
    flotilla::db::Database db(ws.db());
    const flotilla::RunConfig stored = flotilla::parse_config_toml(flotilla::db::get_run(db, relayoutId).config_toml, "stored");
    CHECK_MSG(stored.parallel.tp == 2 && stored.parallel.dp == 1, "stored dp %d tp %d", stored.parallel.dp,
              stored.parallel.tp);
    std::printf("resumed a Slurm run stopped at step %lld on dp 1 x tp 2: %d steps, each stored once\n",
                static_cast<long long>(before->lastStep()), kRelayout);
  }

  // 5. The Clusters page probes a cluster of another workspace whose login key it has never seen:
  // the fingerprint is shown, declined (nothing stored), then accepted (trusted and probed).
  {
    CliWorkspace other(fx.root() + "/second");
    const ProcResult add =
        other.run({"clusters", "add", "flo", "--login", "127.0.0.1", "--port", std::to_string(fx.node(0).port),
                   "--user", local_user_name(), "--key", fx.client_key()});
    CHECK_MSG(add.exit_code == 0, "%s", add.output.c_str());
    flotilla::ui::ClustersPage clusters(QString::fromStdString(other.db()));
    clusters.resize(1100, 400);
    clusters.show();
    CHECK(QTest::qWaitFor([&] { return !clusters.busy() && clusters.model()->rowCount() == 1; }, 10000));
    CHECK(!clusters.model()->row(0).probed);
    QString shown;
    bool accept = false;
    clusters.setConfirmTrust([&](const QString& cluster, const QString& fp) {
      shown = cluster + QLatin1Char(' ') + fp;
      return accept;
    });
    clusters.probeButton()->click();
    CHECK(QTest::qWaitFor([&] { return !clusters.busy(); }, 30000));
    CHECK_MSG(shown.startsWith(QStringLiteral("flo SHA256:")) && clusters.statusText().contains(QStringLiteral("not trusted")),
              "asked '%s'; status %s", shown.toStdString().c_str(), clusters.statusText().toStdString().c_str());
    {
      flotilla::db::Database db(other.db());
      CHECK(flotilla::db::get_cluster(db, "flo").probe_json.empty());
    }
    accept = true;
    clusters.probeButton()->click();
    CHECK(QTest::qWaitFor([&] { return !clusters.busy() && clusters.model()->row(0).probed; }, 30000));
    CHECK_MSG(clusters.statusText().contains(QStringLiteral("cluster flo probed: Slurm ")), "%s",
              clusters.statusText().toStdString().c_str());
    CHECK(clusters.model()->row(0).nodes == 2);
    // Trusted now: the next probe asks nothing.
    shown.clear();
    clusters.probeButton()->click();
    CHECK(QTest::qWaitFor([&] { return !clusters.busy(); }, 30000));
    CHECK(shown.isEmpty() && clusters.statusText().contains(QStringLiteral("probed")));
    CHECK(clusters.grab().save(shots + QStringLiteral("/clusters-probed.png")));
  }
  return summary("test_slurm_app");
}
