// The Nodes page against a real sshd on 127.0.0.1 (tests/remote/sshd_fixture.h), no main window.
// A store with one node, first at a port that never answers, edited to the sshd's port while that
// probe hangs: the stale "unreachable" is dropped and the new address probed at once. The page
// reports "unknown host key" with the SHA256 fingerprint `ssh-keygen -lf` gives for the server's
// public key and opens the host key prompt; known_hosts stays empty, also after a trust of a wrong
// fingerprint. Clicking "Trust this key" writes the workspace known_hosts, the node turns reachable
// with a latency, and the fake GPU reading lands in the store. Then sshd is restarted with another
// ed25519 key and with an ECDSA key: each shows "host key changed", no prompt opens, and even an
// explicit trust of the new fingerprint leaves known_hosts byte for byte unchanged.
//
// Decision: the node has no GPU, so its HOME holds a fake `nvidia-smi` (one CSV line) put on the
// PATH by ~/.bashrc, which Debian's bash reads for commands run by sshd; the sample written is then
// a real probe's parse of real process output, not a value injected into the monitor.
#include <QLabel>
#include <QPushButton>
#include <QSignalSpy>
#include <QTableView>
#include <QtTest>
#include <cstdio>

#include "../remote/sshd_fixture.h"
#include "db/database.h"
#include "db/nodes.h"
#include "remote/node_fields.h"
#include "ui/nodes/hostkeydialog.h"
#include "ui/nodes/machineprobe.h"
#include "ui/nodes/nodemonitor.h"
#include "ui/nodes/nodesmodel.h"
#include "ui/nodes/nodespage.h"

using namespace flotilla;
using flotilla::ui::NodesModel;
using flotilla::ui::NodeState;

namespace {

constexpr int64_t kMiB = int64_t{1} << 20;
const QString kNode = QStringLiteral("lab");

// "SHA256:..." of a public key file, as `ssh-keygen -lf` prints it ("" on failure).
QString keygenFingerprint(const std::string& pubPath) {
  const std::string cmd = "ssh-keygen -lf '" + pubPath + "' 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return {};
  char buf[512] = {};
  const size_t n = fread(buf, 1, sizeof buf - 1, p);
  pclose(p);
  const QStringList parts = QString::fromUtf8(buf, static_cast<qsizetype>(n)).split(QLatin1Char(' '));
  return parts.size() >= 2 && parts[1].startsWith(QStringLiteral("SHA256:")) ? parts[1] : QString();
}

// A TCP port on 127.0.0.1 whose handshakes the kernel completes but where nobody ever speaks SSH.
int silentListener(int* port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(fd, 4) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0)
    return -1;
  *port = ntohs(a.sin_port);
  return fd;
}

}  // namespace

class TestNodesSsh : public QObject {
  Q_OBJECT

 private slots:
  void trustThenRefuseChangedKey();
};

void TestNodesSsh::trustThenRefuseChangedKey() {
  using flotilla_test::SshdFixture;
  if (const std::string why = SshdFixture::unavailable(); !why.empty()) {
    std::printf("SKIP: %s\n", why.c_str());
    return;
  }
  SshdFixture fx("ui_nodes_ssh");
  if (!fx.start(0)) {
    std::printf("SKIP: sshd cannot run as this user here: %s\n", fx.last_error().c_str());
    return;
  }
  // No ~/.ssh/config, default keys or agent of the person running the tests.
  const std::string clientHome = fx.root() + "/client-home";
  std::filesystem::create_directories(clientHome);
  qputenv("HOME", QByteArray::fromStdString(clientHome));
  qunsetenv("SSH_AUTH_SOCK");

  // The node's fake GPU.
  const std::string nodeHome = fx.node(0).home;
  std::filesystem::create_directories(nodeHome + "/bin");
  flotilla_test::write_text(nodeHome + "/.bashrc", "export PATH=\"$HOME/bin:$PATH\"\n");
  flotilla_test::write_text(nodeHome + "/bin/nvidia-smi",
                            "#!/bin/sh\necho '0, NVIDIA Test GPU, 81920, 1024, 37, 45, 120.50, 550.54.15'\n");
  std::filesystem::permissions(nodeHome + "/bin/nvidia-smi", std::filesystem::perms::owner_all);

  int silentPort = 0;
  int silentFd = silentListener(&silentPort);
  QVERIFY(silentFd >= 0);

  const std::string ws = fx.root() + "/ws";
  std::filesystem::create_directories(ws);
  const std::string dbPath = ws + "/flotilla.db";
  int64_t nodeId = 0;
  {
    db::Database d(dbPath);
    db::SshNode n;
    n.name = kNode.toStdString();
    n.host = "127.0.0.1";
    n.port = silentPort;  // first a port that never answers; the sshd's port once a probe hangs there
    n.user = flotilla_test::local_user_name();
    n.key_path = fx.client_key();
    nodeId = db::add_ssh_node(d, n);
  }
  const std::string knownHosts = remote::workspace_known_hosts_path(dbPath);
  QCOMPARE(QString::fromStdString(knownHosts), QString::fromStdString(ws + "/known_hosts"));
  const QString fp0 = keygenFingerprint(fx.host_key(0, "ed25519") + ".pub");
  QVERIFY2(fp0.size() > 20, "ssh-keygen -lf gave no fingerprint");

  ui::MachineProbe probe;  // never started: the local machine is not under test here
  ui::NodesPage page(&probe);
  page.resize(1000, 700);
  QSignalSpy reloaded(&page, &ui::NodesPage::nodesReloaded);
  page.setDatabasePath(QString::fromStdString(dbPath));
  QTRY_COMPARE_WITH_TIMEOUT(reloaded.count(), 1, 5000);
  QCOMPARE(page.model()->nodeCount(), 1);
  QCOMPARE(page.monitor()->busy(), 0);  // hidden: nothing probes

  NodesModel* model = page.model();
  const int row = model->rowOf(kNode);
  QCOMPARE(row, 1);
  auto state = [&] { return model->status(kNode).state; };
  auto statusText = [&] { return model->index(row, NodesModel::Status).data().toString(); };
  const auto t0 = std::chrono::steady_clock::now();

  // 0. Shown: the first probe hangs on the silent port. The node is edited to the sshd's port
  // meanwhile; when the old probe then fails, its "unreachable" describes the old address and is
  // dropped, and the new address is probed at once.
  page.show();
  QTest::qWait(300);
  QCOMPARE(page.monitor()->busy(), 1);
  {
    db::Database d(dbPath);
    db::SshNode n = db::get_ssh_node(d, kNode.toStdString());
    n.port = fx.node(0).port;
    db::update_ssh_node(d, kNode.toStdString(), n);
  }
  QSignalSpy statuses(page.monitor(), &ui::NodeMonitor::statusChanged);
  page.reload();
  QTRY_COMPARE_WITH_TIMEOUT(reloaded.count(), 2, 5000);
  QCOMPARE(page.monitor()->busy(), 1);  // still hanging on the old address
  close(silentFd);                      // resets the connection waiting in its backlog
  silentFd = -1;

  // 1. The new address: the probe meets an unknown key, reports its fingerprint and asks.
  QTRY_VERIFY_WITH_TIMEOUT(state() == NodeState::UnknownHostKey, 3000);  // before the 5 s tick
  for (const auto& args : statuses)
    QVERIFY2(args[1].value<ui::NodeStatus>().state != NodeState::Unreachable,
             qPrintable(args[1].value<ui::NodeStatus>().message));
  QCOMPARE(statusText(), QStringLiteral("unknown host key"));
  QCOMPARE(model->status(kNode).fingerprint, fp0);
  QTRY_VERIFY_WITH_TIMEOUT(page.hostKeyDialog() != nullptr, 2000);
  ui::HostKeyDialog* dialog = page.hostKeyDialog();
  QCOMPARE(dialog->node(), kNode);
  QCOMPARE(dialog->fingerprint(), fp0);
  auto* fpLabel = dialog->findChild<QLabel*>(QStringLiteral("fingerprint"));
  QVERIFY(fpLabel);
  QCOMPARE(fpLabel->text(), fp0);
  QVERIFY(flotilla_test::read_file(knownHosts).empty());  // nothing trusted yet
  QVERIFY(model->index(row, NodesModel::Latency).data().toString().isEmpty());

  // A fingerprint other than the presented one (a stale or mistyped confirmation) writes nothing.
  QSignalSpy trusted(page.monitor(), &ui::NodeMonitor::trustFinished);
  QTRY_COMPARE_WITH_TIMEOUT(page.monitor()->busy(), 0, 5000);
  page.monitor()->trust(kNode, QStringLiteral("SHA256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"));
  QTRY_COMPARE_WITH_TIMEOUT(trusted.count(), 1, 10000);
  QVERIFY(!trusted[0][1].toBool());
  QVERIFY2(trusted[0][2].toString().contains(fp0), qPrintable(trusted[0][2].toString()));
  QTRY_COMPARE_WITH_TIMEOUT(page.monitor()->busy(), 0, 5000);
  QCOMPARE(state(), NodeState::UnknownHostKey);
  QCOMPARE(model->status(kNode).fingerprint, fp0);
  QVERIFY(flotilla_test::read_file(knownHosts).empty());
  QCOMPARE(page.hostKeyDialog(), dialog);  // the prompt is still open

  // 2. Trust through the dialog: known_hosts is written, the node is reachable, a sample is stored.
  QSignalSpy samples(page.monitor(), &ui::NodeMonitor::samplesWritten);
  QTest::mouseClick(dialog->trustButton(), Qt::LeftButton);
  QTRY_COMPARE_WITH_TIMEOUT(trusted.count(), 2, 10000);
  QCOMPARE(trusted[1][0].toString(), kNode);
  QVERIFY2(trusted[1][1].toBool(), qPrintable(trusted[1][2].toString()));
  QTRY_VERIFY_WITH_TIMEOUT(state() == NodeState::Reachable, 10000);
  QVERIFY(page.hostKeyDialog() == nullptr);
  QCOMPARE(page.messageText(), QStringLiteral("Trusted the host key of lab."));
  const std::string kh = flotilla_test::read_file(knownHosts);
  const std::string khName = "[127.0.0.1]:" + std::to_string(fx.node(0).port) + " ssh-ed25519 ";
  QVERIFY2(kh.find(khName) != std::string::npos, kh.c_str());
  QCOMPARE(model->status(kNode).fingerprint, fp0);

  // The next probe (a plain one, on the kept session) is reachable with a latency.
  const int samplesBefore = static_cast<int>(samples.count());
  page.monitor()->probeNow(kNode);
  QTRY_VERIFY_WITH_TIMEOUT(samples.count() > samplesBefore && page.monitor()->busy() == 0, 10000);
  QCOMPARE(state(), NodeState::Reachable);
  QCOMPARE(statusText(), QStringLiteral("reachable"));
  const double latency = model->status(kNode).latencyMs;
  QVERIFY2(latency > 0 && latency < 2000, qPrintable(QString::number(latency)));
  QVERIFY(model->index(row, NodesModel::Latency).data().toString().endsWith(QStringLiteral(" ms")));
  QVERIFY2(model->status(kNode).gpus.size() == 1,  // else the login shell did not read ~/.bashrc
           qPrintable(QStringLiteral("the fake nvidia-smi was not found: ") + model->status(kNode).gpuStatus));
  {
    db::OpenOptions o;
    o.create = false;
    db::Database d(dbPath, o);
    const auto latest = db::latest_system_samples(d, nodeId);
    QCOMPARE(int(latest.size()), 1);
    QCOMPARE(latest[0].device, 0);
    QVERIFY(latest[0].utilization && *latest[0].utilization == 37.0);
    QVERIFY(latest[0].memory_used && *latest[0].memory_used == 1024 * kMiB);
    QVERIFY(latest[0].memory_total && *latest[0].memory_total == 81920 * kMiB);
    QVERIFY(latest[0].temperature_c && *latest[0].temperature_c == 45.0);
    const db::SshNode stored = db::get_ssh_node(d, kNode.toStdString());
    QCOMPARE(QString::fromStdString(stored.gpu_type), QStringLiteral("NVIDIA Test GPU"));
    QCOMPARE(stored.gpu_count, int64_t{1});
  }

  // 3. Another key of the same type, then another type: refused, never trusted silently.
  const std::vector<std::pair<std::string, std::string>> changes = {{"ed25519", fx.host_key(5, "ed25519")},
                                                                    {"ecdsa", fx.host_key(6, "ecdsa")}};
  for (const auto& [type, keyFile] : changes) {
    const QString newFp = keygenFingerprint(keyFile + ".pub");
    QVERIFY(newFp.size() > 20 && newFp != fp0);
    fx.stop(0);
    QVERIFY2(fx.start(0, type, keyFile), fx.last_error().c_str());
    // The kept session fails first (unreachable), the next connection meets the new key.
    // (The previous round left "host key changed" showing: wait for this key's fingerprint.)
    QTRY_VERIFY_WITH_TIMEOUT((page.monitor()->probeNow(kNode), model->status(kNode).fingerprint == newFp), 15000);
    QCOMPARE(state(), NodeState::HostKeyChanged);
    QCOMPARE(statusText(), QStringLiteral("host key changed"));
    QVERIFY2(model->status(kNode).message.contains(fp0), qPrintable(model->status(kNode).message));
    QVERIFY(model->index(row, NodesModel::Latency).data().toString().isEmpty());
    QTest::qWait(100);
    QVERIFY(page.hostKeyDialog() == nullptr);  // a changed key is never offered for trust
    page.table()->selectRow(row);
    QVERIFY(!page.findChild<QPushButton*>(QStringLiteral("trustNodeButton"))->isEnabled());
    page.trustSelected();
    QVERIFY(page.hostKeyDialog() == nullptr);
    // Even the monitor's trust (the fingerprint the node presents now) refuses a changed key.
    const int before = static_cast<int>(trusted.count());
    QTRY_COMPARE_WITH_TIMEOUT(page.monitor()->busy(), 0, 10000);
    page.monitor()->trust(kNode, newFp);
    QTRY_COMPARE_WITH_TIMEOUT(int(trusted.count()), before + 1, 10000);
    QVERIFY(!trusted.last()[1].toBool());
    QTRY_COMPARE_WITH_TIMEOUT(page.monitor()->busy(), 0, 10000);
    QCOMPARE(state(), NodeState::HostKeyChanged);
    QCOMPARE(flotilla_test::read_file(knownHosts), kh);  // byte for byte
    QVERIFY(page.messageText().startsWith(QStringLiteral("The host key of lab was not trusted: ")));
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("nodes ssh: latency %.2f ms, whole flow %.2f s\n", latency, seconds);
  page.hide();
}

QTEST_MAIN(TestNodesSsh)
#include "test_nodes_ssh.moc"
