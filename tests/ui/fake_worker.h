// A stand-in for flotilla-worker in the app's unit tests: a POSIX shell script that takes the
// demo's command line (demo --out-dir DIR [--steps N]) and writes metrics-protocol records to
// DIR/metrics.jsonl, so ServiceRun's supervision is tested in milliseconds instead of minutes of
// training. The real worker is exercised by test_live_e2e.
//
// Environment knobs (read when the script starts):
//   FAKE_STEP_S   seconds to sleep after each step (default 0)
//   FAKE_EXIT     exit code after the last step (default 0); non-zero also writes to stderr
//   FAKE_TORN=1   write step 2 in two pieces 0.3 s apart (the tail must hold the torn line)
//   FAKE_LOSS     every step's loss (default 99.5, 98.5, ...)
//   FAKE_TIME=1   step records carry the wall-clock time (default 0)
// SIGTERM: writes a preempt checkpoint and a summary, then exits 10, like the real worker.
// SIGUSR1: appends a line to DIR/usr1-received and, at the next step, writes a checkpoint
// record with reason "request" and goes on, like the real worker's "checkpoint now".
#pragma once

#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QList>
#include <QString>

#include <cmath>

#include "db/costs.h"
#include "engine/train/metrics_reader.h"
#include "ui/live/livedata.h"

namespace fake_worker {

inline constexpr char kScript[] = R"SH(#!/bin/sh
dir="$3"
steps=5
if [ "$4" = "--steps" ]; then steps="$5"; fi
m="$dir/metrics.jsonl"
mkdir -p "$dir"
emit() { printf '%s\n' "$1" >> "$m"; }
echo "fake worker: $steps steps into $dir"
emit '{"v":1,"type":"run_start","time":0,"rank":0,"run":"fake","config":{"train":{"steps":'"$steps"'}},"world_size":1,"parameters":1000000,"start_step":0,"resumed_from":null,"pid":'"$$"'}'
stop=0
trap 'stop=1' TERM
usr1=0
trap 'usr1=1; echo usr1 >> "$dir/usr1-received"' USR1
i=1
while [ "$i" -le "$steps" ]; do
  loss="${FAKE_LOSS:-$((100 - i)).5}"
  if [ "$i" = 2 ] && [ "${FAKE_TORN:-0}" = 1 ]; then
    printf '%s' '{"v":1,"type":"step","time":0,"rank":0,"step":2,' >> "$m"
    sleep 0.3
    printf '%s\n' '"loss":'"$loss"',"lr":0.001,"tokens_per_s":1234.0,"mfu":0.25,"step_ms":10}' >> "$m"
  else
    ts=0
    if [ "${FAKE_TIME:-0}" = 1 ]; then ts=$(date +%s.%N); fi
    emit '{"v":1,"type":"step","time":'"$ts"',"rank":0,"step":'"$i"',"loss":'"$loss"',"lr":0.001,"tokens_per_s":1234.0,"mfu":0.25,"step_ms":10}'
  fi
  if [ "$stop" = 1 ]; then
    mkdir -p "$dir/checkpoints/step-$i" && echo '{}' > "$dir/checkpoints/step-$i/MANIFEST"
    emit '{"v":1,"type":"checkpoint","time":0,"rank":0,"step":'"$i"',"dir":"'"$dir/checkpoints/step-$i"'","bytes":1048576,"seconds":0.01,"reason":"preempt"}'
    emit '{"v":1,"type":"summary","time":0,"rank":0,"steps":'"$i"',"tokens":0,"final_loss":'"$loss"',"best_val_loss":null,"wall_s":1.0,"mean_tokens_per_s":1234.0,"mean_mfu":0.25,"exit":"preempted"}'
    exit 10
  fi
  if [ "$usr1" = 1 ]; then
    usr1=0
    mkdir -p "$dir/checkpoints/step-$i" && echo '{}' > "$dir/checkpoints/step-$i/MANIFEST"
    emit '{"v":1,"type":"checkpoint","time":0,"rank":0,"step":'"$i"',"dir":"'"$dir/checkpoints/step-$i"'","bytes":1048576,"seconds":0.01,"reason":"request"}'
  fi
  if [ "$i" = 3 ]; then
    emit '{"v":1,"type":"eval","time":0,"rank":0,"step":3,"tokens":0,"val_loss":97.25,"batches":4}'
    emit '{"v":1,"type":"event","time":0,"rank":0,"level":"warning","message":"fake warning at step 3"}'
  fi
  sleep "${FAKE_STEP_S:-0}"
  i=$((i + 1))
done
code="${FAKE_EXIT:-0}"
if [ "$code" != 0 ]; then
  echo "fake worker: data shard /nowhere/train_000.bin is missing" >&2
  exit "$code"
fi
emit '{"v":1,"type":"checkpoint","time":0,"rank":0,"step":'"$steps"',"dir":"'"$dir/checkpoints/final"'","bytes":1048576,"seconds":0.01,"reason":"final"}'
emit '{"v":1,"type":"summary","time":0,"rank":0,"steps":'"$steps"',"tokens":0,"final_loss":1.5,"best_val_loss":97.25,"wall_s":1.0,"mean_tokens_per_s":1234.0,"mean_mfu":0.25,"exit":"completed"}'
exit 0
)SH";

// Writes the script as DIR/fake-worker (mode 0755) and returns its path ("" on failure).
inline QString write(const QString& dir) {
  const QString path = dir + QStringLiteral("/fake-worker");
  QFile file(path);
  if (!file.open(QIODevice::WriteOnly | QIODevice::Truncate)) return {};
  file.write(kScript);
  file.close();
  file.setPermissions(QFileDevice::ReadOwner | QFileDevice::WriteOwner | QFileDevice::ExeOwner |
                      QFileDevice::ReadGroup | QFileDevice::ExeGroup | QFileDevice::ReadOther |
                      QFileDevice::ExeOther);
  return path;
}

// A synthetic, realistic multi-rank run as metrics-protocol records (docs/metrics-protocol.md),
// for dashboard tests and screenshots: 2 ranks, rank 1 waiting longer on communication, two GPUs,
// a priced budget. Deterministic (no random numbers): the noise is a sum of sines.
struct Synthetic {
  int steps = 600;        // step records written
  int planned = 2000;     // train.steps in the config
  bool gpus = true;       // GPU fields present
  double usdPerHour = 7.2;
  double maxUsd = 6.0;
  double t0 = 1764495000.0;
  double secondsPerStep = 1.3;
};

inline QJsonObject runStart(const Synthetic& s) {
  return QJsonObject{{"v", 1}, {"type", "run_start"}, {"time", s.t0}, {"rank", 0}, {"run", "gpt-small-2rank"},
                     {"config", QJsonObject{{"train", QJsonObject{{"steps", s.planned}}},
                                            {"budget", QJsonObject{{"usd_per_hour", s.usdPerHour},
                                                                   {"max_usd", s.maxUsd},
                                                                   {"price_source", "lambda:gpu_2x_h100"}}}}},
                     {"world_size", 2}, {"parameters", 124000000}, {"start_step", 0},
                     {"baseline_rss_bytes", 1.2e9}, {"pid", 4242}};
}

// Mostly slow drift, a little step-to-step jitter, as real step times and throughput look.
inline double noise(double step) {
  return std::sin(step * 1.7) * 0.2 + std::sin(step * 0.045) * 0.5 + std::sin(step * 0.011) * 0.3;
}

inline QJsonObject rankTimes(int rank, double fwd, double bwd, double opt, double comm, double data, double bubble) {
  return QJsonObject{{"rank", rank}, {"data", data}, {"forward", fwd}, {"backward", bwd}, {"optimizer", opt},
                     {"comm", comm}, {"bubble", bubble}, {"step", fwd + bwd + opt + comm + data + bubble}};
}

inline QJsonObject step(const Synthetic& s, int i) {
  const double x = i;
  const double loss = 3.1 + 7.8 * std::exp(-x / 260.0) + 0.12 * noise(x);
  const double warm = 100;
  const double lr = x < warm ? 6e-4 * x / warm : 6e-5 + 0.5 * (6e-4 - 6e-5) * (1 + std::cos(M_PI * (x - warm) / (s.planned - warm)));
  const double j = noise(x);
  const QJsonObject r0 = rankTimes(0, 310 + 6 * j, 620 + 10 * j, 28, 80 + 5 * j, 9, 0);
  const QJsonObject r1 = rankTimes(1, 305 + 6 * j, 615 + 10 * j, 28, 290 + 20 * j, 9, 0);
  const double stepMs = std::max(r0.value("step").toDouble(), r1.value("step").toDouble());
  QJsonObject rec{{"v", 1}, {"type", "step"}, {"time", s.t0 + 5 + x * s.secondsPerStep}, {"rank", 0}, {"step", i},
                  {"tokens", x * 65536}, {"loss", loss}, {"lr", lr}, {"grad_norm", 1.1},
                  {"tokens_per_s", 65536 / (stepMs / 1000) * (1 + 0.02 * j)}, {"mfu", 0.41 * (1 + 0.02 * j)},
                  {"step_ms", stepMs},
                  {"time_ms", QJsonObject{{"data", 9}, {"forward", 310}, {"backward", 620}, {"optimizer", 28},
                                          {"comm", 80}, {"bubble", 0}}},
                  {"ranks", QJsonArray{r0, r1}}, {"slowest_rank", 1},
                  {"peak_rss_bytes", 1.2e9 + 2.3e9 * (1 - std::exp(-x / 40.0))}};
  if (s.gpus)
    rec.insert("gpus", QJsonArray{QJsonObject{{"device", 0}, {"util", 0.93 + 0.03 * j}, {"mem_bytes", 61.0e9 + 1e8 * j},
                                              {"mem_total_bytes", 85.9e9}},
                                  QJsonObject{{"device", 1}, {"util", 0.71 + 0.04 * j}, {"mem_bytes", 58.5e9 + 1e8 * j},
                                              {"mem_total_bytes", 85.9e9}}});
  return rec;
}

inline QJsonObject eval(const Synthetic& s, int i) {
  const double x = i;
  return QJsonObject{{"v", 1}, {"type", "eval"}, {"time", s.t0 + 6 + x * s.secondsPerStep}, {"rank", 0}, {"step", i},
                     {"tokens", x * 65536}, {"val_loss", 3.25 + 7.6 * std::exp(-x / 260.0)}, {"batches", 8}};
}

// run_start, the steps, an eval every 50 steps.
inline QList<QJsonObject> syntheticRun(const Synthetic& s) {
  QList<QJsonObject> out{runStart(s)};
  for (int i = 1; i <= s.steps; ++i) {
    out.append(step(s, i));
    if (i % 50 == 0) out.append(eval(s, i));
  }
  return out;
}

// A record as the app receives it: the JSON object as a protocol line, through the engine's reader.
inline flotilla::MetricsRecord record(QJsonObject o) {
  if (!o.contains(QStringLiteral("v"))) o.insert(QStringLiteral("v"), 1);
  flotilla::MetricsRecord r;
  flotilla::parse_metrics_line(QJsonDocument(o).toJson(QJsonDocument::Compact).toStdString(), r);
  return r;
}

inline QList<flotilla::MetricsRecord> records(const QList<QJsonObject>& objects) {
  QList<flotilla::MetricsRecord> out;
  for (const QJsonObject& o : objects) out.append(record(o));
  return out;
}

// What the store would say the synthetic run costs: its price stored when it started, its cap,
// one accrual open from t0.
inline flotilla::ui::RunCost cost(const Synthetic& s) {
  flotilla::ui::RunCost c;
  c.known = true;
  c.usdPerHour = s.usdPerHour;
  c.source = QStringLiteral("catalogue lambda/gpu_2x_h100 on-demand, 2/2 GPUs");
  c.maxUsd = s.maxUsd;
  flotilla::db::Accrual a;
  a.start = s.t0;
  a.devices = 2;
  a.usd_per_hour = s.usdPerHour;
  c.accruals = {a};
  return c;
}

inline QByteArray toJsonLines(const QList<QJsonObject>& records) {
  QByteArray bytes;
  for (const QJsonObject& r : records) bytes += QJsonDocument(r).toJson(QJsonDocument::Compact) + '\n';
  return bytes;
}

}  // namespace fake_worker
