// Idle autostop in the app, over a real store: the node dialog's idle limit and its two commands
// (one argument per line) are validated with the problem under the field it belongs to (a bare
// number, a limit without a stop command, an empty program line), and hostile lines come back as
// arguments verbatim; stored settings fill the dialog again and the Nodes table says "stopped by
// autostop"; the Costs page's Idle tab lists each node's idle time and money and autostop's
// "stopped by autostop at ..." rows; the notifier tells an autostop like a run's event.
#include <QFile>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QSignalSpy>
#include <QStringListModel>
#include <QTemporaryDir>
#include <QtTest>

#include "db/database.h"
#include "db/node_power.h"
#include "db/nodes.h"
#include "db/run_store.h"
#include "ui/costs/costmodels.h"
#include "ui/costs/costspage.h"
#include "ui/main/runnotifier.h"
#include "ui/nodes/nodedialog.h"
#include "ui/nodes/nodesmodel.h"
#include "ui/nodes/nodestore.h"

using namespace flotilla;

class TestNodesAutostop : public QObject {
  Q_OBJECT

 private slots:
  void dialogChecksEachField();
  void settingsRoundTrip();
  void costsPageShowsIdle();
  void notifierTellsAutostop();
};

namespace {

void fill(ui::NodeDialog& d, const QString& idle, const QString& stop, const QString& start = QString()) {
  d.editor(QStringLiteral("name"))->setText(QStringLiteral("vm-1"));
  d.editor(QStringLiteral("host"))->setText(QStringLiteral("10.0.0.5"));
  d.editor(QStringLiteral("idle"))->setText(idle);
  d.form().textEdit(QStringLiteral("stopCmd"))->setPlainText(stop);
  d.form().textEdit(QStringLiteral("startCmd"))->setPlainText(start);
}

}  // namespace

void TestNodesAutostop::dialogChecksEachField() {
  struct Case {
    QString idle, stop, start;
    const char* field;
    const char* words;
  };
  const Case cases[] = {
      {QStringLiteral("30"), QStringLiteral("gcloud"), {}, "idle", "needs a duration like 30m"},
      {QStringLiteral("0m"), QStringLiteral("gcloud"), {}, "idle", "more than 0"},
      {QStringLiteral("30m"), {}, {}, "stopCmd", "an idle limit needs a command"},
      {QStringLiteral("30m"), QStringLiteral("\ngcloud"), {}, "stopCmd", "the program to run) is empty"},
      {QStringLiteral("30m"), QStringLiteral("gcloud"), QStringLiteral("\nstart"), "startCmd", "is empty"},
  };
  for (const Case& c : cases) {
    ui::NodeDialog dialog({});
    fill(dialog, c.idle, c.stop, c.start);
    dialog.show();
    dialog.accept();
    QVERIFY2(dialog.result() != QDialog::Accepted && dialog.isVisible(), c.field);
    QLabel* problem = dialog.problemLabel(QLatin1String(c.field));
    QVERIFY2(problem && problem->isVisible() && problem->text().contains(QLatin1String(c.words)),
             qPrintable(problem ? problem->text() : QStringLiteral("no label")));
    for (const char* other : {"idle", "stopCmd", "startCmd", "name", "host"})
      if (QLatin1String(other) != QLatin1String(c.field))
        QVERIFY2(!dialog.problemLabel(QLatin1String(other))->isVisible(), other);
  }
  // Hostile lines are arguments, verbatim; no limit and no commands is autostop off (accepted).
  QTemporaryDir tmp;
  const QString canary = tmp.path() + QStringLiteral("/CANARY");
  ui::NodeDialog dialog({});
  fill(dialog, QStringLiteral("1h30m"),
       QStringLiteral("gcloud\nvm 1; rm -rf ~\n$(touch ") + canary + QStringLiteral(")\n\"quoted\" 'x'\n"),
       QStringLiteral("gcloud\nstart"));
  dialog.accept();
  QCOMPARE(dialog.result(), int(QDialog::Accepted));
  const runs::PowerFields p = dialog.power();
  QCOMPARE(p.idle, std::string("1h30m"));
  const std::vector<std::string> stop = {"gcloud", "vm 1; rm -rf ~", "$(touch " + canary.toStdString() + ")",
                                         "\"quoted\" 'x'"};
  QVERIFY(p.stop_argv == stop);
  QCOMPARE(p.start_argv.size(), size_t{2});
  QVERIFY(!QFile::exists(canary));
  ui::NodeDialog off({});
  fill(off, {}, {});
  off.accept();
  QCOMPARE(off.result(), int(QDialog::Accepted));
}

void TestNodesAutostop::settingsRoundTrip() {
  QTemporaryDir tmp;
  const QString path = tmp.path() + QStringLiteral("/flotilla.db");
  {
    db::Database d(path.toStdString());
    db::SshNode n;
    n.name = "vm-1";
    n.host = "10.0.0.5";
    db::add_ssh_node(d, n);
  }
  const runs::PowerFields typed{"30m", {"gcloud", "stop", "a b"}, {"gcloud", "start"}};
  ui::setNodePower(path, "vm-1", typed);
  const auto entries = ui::loadNodeEntries(path);
  QCOMPARE(entries.size(), size_t{1});
  QVERIFY(entries[0].power && entries[0].power->idle_limit_s == 1800.0);
  const runs::PowerFields back = runs::power_fields(
      entries[0].power->idle_limit_s, entries[0].power->stop_argv, entries[0].power->start_argv);
  QCOMPARE(back.idle, std::string("30m"));
  ui::NodeDialog dialog({}, nullptr, nullptr, &back);
  QCOMPARE(dialog.editor(QStringLiteral("idle"))->text(), QStringLiteral("30m"));
  QCOMPARE(dialog.form().textEdit(QStringLiteral("stopCmd"))->toPlainText(),
           QStringLiteral("gcloud\nstop\na b"));
  // The Nodes table says a node autostop stopped, and its limit in the tooltip.
  {
    db::Database d(path.toStdString());
    db::set_power_state(d, db::get_ssh_node(d, "vm-1").id, db::kPowerStopped, 1767225600);
  }
  ui::NodesModel model;
  model.setEntries(ui::loadNodeEntries(path));
  const int row = model.rowOf(QStringLiteral("vm-1"));
  QCOMPARE(model.index(row, ui::NodesModel::Status).data().toString(), QStringLiteral("stopped by autostop"));
  QVERIFY(model.index(row, ui::NodesModel::Status)
              .data(Qt::ToolTipRole)
              .toString()
              .contains(QStringLiteral("Stopped after 30 min with no work")));
  // Emptied limit: autostop off, commands kept.
  ui::setNodePower(path, "vm-1", runs::PowerFields{"", typed.stop_argv, typed.start_argv});
  const auto off = ui::loadNodeEntries(path);
  QVERIFY(off[0].power && !off[0].power->idle_limit_s && off[0].power->stop_argv.size() == 3);
  // A hostile form that skipped the dialog is refused by the store write too.
  QVERIFY_THROWS_EXCEPTION(std::exception, ui::setNodePower(path, "vm-1", runs::PowerFields{"30m", {}, {}}));
}

void TestNodesAutostop::costsPageShowsIdle() {
  QTemporaryDir tmp;
  const QString path = tmp.path() + QStringLiteral("/flotilla.db");
  {
    db::Database d(path.toStdString());
    const int64_t id = db::ensure_node(d, "vm-1", "ssh");
    db::open_idle_accrual(d, id, 1767225600, 2.0);
    db::close_idle_accrual(d, id, 1767225600 + 1800, "stopped by autostop after 30 min idle");
    db::add_event(d, std::nullopt, 1767225600 + 1800, "autostop", "info",
                  "node vm-1 stopped by autostop at 03:12 after 30 min idle (gcloud stop)",
                  R"({"node":"vm-1","stopped":true,"idle_s":1800})");
  }
  ui::CostsPage page(path);
  QSignalSpy loaded(&page, &ui::CostsPage::loaded);
  page.reload();
  QVERIFY(loaded.wait(10000));
  QCOMPARE(page.idleModel()->rowCount(), 1);
  QCOMPARE(page.idleModel()->index(0, ui::CostLinesModel::Key).data().toString(), QStringLiteral("vm-1"));
  QCOMPARE(page.idleModel()->index(0, ui::CostLinesModel::Usd).data().toString(), QStringLiteral("$1.00"));
  QCOMPARE(page.autostopModel()->rowCount(), 1);
  QVERIFY(
      page.autostopModel()->stringList().first().contains(QStringLiteral("stopped by autostop at 03:12")));
  QVERIFY2(page.totalText().contains(QStringLiteral("idle nodes")), qPrintable(page.totalText()));
}

void TestNodesAutostop::notifierTellsAutostop() {
  ui::RunNotifier notifier(nullptr);
  notifier.setDesktopEnabled(false);
  QSignalSpy spy(&notifier, &ui::RunNotifier::notified);
  notifier.notifyAutostop(QStringLiteral("vm-1"), QStringLiteral("info"),
                          QStringLiteral("node vm-1 stopped by autostop at 03:12 after 30 min idle"));
  notifier.notifyAutostop(QStringLiteral("vm-1"), QStringLiteral("error"),
                          QStringLiteral("autostop of node vm-1 failed: gcloud stop: exit status 1"));
  QCOMPARE(spy.count(), 2);
  QCOMPARE(spy.at(0).at(0).value<ui::RunNotifier::Event>(), ui::RunNotifier::Event::Autostop);
  QCOMPARE(spy.at(0).at(1).toString(), QStringLiteral("Node vm-1 stopped"));
  QCOMPARE(spy.at(1).at(1).toString(), QStringLiteral("Autostop of node vm-1 failed"));
  QCOMPARE(ui::RunNotifier::eventName(ui::RunNotifier::Event::Autostop), QStringLiteral("autostop"));
}

QTEST_MAIN(TestNodesAutostop)
#include "test_nodes_autostop.moc"
