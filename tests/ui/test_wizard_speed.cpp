// The wizard's Speed line and the Budget page's estimate, calibrated (issue 17 item 4): without a
// kept peak they say UNCALIBRATED; with a kept peak (a fake cpu-peaks.json) they show the
// calibrated compute + communication split; once the store holds earlier runs of the same model
// and layout (a real SQLite store read by loadPlanHistory), the efficiency is learned from them and
// the last one is shown predicted against measured, and the budget's "stops after about N steps"
// uses the calibrated step. The texts are the engine's lines (calibration.h), so they equal what
// `flotilla plan` prints for the same figures.
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QLabel>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QWizardPage>
#include <QtTest>

#include <cmath>
#include <cstdlib>

#include "db/database.h"
#include "db/metric_sink.h"
#include "db/run_store.h"
#include "engine/config/config_io.h"
#include "engine/cpu/cpu_features.h"
#include "engine/cpu/peak_cache.h"
#include "engine/plan/calibration.h"
#include "ui/wizard/budgetpage.h"
#include "ui/wizard/configdraft.h"
#include "ui/wizard/hardwarepage.h"
#include "ui/wizard/runwizard.h"

using flotilla::ui::RunWizard;

class TestWizardSpeed : public QObject {
  Q_OBJECT

 private slots:
  void speedLineIsCalibratedAndCheckedAgainstTheStore();
  void budgetCountsTheStartUpAndPricesEveryChoice();
};

namespace {

flotilla::ProbeResult cpuMachine() {
  flotilla::ProbeResult p;
  p.cpu_model = "Test CPU";
  p.physical_cores = 2;
  p.logical_cpus = 2;
  p.memory_total_bytes = 32ull << 30;
  return p;
}

// A local run of `config` whose steps 1..6 took `step_ms` each (step 1, the warm-up, twice as
// long). `jsonOnly`: stored as a run from the built-in demo is, with config_json and no TOML.
// `startup_s` > 0: the run went running at `when` and wrote step 1 `startup_s` + one step later
// (a measured start-up); else it never ran (no start time: its start-up is unknown).
void storeRun(const QString& path, const std::string& name, const flotilla::RunConfig& config, double step_ms,
              double when, bool jsonOnly = false, double startup_s = 0) {
  flotilla::db::Database db(path.toStdString());
  flotilla::db::NewRun r;
  r.name = name;
  if (jsonOnly)
    r.config_json = flotilla::config_to_json(config, -1);
  else
    r.config_toml = flotilla::config_to_toml(config);
  r.created_at = when;
  const int64_t id = flotilla::db::create_run(db, r);
  if (startup_s > 0) flotilla::db::set_status(db, id, flotilla::db::RunStatus::kRunning, when, "test");
  std::vector<flotilla::db::MetricRow> rows;
  const double step_s = step_ms / 1000.0;
  for (int s = 1; s <= 6; ++s) {
    const double t = startup_s > 0 ? when + startup_s + s * step_s : when + s;
    rows.push_back({id, "loss", s, 4.0, t});
    rows.push_back({id, "step_ms", s, s == 1 ? 2 * step_ms : step_ms, t});
  }
  flotilla::db::write_tx(db, [&] { flotilla::db::MetricSink(db).insert(rows); });
}

}  // namespace

void TestWizardSpeed::speedLineIsCalibratedAndCheckedAgainstTheStore() {
  QTemporaryDir tmp;
  QVERIFY(tmp.isValid());
  qputenv("FLOTILLA_CACHE_DIR", tmp.filePath(QStringLiteral("cache")).toUtf8());
  RunWizard w(nullptr, tmp.filePath(QStringLiteral("templates")));
  w.setMachine(cpuMachine());
  QCOMPARE(w.advanceTo(RunWizard::Hardware), int(RunWizard::Hardware));
  const flotilla::RunConfig demo = w.config();

  // No kept peak: the nominal planner, and it says so.
  QVERIFY2(w.hardwarePage()->planText().contains(QStringLiteral("UNCALIBRATED")),
           qPrintable(w.hardwarePage()->planText()));

  // A kept peak for this CPU and the threads one rank uses: calibrated, default efficiency.
  flotilla::cpu::CpuPeak peak;
  peak.cpu_model = flotilla::cpu::cpu_features().brand;
  peak.threads = flotilla::rank_threads(demo);
  peak.fp32_isa = "avx2";
  peak.fp32_fma_gflops = 100;
  QVERIFY(flotilla::cpu::store_peak(flotilla::cpu::peak_cache_path(), peak));
  w.setConfig(demo);
  QString text = w.hardwarePage()->planText();
  QVERIFY2(
      text.contains(QStringLiteral("calibrated peak, default efficiency (no earlier run of this model here): "
                                   "100.0 GFLOP/s (fp32 FMA ceiling (avx2, ")) &&
          text.contains(QStringLiteral("x efficiency 0.880 (default for a CPU run")) &&
          text.contains(QStringLiteral(" per step = compute ")) &&
          text.contains(QStringLiteral(" + communication ")) &&
          !text.contains(QStringLiteral("UNCALIBRATED")),
      qPrintable(text));
  QVERIFY(!text.contains(QStringLiteral("last comparable run")));

  // Two earlier runs of the demo in a real store (and one of another layout, ignored): the plan
  // learns the median of their efficiencies (1/1.6 and 1/2 per second of step: a 1.78 s step), and
  // the newer run is predicted from the older alone (1.6 s against 2 s measured: -20%).
  const QString store = tmp.filePath(QStringLiteral("flotilla.db"));
  storeRun(store, "demo-old", demo, 1600, 1000, true);
  storeRun(store, "demo-new", demo, 2000, 2000);
  flotilla::RunConfig dp2 = demo;
  dp2.parallel.dp = 2;
  storeRun(store, "demo-dp2", dp2, 9000, 3000);
  QSignalSpy loaded(&w, &RunWizard::planHistoryLoaded);
  w.loadNodes(store);
  QVERIFY(loaded.wait(10000) || loaded.count() == 1);

  const std::optional<flotilla::CalibratedPlan> cp = w.draft()->calibratedPlan();
  QVERIFY(cp && cp->learned_from == 2 && cp->last && cp->last->run == "demo-new");
  QCOMPARE(cp->last->predicted_s, 1.6);  // learned from demo-old alone; no communication on 1 rank
  text = w.hardwarePage()->planText();
  QVERIFY2(text.contains(QStringLiteral("learned from 2 earlier runs of this model and layout")) &&
               text.contains(QStringLiteral("last comparable run demo-new (8 x 128): 2 s/step measured, "
                                            "predicted 1.6 s, error -20%")),
           qPrintable(text));
  QCOMPARE(text.section(QLatin1Char(';'), 0, 0).section(QLatin1Char(' '), 0, 0), QStringLiteral("1.78"));
  QVERIFY(std::fabs(cp->plan.step_s - 1 / ((1 / 1.6 + 1 / 2.0) / 2)) < 1e-9);

  // The budget: a time limit of half an hour, less the typical 2 s start-up (none of these runs has
  // a start time), stops it after 1798 s / 1.778 s = 1011.4 steps.
  flotilla::RunConfig c = w.config();
  c.train.steps = 100000;
  c.budget.max_hours = 0.5;
  w.setConfig(c);
  QCOMPARE(w.advanceTo(RunWizard::Budget), int(RunWizard::Budget));
  const QString estimate = w.budgetPage()->estimateText();
  QVERIFY2(estimate.contains(QStringLiteral("The time limit stops it after about 1011 steps")) &&
               estimate.contains(QStringLiteral("+ 2.0 s start-up (typical)")) &&
               estimate.contains(QStringLiteral("Step time: calibrated on this machine")) &&
               estimate.contains(QStringLiteral("last comparable run demo-new")),
           qPrintable(estimate));

  // Issue 34 item 12: llama-tiny never ran here; its Hardware line is estimated from the demo
  // runs (same layout), says so, and gives a range, instead of the nominal default.
  flotilla::RunConfig llama = demo;
  flotilla::apply_overrides(llama, {"model.preset=llama-tiny"});
  w.setConfig(llama);
  QCOMPARE(w.advanceTo(RunWizard::Hardware), int(RunWizard::Hardware));
  const std::optional<flotilla::CalibratedPlan> first = w.draft()->calibratedPlan();
  QVERIFY(first && first->basis == flotilla::CalibratedPlan::Basis::kOtherModels &&
          first->learned_from_others == 2);
  text = w.hardwarePage()->planText();
  QVERIFY2(
      text.contains(QStringLiteral("first run of this model here, estimated from other models' runs on this "
                                   "machine: ")) &&
          text.contains(QStringLiteral("from 2 earlier runs of other models on this machine (gpt2), x 0.86 "
                                       "for the llama architecture")) &&
          text.contains(QStringLiteral(" per step until this model has run here")) &&
          !text.contains(QStringLiteral("UNCALIBRATED")),
      qPrintable(text));
  // The Budget page rests its estimate on the same words (it said UNCALIBRATED here before).
  QCOMPARE(w.advanceTo(RunWizard::Budget), int(RunWizard::Budget));
  const QString budget = w.budgetPage()->estimateText();
  QVERIFY2(budget.contains(QStringLiteral("Step time: first run of this model here, estimated from other "
                                          "models' runs on this machine")) &&
               !budget.contains(QStringLiteral("UNCALIBRATED")),
           qPrintable(budget));
}

// Issue 34 #7, #11, #29: start-up is billed, so the Budget page counts it. Earlier runs that started
// 7 s before their first step teach a 7 s start-up; a $0.15 cap at $36/h (15 s) then stops a run
// after (15 - 7) / step s steps, not 15 / step s (the review's "about 61 steps" that became 7). A
// short priced run's cost shows its digits ("$0.0…", not "$0.00"), and a pricing-catalogue entry
// gives a $ estimate as a typed price does.
void TestWizardSpeed::budgetCountsTheStartUpAndPricesEveryChoice() {
  QTemporaryDir tmp;
  QVERIFY(tmp.isValid());
  qputenv("FLOTILLA_CACHE_DIR", tmp.filePath(QStringLiteral("cache")).toUtf8());
  RunWizard w(nullptr, tmp.filePath(QStringLiteral("templates")));
  w.setMachine(cpuMachine());
  QCOMPARE(w.advanceTo(RunWizard::Hardware), int(RunWizard::Hardware));
  const flotilla::RunConfig demo = w.config();
  const QString store = tmp.filePath(QStringLiteral("flotilla.db"));
  storeRun(store, "demo-a", demo, 500, 1000, false, 7.0);
  storeRun(store, "demo-b", demo, 500, 2000, false, 7.0);
  QSignalSpy loaded(&w, &RunWizard::planHistoryLoaded);
  w.loadNodes(store);
  QVERIFY(loaded.wait(10000) || loaded.count() == 1);
  std::optional<flotilla::CalibratedPlan> cp = w.draft()->calibratedPlan();
  QVERIFY(cp);
  QVERIFY2(std::fabs(cp->startup_s - 7.0) < 1e-6, qPrintable(QString::number(cp->startup_s)));
  QCOMPARE(cp->startup_source, std::string("measured on 2 earlier runs"));

  flotilla::RunConfig c = w.config();
  c.train.steps = 5000;
  c.budget.usd_per_hour = 36;
  c.budget.max_usd = 0.15;
  w.setConfig(c);
  QCOMPARE(w.advanceTo(RunWizard::Budget), int(RunWizard::Budget));
  cp = w.draft()->calibratedPlan();
  const double step_s = w.draft()->plan()->step_s;
  const long long expected = static_cast<long long>(std::floor((0.15 / 36 * 3600 - 7.0) / step_s));
  QString estimate = w.budgetPage()->estimateText();
  QVERIFY2(estimate.contains(QStringLiteral("+ 7.0 s start-up (measured on 2 earlier runs)")) &&
               estimate.contains(
                   QStringLiteral("The spend limit $0.15 stops it after about %1 steps").arg(expected)),
           qPrintable(estimate));

  // A short priced run: its few cents' fraction, with the start-up, in four decimals.
  c.train.steps = 2;
  c.budget.usd_per_hour = 2;
  c.budget.max_usd = 0;
  w.setConfig(c);
  const double cost = (2 * step_s + 7.0) / 3600 * 2;
  estimate = w.budgetPage()->estimateText();
  QVERIFY2(estimate.contains(QStringLiteral(", $%1 at $2.00 per hour").arg(cost, 0, 'f', 4)) &&
               !estimate.contains(QStringLiteral("$0.00 at")),
           qPrintable(estimate));

  // A catalogue entry: its price per hour gives the estimate (and a typed price left from before is
  // dropped from the config: it would win over the entry when the run starts).
  w.budgetPage()->setPriceChoices(
      {{QStringLiteral("aws:test.small"), QStringLiteral("aws:test.small — $0.53/h"), 0.53}});
  QWizardPage* page = w.currentPage();
  page->findChild<QComboBox*>(QStringLiteral("priceSource"))
      ->setCurrentIndex(flotilla::ui::BudgetPage::Catalogue);
  QCOMPARE(w.config().budget.price_source, std::string("aws:test.small"));
  QCOMPARE(w.config().budget.usd_per_hour, 0.0);
  // The disabled Price field shows the entry's price, not the $2 typed before.
  QCOMPARE(page->findChild<QDoubleSpinBox*>(QStringLiteral("usdPerHour"))->value(), 0.53);
  estimate = w.budgetPage()->estimateText();
  QVERIFY2(estimate.contains(QStringLiteral(", $%1 at $0.53 per hour (catalogue entry \"aws:test.small\"")
                                 .arg((2 * step_s + 7.0) / 3600 * 0.53, 0, 'f', 4)),
           qPrintable(estimate));
}

QTEST_MAIN(TestWizardSpeed)
#include "test_wizard_speed.moc"
