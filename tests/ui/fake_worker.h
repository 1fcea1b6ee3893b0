// A stand-in for flotilla-worker in the app's unit tests: a POSIX shell script that takes the
// demo's command line (demo --out-dir DIR [--steps N]) and writes metrics-protocol records to
// DIR/metrics.jsonl, so LocalRun's supervision is tested in milliseconds instead of minutes of
// training. The real worker is exercised by test_live_e2e.
//
// Environment knobs (read when the script starts):
//   FAKE_STEP_S   seconds to sleep after each step (default 0)
//   FAKE_EXIT     exit code after the last step (default 0); non-zero also writes to stderr
//   FAKE_TORN=1   write step 2 in two pieces 0.3 s apart (the tail must hold the torn line)
// SIGTERM: writes a preempt checkpoint and a summary, then exits 10, like the real worker.
#pragma once

#include <QFile>
#include <QString>

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
i=1
while [ "$i" -le "$steps" ]; do
  loss="$((100 - i)).5"
  if [ "$i" = 2 ] && [ "${FAKE_TORN:-0}" = 1 ]; then
    printf '%s' '{"v":1,"type":"step","time":0,"rank":0,"step":2,' >> "$m"
    sleep 0.3
    printf '%s\n' '"loss":'"$loss"',"lr":0.001,"tokens_per_s":1234.0,"mfu":0.25,"step_ms":10}' >> "$m"
  else
    emit '{"v":1,"type":"step","time":0,"rank":0,"step":'"$i"',"loss":'"$loss"',"lr":0.001,"tokens_per_s":1234.0,"mfu":0.25,"step_ms":10}'
  fi
  if [ "$stop" = 1 ]; then
    mkdir -p "$dir/checkpoints/step-$i" && echo '{}' > "$dir/checkpoints/step-$i/MANIFEST"
    emit '{"v":1,"type":"checkpoint","time":0,"rank":0,"step":'"$i"',"dir":"'"$dir/checkpoints/step-$i"'","bytes":1048576,"seconds":0.01,"reason":"preempt"}'
    emit '{"v":1,"type":"summary","time":0,"rank":0,"steps":'"$i"',"tokens":0,"final_loss":'"$loss"',"best_val_loss":null,"wall_s":1.0,"mean_tokens_per_s":1234.0,"mean_mfu":0.25,"exit":"preempted"}'
    exit 10
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

}  // namespace fake_worker
