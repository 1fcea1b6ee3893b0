// The Clusters page over a real store: a cluster whose stored probe is the loopback Slurm's
// captured output (tests/remote/data/slurm/probe-fixture.txt, one node drained here), a price, and
// two of our runs on it (one pending with Slurm's reason, one completed). The model passes
// QAbstractItemModelTester and shows Slurm's version, nodes idle / allocated / down, the
// partitions with their prices and our jobs in plain words; the page loads them off the UI thread.
#include <QAbstractItemModelTester>
#include <QLayout>
#include <QLineEdit>
#include <QPushButton>
#include <QLabel>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QtTest>

#include "db/clusters.h"
#include "runs/cluster_admin.h"
#include "db/run_store.h"
#include "remote/slurm_cluster.h"
#include "ui/clusters/clusterdialog.h"
#include "ui/clusters/clustersmodel.h"
#include "ui/clusters/clusterspage.h"
#include "worker_run.h"

using namespace flotilla;
using namespace flotilla::ui;

class TestClusters : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase();
  void modelShowsTheStoredCluster();
  void pageLoadsInTheBackground();
  void addClusterStoresItAsTheCliDoes();

 private:
  QTemporaryDir m_tmp;
  QString m_db;
};

void TestClusters::initTestCase() {
  QVERIFY(m_tmp.isValid());
  m_db = m_tmp.filePath(QStringLiteral("flotilla.db"));
  db::Database store(m_db.toStdString());
  db::SlurmCluster c;
  c.name = "flo";
  c.login_host = "login.example";
  c.port = 2222;
  const int64_t id = db::add_cluster(store, c);
  remote::ClusterProbe p = remote::parse_cluster_probe(flotilla_test::read_file(
      std::string(FLOTILLA_SOURCE_DIR) + "/tests/remote/data/slurm/probe-fixture.txt"));
  QCOMPARE(p.nodes.size(), size_t{2});
  p.nodes[1].state = "drained";
  db::set_cluster_probe(store, id, remote::cluster_probe_json(p), db::now_seconds());
  db::set_partition_price(store, id, db::PartitionPrice{"cpu", std::nullopt, 0.05});
  const char* names[] = {"waiting", "done"};
  for (int i = 0; i < 2; ++i) {
    db::NewRun nr;
    nr.name = names[i];
    nr.target = "slurm:flo";
    const int64_t run = db::create_run(store, nr);
    db::SlurmJob j;
    j.run_id = run;
    j.cluster_id = id;
    j.job_id = std::to_string(40 + i);
    j.run_dir = "/home/u/.flotilla/runs/x";
    j.state = i == 0 ? "PENDING" : "COMPLETED";
    j.reason = i == 0 ? "Resources" : "";
    j.submitted_at = 1000 + i;
    db::add_slurm_job(store, j);
    db::set_status(store, run, db::RunStatus::kQueued);
  }
}

void TestClusters::modelShowsTheStoredCluster() {
  ClustersModel model;
  QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
  model.setRows(loadClusterRows(m_db));
  QCOMPARE(model.rowCount(), 1);
  auto text = [&](int column) { return model.index(0, column).data().toString(); };
  QCOMPARE(text(ClustersModel::Name), QStringLiteral("flo"));
  QCOMPARE(text(ClustersModel::Login), QStringLiteral("login.example:2222"));
  QCOMPARE(text(ClustersModel::Slurm), QStringLiteral("22.05.8"));
  QCOMPARE(text(ClustersModel::Nodes), QStringLiteral("2: 1 idle, 0 allocated, 1 down"));
  QCOMPARE(text(ClustersModel::Gpus), QStringLiteral("0"));
  QVERIFY2(
      text(ClustersModel::Partitions).startsWith(QStringLiteral("cpu (default, up, 02:00:00, $0.05/CPU-h)")),
      qPrintable(text(ClustersModel::Partitions)));
  QVERIFY(text(ClustersModel::Partitions).contains(QStringLiteral("short (up, 00:10:00, unpriced)")));
  const QString jobs = text(ClustersModel::Jobs);
  QVERIFY2(jobs.contains(QStringLiteral("waiting PENDING: waiting for free nodes (job 40)")),
           qPrintable(jobs));
  QVERIFY2(jobs.contains(QStringLiteral("done COMPLETED (job 41)")), qPrintable(jobs));
  QVERIFY(
      model.index(0, ClustersModel::Slurm).data(Qt::ToolTipRole).toString().contains(QStringLiteral("off")));
  QCOMPARE(model.row(0).jobsActive, 2);  // both are queued in the store
}

void TestClusters::pageLoadsInTheBackground() {
  ClustersPage page(m_db);
  QSignalSpy loaded(&page, &ClustersPage::loaded);
  page.show();
  QVERIFY(loaded.wait(10000));
  QCOMPARE(page.model()->rowCount(), 1);
  QVERIFY(page.findChild<QLabel*>(QStringLiteral("clustersStatus"))
              ->text()
              .contains(QStringLiteral("1 cluster")));
  ClustersPage empty(m_tmp.filePath(QStringLiteral("none.db")));
  QSignalSpy emptyLoaded(&empty, &ClustersPage::loaded);
  empty.show();
  QVERIFY(emptyLoaded.wait(10000));
  QCOMPARE(empty.model()->rowCount(), 0);
}

// Issue 34 #21: a cluster is set up from the page. "Add cluster…" checks the fields with the CLI's
// own check (runs::validate_cluster_fields, each problem beside its field, nothing stored), stores
// through runs::add_cluster as `flotilla clusters add` does, then probes it (the login node's host
// key is checked there, as the Nodes page does). Probe is disabled with nothing to probe; the page
// has the other pages' margins.
void TestClusters::addClusterStoresItAsTheCliDoes() {
  const QString path = m_tmp.filePath(QStringLiteral("add.db"));
  { db::Database created(path.toStdString()); }
  ClustersPage page(path);
  page.setConfirmTrust([](const QString&, const QString&) { return false; });
  QSignalSpy loaded(&page, &ClustersPage::loaded);
  page.show();
  QVERIFY(loaded.wait(10000));
  QCOMPARE(page.model()->rowCount(), 0);
  QVERIFY(!page.probeButton()->isEnabled());
  QVERIFY(page.addButton()->isEnabled());
  QVERIFY(page.statusText().contains(QStringLiteral("Add cluster")));
  const QMargins m = page.layout()->contentsMargins();
  QCOMPARE(m, QMargins(28, 24, 28, 16));

  page.addButton()->click();
  ClusterDialog* dialog = page.addDialog();
  QVERIFY(dialog);
  const QString canary = m_tmp.filePath(QStringLiteral("CANARY"));
  dialog->editor(QStringLiteral("name"))->setText(QStringLiteral("hpc"));
  dialog->editor(QStringLiteral("login"))->setText(QStringLiteral("127.0.0.1"));
  dialog->editor(QStringLiteral("port"))->setText(QStringLiteral("0x16"));
  dialog->editor(QStringLiteral("partition"))->setText(QStringLiteral("cpu;touch ") + canary);
  dialog->editor(QStringLiteral("account"))->setText(QStringLiteral("$(touch ") + canary + QLatin1Char(')'));
  dialog->accept();
  QVERIFY(dialog->isVisible());  // refused: every problem beside its field
  for (const char* field : {"port", "partition", "account"})
    QVERIFY2(dialog->problemLabel(QLatin1String(field))->isVisible() &&
                 !dialog->problemLabel(QLatin1String(field))->text().isEmpty(),
             field);
  QVERIFY(!dialog->problemLabel(QStringLiteral("name"))->isVisible());
  // The same problems as the command line's check, word for word.
  const auto cli = runs::validate_cluster_fields(dialog->fields());
  QCOMPARE(cli.size(), size_t{3});
  QCOMPARE(dialog->problemLabel(QStringLiteral("partition"))->text(), QString::fromStdString(cli[1].message));
  QVERIFY(db::list_clusters(db::Database(path.toStdString())).empty());

  // Valid: stored as `flotilla clusters add hpc --login 127.0.0.1 --port 1 --partition cpu` would.
  dialog->editor(QStringLiteral("port"))->setText(QStringLiteral("1"));  // nothing listens: the probe fails
  dialog->editor(QStringLiteral("partition"))->setText(QStringLiteral("cpu"));
  dialog->editor(QStringLiteral("account"))->clear();
  QSignalSpy added(&page, &ClustersPage::added);
  QSignalSpy probed(&page, &ClustersPage::probed);
  dialog->accept();
  QVERIFY(added.count() || added.wait(10000));
  QCOMPARE(added.at(0).at(0).toBool(), true);
  const db::SlurmCluster c = db::get_cluster(db::Database(path.toStdString()), "hpc");
  QCOMPARE(c.login_host, std::string("127.0.0.1"));
  QCOMPARE(c.port, 1);
  QCOMPARE(c.partition, std::string("cpu"));
  QVERIFY(c.account.empty() && c.user.empty());
  QVERIFY(!QFile::exists(canary));
  // Then it is probed: the login node does not answer, and the page says so.
  QVERIFY(probed.count() || probed.wait(30000));
  QCOMPARE(probed.at(0).at(0).toBool(), false);
  QVERIFY2(!page.statusText().isEmpty(), "the probe's failure is shown");
  QTRY_COMPARE_WITH_TIMEOUT(page.model()->rowCount(), 1, 10000);
  QTRY_VERIFY_WITH_TIMEOUT(page.probeButton()->isEnabled(), 10000);  // one cluster: Probe probes it
  // A second one with the same name is refused in the dialog.
  page.addButton()->click();
  dialog = page.addDialog();
  QVERIFY(dialog);
  dialog->editor(QStringLiteral("name"))->setText(QStringLiteral("hpc"));
  dialog->editor(QStringLiteral("login"))->setText(QStringLiteral("127.0.0.1"));
  dialog->accept();
  QVERIFY(dialog->isVisible());
  QVERIFY(dialog->problemLabel(QStringLiteral("name"))->text().contains(QStringLiteral("taken")));
  dialog->reject();
}

QTEST_MAIN(TestClusters)
#include "test_clusters.moc"
