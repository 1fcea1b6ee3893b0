// The Live dashboard's plots fed with known records: the per-rank breakdown shows the numbers
// of the record, the x axis switches between step, tokens and wall time, log y, spend against
// the budget with the rate's source named, the honest GPU empty state of a CPU run, and export
// of pictures (PNG/SVG/PDF) and data (CSV) with the right rows.
#include <QCheckBox>
#include <QComboBox>
#include <QFile>
#include <QJsonArray>
#include <QLabel>
#include <QMenu>
#include <QTemporaryDir>
#include <QToolButton>
#include <QWheelEvent>
#include <QtTest>

#include <cmath>

#include <qcustomplot.h>

#include "fake_worker.h"
#include "ui/live/livedashboard.h"
#include "ui/plot/chartplot.h"
#include "ui/plot/lossplot.h"
#include "ui/plot/rankbarsplot.h"

using flotilla::ui::ChartPlot;
using flotilla::ui::LiveDashboard;
using flotilla::ui::XAxisKind;

namespace {

QJsonObject stepRecord(int step, double time, double tokens, double loss, double lr) {
  return QJsonObject{{"v", 1},
                     {"type", "step"},
                     {"time", time},
                     {"rank", 0},
                     {"step", step},
                     {"tokens", tokens},
                     {"loss", loss},
                     {"lr", lr},
                     {"tokens_per_s", 1000.0},
                     {"mfu", 0.25},
                     {"step_ms", 100.0},
                     {"time_ms", QJsonObject{{"data", 1.0},
                                             {"forward", 30.0},
                                             {"backward", 60.0},
                                             {"optimizer", 5.0},
                                             {"comm", 4.0},
                                             {"bubble", 0.0}}},
                     {"peak_rss_bytes", 100.0 * 1024 * 1024}};
}

QByteArray readAll(const QString& path) {
  QFile f(path);
  return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
}

}  // namespace

class TestLiveDashboard : public QObject {
  Q_OBJECT

 private slots:
  void perRankBreakdownShowsTheRecord();
  void singleRankUsesTheRunsOwnSplit();
  void axisSwitching();
  void spendAgainstTheBudget();
  void gpuPlotHasAnHonestEmptyState();
  void exportWritesPicturesAndData();
  void narrowPlotsNeitherOverlapNorClip();
  void plotsCanBeExplored();
  void spendAxesAreTheCurrentRuns();
  void validationHoverOnlyWhereThereIsOne();
  void mfuAndTokensPerSecondDoNotCoincide();
  void checkpointIntervalIsShownWithItsInputs();
};

void TestLiveDashboard::perRankBreakdownShowsTheRecord() {
  LiveDashboard dash;
  dash.resize(1200, 700);
  dash.show();
  QVERIFY(QTest::qWaitForWindowExposed(&dash));
  QJsonObject rec = stepRecord(1, 0, 100, 5.0, 1e-3);
  rec.insert("ranks", QJsonArray{fake_worker::rankTimes(0, 100, 200, 10, 20, 3, 1),
                                 fake_worker::rankTimes(1, 90, 190, 10, 150, 2, 4)});
  rec.insert("slowest_rank", 1);
  dash.ingest(fake_worker::record(rec));
  dash.refreshAll();
  flotilla::ui::RankBarsPlot* bars = dash.rankBars();
  QCOMPARE(bars->ranks().size(), 2);
  // Segments drawn: compute = forward + backward + optimizer, then comm, bubble, data.
  QCOMPARE(bars->drawnSegment(0, 0), 310.0);
  QCOMPARE(bars->drawnSegment(0, 1), 20.0);
  QCOMPARE(bars->drawnSegment(0, 2), 1.0);
  QCOMPARE(bars->drawnSegment(0, 3), 3.0);
  QCOMPARE(bars->drawnSegment(1, 0), 290.0);
  QCOMPARE(bars->drawnSegment(1, 1), 150.0);
  QCOMPARE(bars->drawnSegment(1, 2), 4.0);
  QCOMPARE(bars->drawnSegment(1, 3), 2.0);
  QCOMPARE(bars->rankLabel(1), QStringLiteral("1 (slowest)"));
  QCOMPARE(bars->rankLabel(0), QStringLiteral("0"));
  // The slowest rank's stack over steps: compute, +comm, +bubble, +data.
  auto* area = static_cast<ChartPlot*>(dash.plot(QStringLiteral("stepAreaPlot")));
  QCOMPARE(area->drawnLastValue(0), 290.0);
  QCOMPARE(area->drawnLastValue(1), 440.0);
  QCOMPARE(area->drawnLastValue(2), 444.0);
  QCOMPARE(area->drawnLastValue(3), 446.0);

  // A second record: the bars show the mean of the window.
  QJsonObject rec2 = stepRecord(2, 0, 200, 4.9, 1e-3);
  rec2.insert("ranks", QJsonArray{fake_worker::rankTimes(0, 100, 200, 10, 40, 3, 1),
                                  fake_worker::rankTimes(1, 90, 190, 10, 250, 2, 4)});
  rec2.insert("slowest_rank", 1);
  dash.ingest(fake_worker::record(rec2));
  dash.refreshAll();
  QCOMPARE(bars->drawnSegment(0, 1), 30.0);
  QCOMPARE(bars->drawnSegment(1, 1), 200.0);
}

void TestLiveDashboard::singleRankUsesTheRunsOwnSplit() {
  LiveDashboard dash;
  dash.resize(1200, 700);
  dash.show();
  QVERIFY(QTest::qWaitForWindowExposed(&dash));
  dash.ingest(fake_worker::record(stepRecord(1, 0, 100, 5.0, 1e-3)));
  dash.refreshAll();
  QCOMPARE(dash.rankBars()->ranks().size(), 1);
  QCOMPARE(dash.rankBars()->drawnSegment(0, 0), 95.0);
  QCOMPARE(dash.rankBars()->drawnSegment(0, 1), 4.0);
  QCOMPARE(dash.rankBars()->rankLabel(0), QStringLiteral("0"));  // no "slowest" among one
}

void TestLiveDashboard::axisSwitching() {
  QTemporaryDir tmp(QStringLiteral(FLOTILLA_TEST_TMP "/live_axis-XXXXXX"));
  QVERIFY(tmp.isValid());
  LiveDashboard dash;
  dash.resize(1200, 700);
  dash.show();
  QVERIFY(QTest::qWaitForWindowExposed(&dash));
  dash.ingest(
      fake_worker::record(QJsonObject{{"type", "run_start"}, {"time", 1000.0}, {"config", QJsonObject{}}}));
  dash.ingest(fake_worker::record(stepRecord(10, 1010.0, 4096, 5.0, 1e-3)));
  dash.ingest(fake_worker::record(stepRecord(20, 1025.0, 8192, 4.0, 9e-4)));
  dash.ingest(fake_worker::record(stepRecord(30, 1040.0, 12288, 3.0, 8e-4)));
  dash.refreshAll();
  auto* lr = static_cast<ChartPlot*>(dash.plot(QStringLiteral("lrPlot")));
  const QString csv = tmp.filePath(QStringLiteral("lr.csv"));
  QVERIFY(lr->exportCsv(csv));
  QCOMPARE(QString::fromUtf8(readAll(csv)), QStringLiteral("step,lr\n10,0.001\n20,0.0009\n30,0.0008\n"));

  // The combo box drives every plot; the CSV's x column follows.
  dash.xAxisBox()->setCurrentIndex(dash.xAxisBox()->findData(int(XAxisKind::Tokens)));
  QCOMPARE(dash.xAxisKind(), XAxisKind::Tokens);
  for (auto* p : dash.plots())
    if (p != dash.rankBars()) QCOMPARE(p->xAxisKind(), XAxisKind::Tokens);
  QVERIFY(lr->exportCsv(csv));
  QCOMPARE(QString::fromUtf8(readAll(csv)),
           QStringLiteral("tokens,lr\n4096,0.001\n8192,0.0009\n12288,0.0008\n"));
  dash.setXAxisKind(XAxisKind::WallTime);
  QCOMPARE(dash.xAxisBox()->currentData().toInt(), int(XAxisKind::WallTime));
  QVERIFY(dash.lossPlot()->exportCsv(csv));
  const QStringList lines = QString::fromUtf8(readAll(csv)).split(QLatin1Char('\n'), Qt::SkipEmptyParts);
  QCOMPARE(lines.value(0), QStringLiteral("wall_s,loss,loss_smoothed,val_loss"));
  QCOMPARE(lines.size(), 4);
  QVERIFY2(lines.value(1).startsWith(QStringLiteral("10,5,5,")),
           qPrintable(lines.value(1)));  // 1010 - 1000 s
  QVERIFY2(lines.value(3).startsWith(QStringLiteral("40,3,")), qPrintable(lines.value(3)));
  // The smoothed values do not depend on the x axis.
  QCOMPARE(dash.lossPlot()->smoothedValues().size(), 3);

  // Log y on the plots over time, never on the stacked bars; drawn at once (issue 34 item 3: no
  // refresh timer is needed, an ended run has none).
  const int before = dash.lossPlot()->replotCount();
  dash.logBox()->setChecked(true);
  QVERIFY(dash.lossPlot()->logY());
  QVERIFY(lr->logY());
  QVERIFY(!dash.rankBars()->logY());
  QVERIFY(dash.lossPlot()->replotCount() > before);  // a setting change redraws
  dash.refreshAll();
  const int after = dash.lossPlot()->replotCount();
  dash.refreshAll();
  QCOMPARE(dash.lossPlot()->replotCount(), after);  // nothing changed: no replot
}

void TestLiveDashboard::spendAgainstTheBudget() {
  LiveDashboard dash;
  dash.resize(1200, 700);
  dash.show();
  QVERIFY(QTest::qWaitForWindowExposed(&dash));
  dash.ingest(
      fake_worker::record(QJsonObject{{"type", "run_start"},
                                      {"time", 1000.0},
                                      {"config", QJsonObject{{"train", QJsonObject{{"steps", 100}}}}}}));
  dash.ingest(fake_worker::record(stepRecord(10, 1100.0, 1000, 5.0, 1e-3)));
  // The price and the spend are the store's: $3.60/h stored when the run started at t=1000.
  flotilla::ui::RunCost cost;
  cost.known = true;
  cost.usdPerHour = 3.6;
  cost.source = QStringLiteral("flat $3.60/h for node 'local'");
  cost.maxUsd = 2.0;
  flotilla::db::Accrual open;
  open.start = 1000;
  open.devices = 1;
  open.usd_per_hour = 3.6;
  cost.accruals = {open};
  dash.data().setCost(cost);
  dash.refreshAll();
  // $3.60/h for 100 s = $0.10; 10 of 100 steps in 100 s: projected 1,000 s = $1.00.
  QCOMPARE(dash.data().spentUsd(), 0.1);
  QCOMPARE(dash.data().projectedUsd(), 1.0);
  QCOMPARE(dash.spendPlot()->referenceValue(), 2.0);
  QCOMPARE(dash.spendPlot()->projectionEnd(), 1.0);
  QCOMPARE(dash.spendPlot()->drawnLastValue(0), 0.1);
  const QString text = dash.findChild<QLabel*>(QStringLiteral("spendLabel"))->text();
  QVERIFY2(text.contains(QStringLiteral("$0.10 spent, projected $1.00 of a $2.00 budget")) &&
               text.contains(QStringLiteral("rate $3.60/h, stored with the run when it started")) &&
               text.contains(QStringLiteral("'local'")),
           qPrintable(text));

  // No price: said so, nothing drawn.
  LiveDashboard free;
  free.resize(1200, 700);
  free.show();
  free.ingest(
      fake_worker::record(QJsonObject{{"type", "run_start"}, {"time", 1000.0}, {"config", QJsonObject{}}}));
  flotilla::ui::RunCost none;
  none.known = true;  // the store says: no price
  free.data().setCost(none);
  free.ingest(fake_worker::record(stepRecord(1, 1010.0, 100, 5.0, 1e-3)));
  free.refreshAll();
  QVERIFY(free.spendPlot()->messageVisible());
  QVERIFY(std::isnan(free.spendPlot()->drawnLastValue(0)));  // no finite spend drawn
  QVERIFY2(free.spendText().contains(QStringLiteral("this run is unpriced")), qPrintable(free.spendText()));
}

void TestLiveDashboard::gpuPlotHasAnHonestEmptyState() {
  LiveDashboard dash;
  dash.resize(1200, 700);
  dash.show();
  QVERIFY(QTest::qWaitForWindowExposed(&dash));
  dash.ingest(fake_worker::record(stepRecord(1, 0, 100, 5.0, 1e-3)));
  dash.refreshAll();
  QVERIFY(dash.gpuPlot()->messageVisible());
  QVERIFY2(dash.gpuPlot()->message().contains(QStringLiteral("No GPU")),
           qPrintable(dash.gpuPlot()->message()));

  fake_worker::Synthetic s;
  LiveDashboard gpu;
  gpu.resize(1200, 700);
  gpu.show();
  QVERIFY(QTest::qWaitForWindowExposed(&gpu));
  for (int i = 1; i <= 3; ++i) gpu.ingest(fake_worker::record(fake_worker::step(s, i)));
  gpu.refreshAll();
  QCOMPARE(gpu.data().gpuCount(), 2);
  // The worker measures no utilisation (metrics.h): the records' GPUs give memory only, per device,
  // and the utilisation plot says so instead of drawing nothing.
  QVERIFY(gpu.gpuPlot()->messageVisible());
  QVERIFY2(gpu.gpuPlot()->message().contains(QStringLiteral("not in the worker's records")),
           qPrintable(gpu.gpuPlot()->message()));
  const double mem0 =  // a whole number of bytes (uint64 in the protocol)
      std::floor(fake_worker::step(s, 3)["gpus"].toArray()[0].toObject()["mem_bytes"].toDouble()) /
      (1024.0 * 1024.0);
  QCOMPARE(gpu.data().steps().last(flotilla::ui::live_col::gpuMem(0)), mem0);
  QVERIFY(std::isnan(gpu.data().steps().last(flotilla::ui::live_col::gpuUtil(0))));
}

void TestLiveDashboard::exportWritesPicturesAndData() {
  QTemporaryDir tmp(QStringLiteral(FLOTILLA_TEST_TMP "/live_export-XXXXXX"));
  QVERIFY(tmp.isValid());
  LiveDashboard dash;
  dash.resize(1280, 720);
  dash.show();
  QVERIFY(QTest::qWaitForWindowExposed(&dash));
  fake_worker::Synthetic s;
  s.steps = 200;
  for (const QJsonObject& r : fake_worker::syntheticRun(s)) dash.ingest(fake_worker::record(r));
  dash.data().setCost(fake_worker::cost(s));
  dash.refreshAll();
  for (flotilla::ui::PlotPanel* p : dash.plots()) {
    const QString base = tmp.filePath(p->plotWidget()->objectName());
    QVERIFY2(p->exportImage(base + QStringLiteral(".png")), qPrintable(p->errorText()));
    QVERIFY2(p->exportImage(base + QStringLiteral(".svg")), qPrintable(p->errorText()));
    QVERIFY2(p->exportImage(base + QStringLiteral(".pdf")), qPrintable(p->errorText()));
    QVERIFY2(p->exportCsv(base + QStringLiteral(".csv")), qPrintable(p->errorText()));
    QVERIFY(readAll(base + QStringLiteral(".png")).startsWith("\x89PNG"));
    const QByteArray svg = readAll(base + QStringLiteral(".svg"));
    QVERIFY(svg.contains("<svg") && svg.size() > 2000);
    QVERIFY(readAll(base + QStringLiteral(".pdf")).startsWith("%PDF"));
  }
  QVERIFY(!dash.lossPlot()->exportImage(tmp.filePath(QStringLiteral("x.gif"))));
  // The Export button offers every plot, each with the four formats.
  QMenu* menu = dash.exportButton()->menu();
  QVERIFY(menu);
  emit menu->aboutToShow();
  QCOMPARE(menu->actions().size(), dash.plots().size());
  for (QAction* a : menu->actions()) {
    QVERIFY(a->menu());
    QCOMPARE(a->menu()->actions().size(), 4);
  }
  QCOMPARE(menu->actions().front()->text(), QStringLiteral("Loss"));
  QVERIFY(dash.lossPlot()->errorText().contains(QStringLiteral(".png")));
  // The CSV rows are the raw numbers: one per step for the loss (with the evals on their rows),
  // one per rank for the bars, the slowest rank's components (not the stacked sums).
  const QStringList loss = QString::fromUtf8(readAll(tmp.filePath(QStringLiteral("lossPlot.csv"))))
                               .split(QLatin1Char('\n'), Qt::SkipEmptyParts);
  QCOMPARE(loss.size(), 1 + 200);
  QCOMPARE(loss[0], QStringLiteral("step,loss,loss_smoothed,val_loss"));
  QVERIFY(loss[50].startsWith(QStringLiteral("50,")) && !loss[50].endsWith(QLatin1Char(',')));  // eval at 50
  QVERIFY(loss[49].endsWith(QLatin1Char(',')));
  const QStringList ranks = QString::fromUtf8(readAll(tmp.filePath(QStringLiteral("rankBarsPlot.csv"))))
                                .split(QLatin1Char('\n'), Qt::SkipEmptyParts);
  QCOMPARE(ranks.size(), 3);
  QCOMPARE(ranks[0], QStringLiteral("rank,compute_ms,comm_ms,bubble_ms,data_ms,total_ms"));
  QVERIFY(ranks[2].startsWith(QStringLiteral("1,")));
  const QStringList area = QString::fromUtf8(readAll(tmp.filePath(QStringLiteral("stepAreaPlot.csv"))))
                               .split(QLatin1Char('\n'), Qt::SkipEmptyParts);
  QCOMPARE(area[0],
           QStringLiteral("step,slowest_compute_ms,slowest_comm_ms,slowest_bubble_ms,slowest_data_ms"));
  const QJsonObject r1 = fake_worker::step(s, 1)["ranks"].toArray()[1].toObject();
  const QStringList first = area[1].split(QLatin1Char(','));
  QCOMPARE(first.value(0), QStringLiteral("1"));
  // Per-rank times travel as float32 (engine/train/metrics.h), so to float precision.
  QVERIFY(std::abs(first.value(2).toDouble() - r1["comm"].toDouble()) < 1e-4 * r1["comm"].toDouble());
}

// Issue 18: on a small window the tokens axis' labels ran into each other and the GPU plot's
// "No GPU in this run" message was cut at both edges. At 1024x640 (the dashboard about 780 px
// wide) every plot's x tick labels keep apart and every message stays inside its plot area, on
// each kind of x axis.
void TestLiveDashboard::narrowPlotsNeitherOverlapNorClip() {
  for (const bool gpus : {false, true}) {
    LiveDashboard dash;
    dash.resize(780, 480);
    dash.show();
    QVERIFY(QTest::qWaitForWindowExposed(&dash));
    fake_worker::Synthetic s;
    s.gpus = gpus;
    s.steps = 1700;
    for (const QJsonObject& r : fake_worker::syntheticRun(s)) dash.ingest(fake_worker::record(r));
    for (const XAxisKind kind : {XAxisKind::Tokens, XAxisKind::Step, XAxisKind::WallTime}) {
      dash.setXAxisKind(kind);
      dash.refreshAll();
      for (flotilla::ui::PlotPanel* p : dash.plots()) {
        const QString name = p->plotWidget()->objectName();
        const QVector<QRectF> labels = p->xTickLabelRects();
        for (qsizetype i = 1; i < labels.size(); ++i)
          QVERIFY2(labels[i - 1].right() < labels[i].left(),
                   qPrintable(QStringLiteral("%1 (x kind %2): tick labels %3 and %4 overlap")
                                  .arg(name)
                                  .arg(int(kind))
                                  .arg(i - 1)
                                  .arg(i)));
        // The y axes' labels too (a plot 140 px high has room for few).
        auto* plot = qobject_cast<QCustomPlot*>(p->plotWidget());
        QVERIFY(plot);
        for (QCPAxis* axis : {plot->yAxis, plot->yAxis2}) {
          if (!axis->visible()) continue;
          const double height = QFontMetricsF(axis->tickLabelFont()).height();
          double last = NAN;
          for (const double tick : axis->tickVector()) {
            if (!axis->range().contains(tick)) continue;
            const double pixel = axis->coordToPixel(tick);
            QVERIFY2(!(std::abs(pixel - last) < height),
                     qPrintable(QStringLiteral("%1: y labels %2 px apart, %3 px high")
                                    .arg(name)
                                    .arg(std::abs(pixel - last))
                                    .arg(height)));
            last = pixel;
          }
        }
        if (!p->messageVisible()) continue;
        const QRect area = p->plotAreaRect(), text = p->messageRect();
        QVERIFY2(
            area.contains(text),
            qPrintable(QStringLiteral("%1: message \"%2\" (%3,%4 %5x%6) outside its plot area (%7,%8 %9x%10)")
                           .arg(name, p->drawnMessage())
                           .arg(text.x())
                           .arg(text.y())
                           .arg(text.width())
                           .arg(text.height())
                           .arg(area.x())
                           .arg(area.y())
                           .arg(area.width())
                           .arg(area.height())));
      }
    }
    QVERIFY(dash.gpuPlot()->messageVisible());  // the case the test is about: a message drawn
  }
}

// Issue 18 "explorable plots": the x axis follows the data (not the 2,000 planned steps, which left
// 600 steps a sliver), Whole run spans the plan; the hover readout gives each series' value at
// the cursor, equal to the data; the wheel zooms, new data leaves a zoomed view alone, and a
// double-click goes back.
void TestLiveDashboard::plotsCanBeExplored() {
  LiveDashboard dash;
  dash.resize(1200, 700);
  dash.show();
  QVERIFY(QTest::qWaitForWindowExposed(&dash));
  fake_worker::Synthetic s;  // 600 of 2,000 planned steps
  for (const QJsonObject& r : fake_worker::syntheticRun(s)) dash.ingest(fake_worker::record(r));
  dash.refreshAll();
  flotilla::ui::LossPlot* loss = dash.lossPlot();
  auto* lossPlot = qobject_cast<QCustomPlot*>(loss->plotWidget());
  auto* tput = qobject_cast<QCustomPlot*>(dash.plot(QStringLiteral("throughputPlot"))->plotWidget());
  QVERIFY(lossPlot && tput);
  QCOMPARE(lossPlot->xAxis->range().upper, 600.0);
  QCOMPARE(tput->xAxis->range().upper, 600.0);
  dash.wholeRunBox()->setChecked(true);
  QCOMPARE(lossPlot->xAxis->range().upper, 2000.0);
  QCOMPARE(tput->xAxis->range().upper, 2000.0);
  dash.wholeRunBox()->setChecked(false);
  QCOMPARE(lossPlot->xAxis->range().upper, 600.0);

  // The readout at step 300: the loss the record had, and the throughput's tokens/s and MFU.
  const QJsonObject rec = fake_worker::step(s, 300);
  const QString lossText = loss->readoutAt(300.2);
  QVERIFY2(lossText.startsWith(QStringLiteral("step 300 · train loss ") +
                               QString::number(rec["loss"].toDouble(), 'g', 4)),
           qPrintable(lossText));
  QVERIFY2(lossText.contains(QStringLiteral("smoothed (0.60) ")), qPrintable(lossText));
  const QString tputText = dash.plot(QStringLiteral("throughputPlot"))->readoutAt(299.9);
  QVERIFY2(tputText.contains(QStringLiteral("tokens/s ") +
                             QString::number(rec["tokens_per_s"].toDouble(), 'g', 4)) &&
               tputText.contains(QStringLiteral("MFU (%, right) ") +
                                 QString::number(100 * rec["mfu"].toDouble(), 'g', 4)),
           qPrintable(tputText));
  // Hovering shows it at the cursor.
  const int px = static_cast<int>(lossPlot->xAxis->coordToPixel(300));
  const int py = lossPlot->axisRect()->rect().center().y();
  QTest::mouseMove(lossPlot, QPoint(px, py));
  QTRY_VERIFY(loss->readoutText().startsWith(QStringLiteral("step 300 · ")));

  // The wheel zooms in around the cursor; more data does not move the view; double-click resets.
  QWheelEvent wheel(QPointF(px, py), lossPlot->mapToGlobal(QPointF(px, py)), QPoint(), QPoint(0, 240),
                    Qt::NoButton, Qt::NoModifier, Qt::NoScrollPhase, false);
  QCoreApplication::sendEvent(lossPlot, &wheel);
  QVERIFY(loss->zoomed());
  const QCPRange zoomedRange = lossPlot->xAxis->range();
  QVERIFY2(zoomedRange.size() < 0.8 * 600 && zoomedRange.contains(300),  // two wheel notches in
           qPrintable(QStringLiteral("%1..%2").arg(zoomedRange.lower).arg(zoomedRange.upper)));
  for (int i = 601; i <= 700; ++i) dash.ingest(fake_worker::record(fake_worker::step(s, i)));
  dash.refreshAll();
  QCOMPARE(lossPlot->xAxis->range().lower, zoomedRange.lower);
  QCOMPARE(lossPlot->xAxis->range().upper, zoomedRange.upper);
  QTest::mouseDClick(lossPlot, Qt::LeftButton, Qt::NoModifier, QPoint(px, py));
  QVERIFY(!loss->zoomed());
  QCOMPARE(lossPlot->xAxis->range().upper, 700.0);
}

// Issue 34 item 9: a second, shorter run gets its own Spend axes (not the previous run's zoomed
// x range), y is scaled to what matters (spent and the budget; a projection far above them is
// cut with its value in its name), and the hover names the budget once ("budget $0.15").
void TestLiveDashboard::spendAxesAreTheCurrentRuns() {
  LiveDashboard dash;
  dash.resize(1200, 700);
  dash.show();
  QVERIFY(QTest::qWaitForWindowExposed(&dash));
  auto* spend = qobject_cast<QCustomPlot*>(dash.spendPlot()->plotWidget());
  // A long run first, its Spend plot zoomed out by the user.
  fake_worker::Synthetic first;
  first.steps = 300;
  first.planned = 5000;
  for (const QJsonObject& r : fake_worker::syntheticRun(first)) dash.ingest(fake_worker::record(r));
  dash.data().setCost(fake_worker::cost(first));
  dash.dataChanged();
  dash.refreshAll();
  spend->xAxis->setRange(-1000, 6500);  // the wheel
  QVERIFY(dash.spendPlot()->zoomed());

  // Then a 60-step run capped at $0.15 that costs $36/h at 1.3 s a step: its projection ($0.78)
  // is five times its cap.
  dash.reset();
  fake_worker::Synthetic second;
  second.steps = 10;
  second.planned = 60;
  second.usdPerHour = 36;
  second.maxUsd = 0.15;
  for (const QJsonObject& r : fake_worker::syntheticRun(second)) dash.ingest(fake_worker::record(r));
  dash.data().setCost(fake_worker::cost(second));
  dash.dataChanged();
  dash.refreshAll();
  QVERIFY(!dash.spendPlot()->zoomed());
  QVERIFY2(
      spend->xAxis->range().lower >= 0 && spend->xAxis->range().upper <= 60.5,
      qPrintable(QStringLiteral("%1..%2").arg(spend->xAxis->range().lower).arg(spend->xAxis->range().upper)));
  const double projected = dash.data().projectedUsd();
  QVERIFY2(projected > 4 * 0.15, qPrintable(QString::number(projected)));
  // The budget and the spend fill the plot; the projection does not flatten them.
  QVERIFY2(spend->yAxis->range().upper >= 0.15 && spend->yAxis->range().upper < 0.15 * 2,
           qPrintable(QString::number(spend->yAxis->range().upper)));
  const QString text = dash.spendPlot()->readoutAt(5);
  QVERIFY2(text.contains(QStringLiteral("budget $0.15")) && !text.contains(QStringLiteral("0.15 0.15")) &&
               text.count(QStringLiteral("0.15")) == 1,
           qPrintable(text));
  QVERIFY2(text.contains(QStringLiteral("projected ") + LiveDashboard::money(projected)), qPrintable(text));
  const QString dir =
      qEnvironmentVariable("FLOTILLA_SCREENSHOT_DIR", QStringLiteral(FLOTILLA_SCREENSHOT_DIR));
  QVERIFY(dash.grab().save(dir + QStringLiteral("/live-spend-second-run.png")));
}

// Issue 34 item 10: the loss hover shows a validation loss only at a step that has one; between
// evaluations it says which was the last ("(last, at step 50)"), never the next one's value.
void TestLiveDashboard::validationHoverOnlyWhereThereIsOne() {
  LiveDashboard dash;
  dash.resize(1200, 700);
  dash.show();
  QVERIFY(QTest::qWaitForWindowExposed(&dash));
  fake_worker::Synthetic s;
  s.steps = 200;  // evaluations at 50, 100, 150, 200
  for (const QJsonObject& r : fake_worker::syntheticRun(s)) dash.ingest(fake_worker::record(r));
  dash.refreshAll();
  const auto val = [&](int step) {
    return QString::number(fake_worker::eval(s, step)["val_loss"].toDouble(), 'g', 4);
  };
  const QString at100 = dash.lossPlot()->readoutAt(100);
  QVERIFY2(at100.contains(QStringLiteral("validation loss ") + val(100)), qPrintable(at100));
  // Step 80 is nearer to the evaluation at 100 than to the one at 50: still not 100's value.
  const QString at80 = dash.lossPlot()->readoutAt(80);
  QVERIFY2(at80.startsWith(QStringLiteral("step 80 · ")), qPrintable(at80));
  QVERIFY2(!at80.contains(val(100)), qPrintable(at80));
  QVERIFY2(
      at80.contains(QStringLiteral("validation loss ") + val(50) + QStringLiteral(" (last, at step 50)")),
      qPrintable(at80));
  // Before the first evaluation: no validation at all.
  const QString at8 = dash.lossPlot()->readoutAt(8);
  QVERIFY2(at8.startsWith(QStringLiteral("step 8 · ")) && !at8.contains(QStringLiteral("validation")),
           qPrintable(at8));
}

// Issue 34 item 18: MFU (right axis) moves with tokens/s; drawn on an axis of the same shape the
// two lines coincide and one is never seen. Its axis is taller, so its line runs apart.
void TestLiveDashboard::mfuAndTokensPerSecondDoNotCoincide() {
  LiveDashboard dash;
  dash.resize(1200, 700);
  dash.show();
  QVERIFY(QTest::qWaitForWindowExposed(&dash));
  fake_worker::Synthetic s;
  for (const QJsonObject& r : fake_worker::syntheticRun(s)) dash.ingest(fake_worker::record(r));
  dash.refreshAll();
  auto* tput = qobject_cast<QCustomPlot*>(dash.plot(QStringLiteral("throughputPlot"))->plotWidget());
  QVERIFY(tput && tput->graphCount() >= 2);
  // The pixel height of each line's last point.
  const auto lastPixel = [&](const QString& name) {
    for (int i = 0; i < tput->graphCount(); ++i) {
      QCPGraph* g = tput->graph(i);
      if (g->name() != name || g->data()->isEmpty()) continue;
      const double y = (g->data()->constEnd() - 1)->value;
      return g->valueAxis()->coordToPixel(y);
    }
    return std::nan("");
  };
  const double tps = lastPixel(QStringLiteral("tokens/s")), mfu = lastPixel(QStringLiteral("MFU (%, right)"));
  QVERIFY(std::isfinite(tps) && std::isfinite(mfu));
  QVERIFY2(std::abs(tps - mfu) > tput->axisRect()->height() / 4.0,
           qPrintable(QStringLiteral("tokens/s at %1 px, MFU at %2 px").arg(tps).arg(mfu)));
  // The hover box stays inside the plot area (one series a line when one line does not fit),
  // never over the right axis' labels.
  const QRect area = tput->axisRect()->rect();
  const QPoint at(area.right() - 4, area.center().y());
  QMouseEvent move(QEvent::MouseMove, QPointF(at), tput->mapToGlobal(QPointF(at)), Qt::NoButton, Qt::NoButton,
                   Qt::NoModifier);
  QCoreApplication::sendEvent(tput, &move);
  flotilla::ui::PlotPanel* panel = dash.plot(QStringLiteral("throughputPlot"));
  QTRY_VERIFY(!panel->readoutText().isEmpty());
  const QFontMetrics fm(tput->font());
  int widest = 0;
  for (const QString& line : panel->readoutText().split(QLatin1Char('\n')))
    widest = std::max(widest, fm.horizontalAdvance(line));
  QVERIFY2(widest + 16 <= area.width(), qPrintable(panel->readoutText()));
  const QString dir =
      qEnvironmentVariable("FLOTILLA_SCREENSHOT_DIR", QStringLiteral(FLOTILLA_SCREENSHOT_DIR));
  QTest::qWait(50);  // the readout's queued replot
  QVERIFY(dash.grab().save(dir + QStringLiteral("/live-throughput-hover.png")));
}

// checkpoint.every = "auto": the worker's interval event (docs/metrics-protocol.md) is shown under
// the plots with its inputs, the latest one winning; nothing is shown for a run without one.
void TestLiveDashboard::checkpointIntervalIsShownWithItsInputs() {
  LiveDashboard dash;
  dash.resize(1200, 700);
  dash.show();
  QVERIFY(QTest::qWaitForWindowExposed(&dash));
  dash.ingest(fake_worker::record(stepRecord(1, 0, 100, 5.0, 1e-3)));
  dash.refreshAll();
  QLabel* label = dash.findChild<QLabel*>(QStringLiteral("checkpointIntervalLabel"));
  QVERIFY(label);
  QVERIFY(!label->isVisible());
  const auto interval = [](const QString& message, int steps) {
    return QJsonObject{{"v", 1},
                       {"type", "event"},
                       {"time", 0},
                       {"rank", 0},
                       {"level", "info"},
                       {"message", message},
                       {"ckpt_interval_steps", QString::number(steps)},
                       {"mtbi_s", "21600"},
                       {"write_s", "2.1"}};
  };
  dash.ingest(fake_worker::record(interval(
      "checkpoint interval: every 120 steps (6.1 min; write 2.1 s, MTBI 6 h (prior), step 3.0 s; Daly 2006)", 120)));
  dash.ingest(fake_worker::record(stepRecord(2, 0, 200, 4.9, 1e-3)));
  dash.refreshAll();
  QVERIFY(label->isVisible());
  QCOMPARE(label->text(), QStringLiteral("Checkpoint interval: every 120 steps (6.1 min; write 2.1 s, MTBI 6 h "
                                         "(prior), step 3.0 s; Daly 2006)"));
  // An ordinary event changes nothing; a new interval replaces the old.
  QJsonObject other{{"v", 1}, {"type", "event"}, {"time", 0}, {"rank", 0}, {"level", "info"}, {"message", "x"}};
  dash.ingest(fake_worker::record(other));
  dash.ingest(fake_worker::record(
      interval("checkpoint interval: every 12 steps (36.0 s; write 2.1 s, MTBI 10.0 min (node b: 3 preemptions "
               "in 0.5 h), step 3.0 s; Daly 2006)",
               12)));
  dash.ingest(fake_worker::record(stepRecord(3, 0, 300, 4.8, 1e-3)));
  dash.refreshAll();
  QVERIFY(label->text().startsWith(QStringLiteral("Checkpoint interval: every 12 steps")));
  QVERIFY(label->text().contains(QStringLiteral("node b: 3 preemptions")));
  dash.reset();
  dash.refreshAll();
  QVERIFY(!label->isVisible());
}

QTEST_MAIN(TestLiveDashboard)
#include "test_live_dashboard.moc"
