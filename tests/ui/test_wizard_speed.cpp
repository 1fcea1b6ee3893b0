// The wizard's Speed line and the Budget page's estimate, calibrated (issue 17 item 4): without a
// kept peak they say UNCALIBRATED; with a kept peak (a fake cpu-peaks.json) they show the
// calibrated compute + communication split; once the store holds earlier runs of the same model
// and layout (a real SQLite store read by loadPlanHistory), the efficiency is learned from them and
// the last one is shown predicted against measured, and the budget's "stops after about N steps"
// uses the calibrated step. The texts are the engine's lines (calibration.h), so they equal what
// `flotilla plan` prints for the same figures.
#include <QLabel>
#include <QTemporaryDir>
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
void storeRun(const QString& path, const std::string& name, const flotilla::RunConfig& config, double step_ms,
              double when, bool jsonOnly = false) {
  flotilla::db::Database db(path.toStdString());
  flotilla::db::NewRun r;
  r.name = name;
  if (jsonOnly)
    r.config_json = flotilla::config_to_json(config, -1);
  else
    r.config_toml = flotilla::config_to_toml(config);
  r.created_at = when;
  const int64_t id = flotilla::db::create_run(db, r);
  std::vector<flotilla::db::MetricRow> rows;
  for (int s = 1; s <= 6; ++s) {
    rows.push_back({id, "loss", s, 4.0, when + s});
    rows.push_back({id, "step_ms", s, s == 1 ? 2 * step_ms : step_ms, when + s});
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
          text.contains(QStringLiteral("x efficiency 0.450 (default for a CPU run")) &&
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

  // The budget: a time limit of half an hour stops it after 1800 s / 1.778 s = 1012.5 steps.
  flotilla::RunConfig c = w.config();
  c.train.steps = 100000;
  c.budget.max_hours = 0.5;
  w.setConfig(c);
  QCOMPARE(w.advanceTo(RunWizard::Budget), int(RunWizard::Budget));
  const QString estimate = w.budgetPage()->estimateText();
  QVERIFY2(estimate.contains(QStringLiteral("The time limit stops it after about 1012 steps")) &&
               estimate.contains(QStringLiteral("Step time calibrated on this machine")) &&
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
}

QTEST_MAIN(TestWizardSpeed)
#include "test_wizard_speed.moc"
