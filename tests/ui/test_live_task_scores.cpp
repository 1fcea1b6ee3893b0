// Live plots evaluation task scores (eval.tasks) as they come: task records written by a worker,
// stored in a real SQLite run store and read back through the store feed (the way the Live page
// follows every run) draw a "Task scores" plot that is hidden until the first task record, with one
// line per task's headline score (accuracies on the left axis, bits per byte on the right), the
// latest value of each line equal to the record's, every score exported as data, and a new run's
// reset leaving no line of the previous run's tasks.
#include <QFile>
#include <QTemporaryDir>
#include <QtTest>

#include <string>

#include "db/ingest.h"
#include "db/run_store.h"
#include "db/writer.h"
#include "runs/store_feed.h"
#include "ui/live/livedashboard.h"
#include "ui/plot/chartplot.h"

using flotilla::ui::ChartPlot;
using flotilla::ui::LiveDashboard;
namespace db = flotilla::db;

namespace {

constexpr double kT0 = 1.7e9;

std::string stepLine(int step) {
  return "{\"v\":1,\"type\":\"step\",\"time\":" + std::to_string(kT0 + step) +
         ",\"rank\":0,\"step\":" + std::to_string(step) + ",\"tokens\":" + std::to_string(step * 512) +
         ",\"loss\":" + std::to_string(5.0 - step * 0.05) + ",\"lr\":0.001,\"step_ms\":100}\n";
}

std::string taskLines(int step, double accNorm, double bpb) {
  const std::string t = std::to_string(kT0 + step + 0.5), s = std::to_string(step);
  return "{\"v\":1,\"type\":\"task\",\"time\":" + t + ",\"rank\":0,\"step\":" + s +
         ",\"tokens\":" + std::to_string(step * 512) +
         ",\"task\":\"arc-mini\",\"kind\":\"multiple_choice\",\"scores\":{\"acc\":0.25,\"acc_norm\":" +
         std::to_string(accNorm) + ",\"acc_norm_stderr\":0.1,\"acc_stderr\":0.1,\"n\":20},\"seconds\":1}\n" +
         "{\"v\":1,\"type\":\"task\",\"time\":" + t + ",\"rank\":0,\"step\":" + s +
         ",\"tokens\":0,\"task\":\"wiki\",\"kind\":\"perplexity\",\"scores\":{\"bits_per_byte\":" +
         std::to_string(bpb) + ",\"n\":6,\"perplexity\":40},\"seconds\":1}\n";
}

}  // namespace

class TestLiveTaskScores : public QObject {
  Q_OBJECT

 private slots:
  void taskScoresFromTheStore();
};

void TestLiveTaskScores::taskScoresFromTheStore() {
  QTemporaryDir tmp(QStringLiteral(FLOTILLA_TEST_TMP "/live_tasks-XXXXXX"));
  QVERIFY(tmp.isValid());
  const std::string path = tmp.filePath(QStringLiteral("store.db")).toStdString();
  db::Writer w(path);
  int64_t run = 0;
  w.run([&](db::Database& d) {
    db::NewRun r;
    r.name = "tasks";
    r.config_json = "{\"train\":{\"steps\":30}}";
    run = db::create_run(d, r);
    db::set_status(d, run, db::RunStatus::kRunning);
  });
  db::Ingestor in(w, run);
  std::string lines;
  for (int s = 1; s <= 10; ++s) lines += stepLine(s);
  in.feed(lines);
  QVERIFY(w.wait(in.finish()));

  LiveDashboard dash;
  dash.resize(1200, 900);
  dash.show();
  QVERIFY(QTest::qWaitForWindowExposed(&dash));
  flotilla::runs::StoreFeedReader reader(run);
  const db::Database rd(path);
  const auto feed = [&] {
    for (const auto& r : reader.read(rd).records) dash.ingest(r);
    dash.dataChanged();
    dash.refreshAll();
  };
  feed();
  ChartPlot* plot = dash.taskPlot();
  QVERIFY(plot);
  QVERIFY(!plot->isVisible());  // no task yet: no empty plot taking room
  QVERIFY(!dash.plot(QStringLiteral("taskPlot")));

  lines.clear();
  lines += taskLines(10, 0.30, 2.5);
  for (int s = 11; s <= 20; ++s) lines += stepLine(s);
  lines += taskLines(20, 0.45, 2.25);
  in.feed(lines);
  QVERIFY(w.wait(in.finish()));
  feed();
  plot = dash.taskPlot();
  QVERIFY(plot->isVisible());
  QCOMPARE(dash.plot(QStringLiteral("taskPlot")), plot);
  QCOMPARE(dash.data().taskSeries(), QStringList({QStringLiteral("task/arc-mini/acc_norm"),
                                                  QStringLiteral("task/wiki/bits_per_byte")}));
  QCOMPARE(dash.data().tasks().rows(), qsizetype(2));  // one row per evaluated step
  QCOMPARE(plot->drawnPointCount(0), 2);
  QCOMPARE(plot->drawnLastValue(0), 0.45);
  QCOMPARE(plot->drawnLastValue(1), 2.25);
  // The x axis switch reaches it: by tokens, the last point is at step 20's tokens.
  dash.setXAxisKind(flotilla::ui::XAxisKind::Tokens);
  QCOMPARE(plot->xAxisKind(), flotilla::ui::XAxisKind::Tokens);
  QVERIFY(plot->exportCsv(tmp.filePath(QStringLiteral("tasks.csv"))));
  QFile csv(tmp.filePath(QStringLiteral("tasks.csv")));
  QVERIFY(csv.open(QIODevice::ReadOnly));
  const QByteArray text = csv.readAll();
  QVERIFY2(text.contains("10240") && text.contains("0.45") && text.contains("2.25"), text.constData());
  // Every score is in the table (the CSV export has them), not only the plotted ones.
  QCOMPARE(dash.data().tasks().last(QStringLiteral("task/arc-mini/acc")), 0.25);
  QCOMPARE(dash.data().tasks().last(QStringLiteral("task/wiki/n")), 6.0);

  dash.setXAxisKind(flotilla::ui::XAxisKind::Step);
  dash.refreshAll();
  QApplication::processEvents();
  dash.grab().save(
      QStringLiteral(FLOTILLA_SCREENSHOT_DIR "/live-task-scores.png"));  // for a person to look at

  // Another run: the plot starts empty and hidden again.
  dash.reset();
  dash.refreshAll();
  QVERIFY(!dash.taskPlot()->isVisible());
  QVERIFY(!dash.plot(QStringLiteral("taskPlot")));
  QVERIFY(dash.data().taskSeries().isEmpty());
  QCOMPARE(dash.data().tasks().rows(), qsizetype(0));
}

QTEST_MAIN(TestLiveTaskScores)
#include "test_live_task_scores.moc"
