// The Live page's GPU plot from the run store's system samples of a run's nodes, and runs
// re-attached at start offered on the Live page. Real store files; the "remote" run is a stored
// run on two SSH nodes whose port refuses connections, so its ServiceRun re-attaches and fails at
// once: what is under test is the page's side (picker, follow, samples), not SSH.
//
// Samples: node-a GPUs 0 and 1 every 10 s from t0, node-b GPU 0 0.7 s later each time (nodes are
// sampled one after the other), so each instant is one row with three devices.
#include <QComboBox>
#include <QFile>
#include <QLabel>
#include <QSettings>
#include <QStandardPaths>
#include <QStackedWidget>
#include <QtTest>
#include <qcustomplot.h>

#include <cmath>
#include <filesystem>

#include "../remote/sshd_fixture.h"
#include "db/database.h"
#include "db/ingest.h"
#include "db/nodes.h"
#include "db/run_store.h"
#include "db/sql.h"
#include "db/writer.h"
#include "fake_worker.h"
#include "ui/live/livedashboard.h"
#include "ui/live/livepage.h"
#include "db/clusters.h"
#include "ui/live/nodesamples.h"
#include "ui/main/mainwindow.h"
#include "ui/plot/chartplot.h"
#include "ui/plot/rankbarsplot.h"
#include "ui/runs/servicerun.h"
#include "ui/runs/localruns.h"
#include "ui/runs/servicerun.h"
#include "ui/runs/storeservice.h"

using namespace flotilla;
using ui::LivePage;

namespace {

constexpr int kInstants = 9;

struct Store {
  std::string path;
  int64_t runId = 0, a = 0, b = 0;
};

QString scratch(const char* name) {
  const QString dir = QStringLiteral(FLOTILLA_TEST_TMP "/ui_live_nodes/") + QLatin1String(name);
  QDir(dir).removeRecursively();
  QDir().mkpath(dir);
  return dir;
}

// Two SSH nodes (their port refuses connections) and run `name` on both, running since `t0`.
Store makeStore(const QString& dir, const std::string& name, const std::string& runDir, double t0) {
  Store s;
  s.path = (dir + QStringLiteral("/flotilla.db")).toStdString();
  db::Database d(s.path);
  const int port = flotilla_test::free_port();  // nothing listens there
  for (const char* n : {"node-a", "node-b"}) {
    db::SshNode node;
    node.name = n;
    node.host = "127.0.0.1";
    node.port = port;
    node.user = "nobody";
    (std::string(n) == "node-a" ? s.a : s.b) = db::add_ssh_node(d, node);
  }
  db::NewRun nr;
  nr.name = name;
  nr.config_json = "{}";
  nr.target = "node-a,node-b";
  nr.run_dir = runDir;
  nr.created_at = t0 - 10;
  s.runId = db::create_run(d, nr);
  db::attach_node(d, s.runId, s.a, 1);
  db::attach_node(d, s.runId, s.b, 1);
  db::set_status(d, s.runId, db::RunStatus::kRunning, t0);
  return s;
}

// kInstants readings per device: node-a/0 util 50+k (memory 50 %), node-a/1 20+k (no memory
// reported), node-b/0 80-k (memory 25 %).
void insertSamples(const Store& s, double t0) {
  db::Database d(s.path);
  std::vector<db::SystemSample> rows;
  for (int k = 0; k < kInstants; ++k) {
    const double t = t0 + 10.0 * k;
    rows.push_back({s.a, 0, t, 50.0 + k, int64_t(40e9), int64_t(80e9), 300.0, 60.0});
    rows.push_back({s.a, 1, t, 20.0 + k, std::nullopt, std::nullopt, std::nullopt, std::nullopt});
    rows.push_back({s.b, 0, t + 0.7, 80.0 - k, int64_t(20e9), int64_t(80e9), 250.0, 55.0});
  }
  db::insert_system_samples(d, rows);
}

QStringList legend(ui::ChartPlot* plot) {
  auto* cp = qobject_cast<QCustomPlot*>(plot->plotWidget());
  QStringList names;
  for (int i = 2; i < cp->graphCount(); ++i) names << cp->graph(i)->name();  // 0, 1: reference, projection
  return names;
}

// A run that is active and never ends (the page must not leave it for a re-attached one).
class ActiveRun : public ui::RunHandle {
 public:
  using RunHandle::RunHandle;
  QString name() const override { return QStringLiteral("busy"); }
  State state() const override { return State::Running; }
  QString stateText() const override { return QStringLiteral("running"); }
  void stop() override {}
  void checkpointNow() override {}
  void kill() override {}
  qint64 elapsedMs() const override { return 0; }
  qint64 plannedSteps() const override { return 0; }
  qint64 lastStep() const override { return 0; }
  double lastLoss() const override { return NAN; }
  double lastValLoss() const override { return NAN; }
  double tokensPerSec() const override { return 0; }
  double mfu() const override { return 0; }
  const ui::SeriesStore& series() const override { return m_series; }
  const QVector<LogLine>& log() const override { return m_log; }
  std::shared_ptr<const runs::RecordFeed> feed() const override { return nullptr; }
  qint64 deliveredRecords() const override { return 0; }

 private:
  ui::SeriesStore m_series;
  QVector<LogLine> m_log;
};

}  // namespace

class TestLiveNodes : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase();
  void nodeSamplesOfAStoredRunBecomeGpuLines();
  void readerDeliversEachReadingOnce();
  void readerDeliversASlurmJobsReadings();
  void reattachedRemoteRunIsOfferedWithItsNodesGpus();
  void reattachedRunDoesNotReplaceAnActiveOne();
  void mainWindowShowsARunReattachedAtStart();
};

void TestLiveNodes::initTestCase() {
  // No ~/.ssh/config of the machine's user reaches the sessions.
  const QString home = scratch("home");
  qputenv("HOME", home.toUtf8());
  qunsetenv("SSH_AUTH_SOCK");
  QStandardPaths::setTestModeEnabled(true);
  QSettings::setPath(QSettings::NativeFormat, QSettings::UserScope, home + QStringLiteral("/config"));
}

void TestLiveNodes::nodeSamplesOfAStoredRunBecomeGpuLines() {
  const QString dir = scratch("stored");
  fake_worker::Synthetic syn;
  syn.steps = 60;
  syn.gpus = false;  // a CPU worker: the GPU plot can only come from the nodes
  const QString runDir = dir + QStringLiteral("/run");
  QDir().mkpath(runDir);
  {
    QFile f(runDir + QStringLiteral("/metrics.jsonl"));
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write(fake_worker::toJsonLines(fake_worker::syntheticRun(syn)));
  }
  const Store s = makeStore(dir, "stored-2node", runDir.toStdString(), syn.t0);
  insertSamples(s, syn.t0);
  {  // what its watcher stored of it
    db::Writer w(s.path);
    db::FileIngestor(w, s.runId, (runDir + QStringLiteral("/metrics.jsonl")).toStdString(), "metrics.jsonl").poll();
  }

  ui::ServiceRun run(QStringLiteral("stored-2node"), flotilla::runs::ServiceOptions{});
  run.setStoreId(s.runId);
  run.review(ui::RunHandle::State::Completed, QString::fromStdString(s.path));
  QTRY_COMPARE_WITH_TIMEOUT(run.lastStep(), qint64{syn.steps}, 5000);  // read from the store off the UI thread
  LivePage page;
  page.resize(1400, 900);
  page.setDatabasePath(QString::fromStdString(s.path));
  page.show();
  QVERIFY(QTest::qWaitForWindowExposed(&page));
  page.setRun(&run);
  ui::LiveDashboard* dash = page.dashboard();
  QTRY_VERIFY_WITH_TIMEOUT(dash->data().nodeGpus().rows() == kInstants, 5000);
  page.refresh();
  dash->refreshAll();

  const ui::LiveData& data = dash->data();
  QCOMPARE(data.nodeDevices(), (QStringList{"node-a/0", "node-a/1", "node-b/0"}));
  QVERIFY(data.nodeDeviceHasMemory(0) && !data.nodeDeviceHasMemory(1) && data.nodeDeviceHasMemory(2));
  const ui::ColumnTable& t = data.nodeGpus();
  for (int k = 0; k < kInstants; ++k) {
    QCOMPARE(t.values(ui::live_col::kWall)[k], 10.0 * k);  // on the records' clock (run_start = t0)
    QCOMPARE(t.values(ui::live_col::nodeUtil("node-a/0"))[k], 50.0 + k);
    QCOMPARE(t.values(ui::live_col::nodeUtil("node-a/1"))[k], 20.0 + k);
    QCOMPARE(t.values(ui::live_col::nodeUtil("node-b/0"))[k], 80.0 - k);  // 0.7 s later: same row
    QCOMPARE(t.values(ui::live_col::nodeMem("node-a/0"))[k], 50.0);
    QCOMPARE(t.values(ui::live_col::nodeMem("node-b/0"))[k], 25.0);
    QVERIFY(std::isnan(t.values(ui::live_col::nodeMem("node-a/1"))[k]));
  }
  // Step i happened at wall 5 + 1.3 i: readings sit between the steps around their time, and
  // before the first step at the first step.
  QCOMPARE(t.values(ui::live_col::kStep)[0], 1.0);
  QVERIFY(std::abs(t.values(ui::live_col::kStep)[4] - 35.0 / 1.3) < 1e-5);  // Unix times: ~1e-7 s apart
  QVERIFY(std::abs(t.values(ui::live_col::kTokens)[4] - 35.0 / 1.3 * 65536) < 1.0);

  QVERIFY(dash->gpuFromNodes());
  ui::ChartPlot* gpu = dash->gpuPlot();
  QCOMPARE(dash->plot(QStringLiteral("gpuPlot")), gpu);
  QCOMPARE(legend(gpu), (QStringList{"node-a/0", "node-a/0 memory", "node-a/1", "node-b/0", "node-b/0 memory"}));
  QVERIFY(!gpu->messageVisible());
  QCOMPARE(gpu->drawnPointCount(0), kInstants);
  QCOMPARE(gpu->drawnLastValue(0), 58.0);
  QCOMPARE(gpu->drawnLastValue(1), 50.0);
  QCOMPARE(gpu->drawnLastValue(2), 28.0);
  QCOMPARE(gpu->drawnLastValue(3), 72.0);
  // A stored run is shown from the store (never its file again), which keeps each rank's split of
  // a step (issue 34: the same feed for every run): the 2-rank run's two bars, as it trained.
  QCOMPARE(dash->data().rankWindow().size(), 2);

  // Wall-time axis: the same lines, x = seconds since the run started.
  dash->setXAxisKind(ui::XAxisKind::WallTime);
  dash->refreshAll();
  QCOMPARE(gpu->drawnPointCount(3), kInstants);
  const QString png = dir + QStringLiteral("/live-nodes.png");
  QVERIFY2(page.grab().save(png), qPrintable(png));

  // Following nothing drops the node lines; following the run again reads them again.
  page.setRun(nullptr);
  QVERIFY(!dash->gpuFromNodes());
  QCOMPARE(dash->data().nodeGpus().rows(), 0);
  page.setRun(&run);
  QTRY_COMPARE_WITH_TIMEOUT(dash->data().nodeGpus().rows(), qsizetype(kInstants), 5000);
}

void TestLiveNodes::readerDeliversEachReadingOnce() {
  const QString dir = scratch("reader");
  const double t0 = 1764495000.0;
  const Store s = makeStore(dir, "r", "node-a:/x/.flotilla/runs/r-1", t0);
  {
    db::Database d(s.path);
    db::insert_system_samples(d, {{s.a, 0, t0 - 50, 99.0, {}, {}, {}, {}},  // before the run: not its
                                  {s.a, 0, t0 + 5, 10.0, {}, {}, {}, {}}});
  }
  ui::NodeSampleBatch b = ui::readNodeSamples(QString::fromStdString(s.path), s.runId, {});
  QVERIFY2(b.error.isEmpty(), qPrintable(b.error));
  QCOMPARE(b.nodes, (QStringList{"node-a", "node-b"}));
  QCOMPARE(b.sshNodes, b.nodes);
  QCOMPARE(b.startedAt, t0);
  QCOMPARE(b.samples.size(), 1);
  QCOMPARE(b.samples[0].utilPct, 10.0);
  QVERIFY(std::isnan(b.samples[0].memUsed));
  // A second device committed later at the same instant, and a newer reading: each once.
  {
    db::Database d(s.path);
    db::insert_system_samples(d, {{s.a, 1, t0 + 5, 11.0, {}, {}, {}, {}}, {s.b, 0, t0 + 6, 12.0, {}, {}, {}, {}}});
  }
  b = ui::readNodeSamples(QString::fromStdString(s.path), s.runId, b.cursors);
  QCOMPARE(b.samples.size(), 2);
  QCOMPARE(b.samples[0].node, QStringLiteral("node-a"));
  QCOMPARE(b.samples[0].device, 1);
  QCOMPARE(b.samples[1].node, QStringLiteral("node-b"));
  b = ui::readNodeSamples(QString::fromStdString(s.path), s.runId, b.cursors);
  QCOMPARE(b.samples.size(), 0);
  // A missing store is an error, not an exception.
  b = ui::readNodeSamples(dir + QStringLiteral("/none.db"), s.runId, {});
  QVERIFY(!b.error.isEmpty());
}

// A Slurm run has no run_nodes: its readings (srun --overlap into the job) are its own, by Slurm's
// node name, each delivered once.
void TestLiveNodes::readerDeliversASlurmJobsReadings() {
  const QString dir = scratch("reader-slurm");
  const double t0 = 1764495000.0;
  const std::string path = (dir + QStringLiteral("/flotilla.db")).toStdString();
  int64_t runId = 0, other = 0;
  {
    db::Database d(path);
    db::NewRun nr;
    nr.name = "on-slurm";
    nr.config_json = "{}";
    nr.target = "slurm:flo";
    nr.created_at = t0 - 10;
    runId = db::create_run(d, nr);
    nr.name = "another";
    other = db::create_run(d, nr);
    db::set_status(d, runId, db::RunStatus::kRunning, t0);
    db::insert_job_samples(d, {{runId, "n1", 0, t0 - 5, 99.0, {}, {}, {}, {}},  // before its start
                               {runId, "n1", 0, t0 + 5, 37.0, int64_t(2) << 30, int64_t(80) << 30, 120.5, 41.0},
                               {runId, "n2", 0, t0 + 5, 64.0, {}, {}, {}, {}},
                               {other, "n1", 0, t0 + 6, 1.0, {}, {}, {}, {}}});  // another run's
  }
  ui::NodeSampleBatch b = ui::readNodeSamples(QString::fromStdString(path), runId, {});
  QVERIFY2(b.error.isEmpty(), qPrintable(b.error));
  QCOMPARE(b.nodes, (QStringList{"n1", "n2"}));
  QCOMPARE(b.sshNodes, b.nodes);
  QCOMPARE(b.samples.size(), 2);
  QCOMPARE(b.samples[0].node, QStringLiteral("n1"));
  QCOMPARE(b.samples[0].utilPct, 37.0);
  QCOMPARE(b.samples[0].memUsed, double(int64_t(2) << 30));
  QCOMPARE(b.samples[1].node, QStringLiteral("n2"));
  QVERIFY(std::isnan(b.samples[1].memTotal));
  // n2's second GPU committed later at the same instant, and a newer n1 reading: each once.
  {
    db::Database d(path);
    db::insert_job_samples(d, {{runId, "n2", 1, t0 + 5, 65.0, {}, {}, {}, {}},
                               {runId, "n1", 0, t0 + 10, 38.0, {}, {}, {}, {}}});
  }
  b = ui::readNodeSamples(QString::fromStdString(path), runId, b.cursors, b.jobCursors);
  QCOMPARE(b.samples.size(), 2);
  QCOMPARE(b.samples[0].node, QStringLiteral("n2"));
  QCOMPARE(b.samples[0].device, 1);
  QCOMPARE(b.samples[1].utilPct, 38.0);
  b = ui::readNodeSamples(QString::fromStdString(path), runId, b.cursors, b.jobCursors);
  QCOMPARE(b.samples.size(), 0);
}

void TestLiveNodes::reattachedRemoteRunIsOfferedWithItsNodesGpus() {
  const QString dir = scratch("reattach");
  const double t0 = std::floor(db::now_seconds()) - 100;
  const Store s = makeStore(dir, "rr", "node-a:/x/.flotilla/runs/rr-1", t0);
  insertSamples(s, t0);

  QStackedWidget window;  // the app's pages: the user is on another page than Live
  auto* other = new QLabel(QStringLiteral("Runs"), &window);
  auto* page = new LivePage(&window);
  window.addWidget(other);
  window.addWidget(page);
  window.setCurrentWidget(other);
  window.resize(1400, 900);
  window.show();

  ui::StoreService store(QString::fromStdString(s.path));
  ui::LocalRuns runs(dir);
  runs.setStore(&store);
  int asked = 0;
  runs.setPassphrasePrompt([&](const QString&, const QString&) {
    ++asked;
    return std::optional<std::string>();
  });
  page->setRuns(&runs);
  QVERIFY(page->followed() == nullptr);
  QCOMPARE(runs.reattachRunning(), 1);
  QCOMPARE(runs.all().size(), 1);
  ui::ServiceRun* run = runs.all()[0];
  QCOMPARE(runs.runForStoreId(s.runId), run);
  QCOMPARE(page->followed(), static_cast<ui::RunHandle*>(run));  // offered and taken: nothing else followed
  QCOMPARE(window.currentWidget(), other);                        // the user stays where they were
  QCOMPARE(page->runPicker()->count(), 1);
  QCOMPARE(page->runPicker()->itemText(0), QStringLiteral("rr (nodes node-a, node-b)"));
  QCOMPARE(page->runPicker()->currentIndex(), 0);
  QCOMPARE(page->titleText(), QStringLiteral("rr"));

  // The node refuses the connection: the run shows as failed, the page keeps following it and
  // reads its nodes' GPUs from the store, on the run's clock (started_at).
  QTRY_VERIFY_WITH_TIMEOUT(!run->isActive(), 10000);
  QCOMPARE(run->state(), ui::RunHandle::State::Failed);
  QCOMPARE(page->followed(), static_cast<ui::RunHandle*>(run));
  QTRY_COMPARE_WITH_TIMEOUT(page->dashboard()->data().nodeGpus().rows(), qsizetype(kInstants), 5000);
  QCOMPARE(page->dashboard()->data().nodeGpus().values(ui::live_col::kWall)[3], 30.0);
  QCOMPARE(page->dashboard()->data().nodeDevices().size(), 3);
  window.setCurrentWidget(page);
  page->dashboard()->refreshAll();
  QCOMPARE(legend(page->dashboard()->gpuPlot()).first(), QStringLiteral("node-a/0"));
  QCOMPARE(page->dashboard()->gpuPlot()->drawnLastValue(3), 72.0);
  QCOMPARE(asked, 0);  // refused before authentication: no passphrase asked
}

void TestLiveNodes::reattachedRunDoesNotReplaceAnActiveOne() {
  const QString dir = scratch("busy");
  const Store s = makeStore(dir, "rr2", "node-a:/x/.flotilla/runs/rr2-1", db::now_seconds() - 10);
  ActiveRun busy;
  LivePage page;
  page.setRun(&busy);
  ui::StoreService store(QString::fromStdString(s.path));
  ui::LocalRuns runs(dir);
  runs.setStore(&store);
  page.setRuns(&runs);
  QCOMPARE(runs.reattachRunning(), 1);
  QCOMPARE(page.followed(), static_cast<ui::RunHandle*>(&busy));  // not taken over
  QCOMPARE(page.runPicker()->count(), 2);                          // but offered
  QCOMPARE(page.runPicker()->currentIndex(), 0);
  QCOMPARE(page.runPicker()->itemText(1), QStringLiteral("rr2 (nodes node-a, node-b)"));
  QVERIFY(page.runPicker()->isVisibleTo(&page));
  // Choosing it in the picker follows it.
  page.runPicker()->setCurrentIndex(1);
  emit page.runPicker()->activated(1);
  QCOMPARE(page.followed(), static_cast<ui::RunHandle*>(runs.all()[0]));
  QTRY_VERIFY_WITH_TIMEOUT(!runs.all()[0]->isActive(), 10000);
}

void TestLiveNodes::mainWindowShowsARunReattachedAtStart() {
  const QString dir = scratch("window");
  const Store s = makeStore(dir, "rr3", "node-a:/x/.flotilla/runs/rr3-1", db::now_seconds() - 10);
  ui::WorkspaceInfo ws;
  ws.directory = dir;
  ws.databasePath = QString::fromStdString(s.path);
  ui::MainWindow w(ws);
  w.resize(1280, 800);
  w.show();
  QCOMPARE(w.reattachedRuns(), 1);
  QCOMPARE(w.currentPage(), int(ui::MainWindow::Runs));  // not switched to Live
  auto* live = qobject_cast<LivePage*>(w.page(ui::MainWindow::Live));
  QVERIFY(live->followed());
  QCOMPARE(live->followed()->name(), QStringLiteral("rr3"));
  QVERIFY(qobject_cast<ui::ServiceRun*>(live->followed()));
  QCOMPARE(live->runPicker()->itemText(0), QStringLiteral("rr3 (nodes node-a, node-b)"));
  QTRY_VERIFY_WITH_TIMEOUT(!live->followed()->isActive(), 10000);  // the node refuses: failed, still shown
  QCOMPARE(live->titleText(), QStringLiteral("rr3"));
}

QTEST_MAIN(TestLiveNodes)
#include "test_live_nodes.moc"
