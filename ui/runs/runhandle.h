// What the pages need from a run they show, wherever it executes. The app's one implementation is
// ServiceRun (servicerun.h), a view of the runs service's one watch loop; tests implement it too.
//
// Decision: the state enum, log line and signals live here so pages depend on this interface only.
// Records arrive as the engine's typed metrics records after the store committed them, and the
// history a late follower replays is the watcher's in-memory feed of those records
// (runs/record_feed.h), never the worker's file read again. A run that cannot honour "Checkpoint
// now" says so (canCheckpoint() false with the service's reason) instead of ignoring the button.
#pragma once

#include <QMetaType>
#include <QObject>
#include <QString>
#include <QVector>

#include <memory>
#include <string>

#include "runs/record_feed.h"
#include "ui/plot/seriesstore.h"

namespace flotilla::ui {

class RunHandle : public QObject {
  Q_OBJECT

 public:
  enum class State {
    NotStarted,
    Running,
    Stopping,   // stop requested; the worker checkpoints at its next step and exits with 10
    Completed,  // exit 0
    Stopped,    // exit 10 (preempted): stopped on request, resumable
    Failed,     // any other exit code, a crash, or the worker could not start
    Killed,     // SIGKILL on request
    Detached,   // left running when the app closed; no longer supervised
  };
  Q_ENUM(State)

  struct LogLine {
    QString level;  // "info", "warning", "error"
    QString text;
  };
  // A text sample the model wrote at a step, decoded with the run's tokenizer (runs/sample_text.h).
  struct TextSample {
    qint64 step = 0;
    QString text;
  };

  using QObject::QObject;

  virtual QString name() const = 0;
  // Where the run executes, in the runs service's words ("nodes a, b", "slurm cluster flo, job 12"),
  // when that is not this machine (its folder is not here); "" otherwise.
  virtual QString placeText() const { return {}; }
  virtual State state() const = 0;
  bool isActive() const { return state() == State::Running || state() == State::Stopping; }
  virtual QString stateText() const = 0;
  // Why the run failed, in plain words, for the top of the Live page ("" unless it failed).
  virtual QString failureReason() const { return {}; }

  virtual void stop() = 0;
  virtual void checkpointNow() = 0;
  virtual void kill() = 0;
  // Whether Stop and Kill can be asked now (a run watched here: while it runs; one watched
  // elsewhere: as the runs service says).
  virtual bool canStop() const { return state() == State::Running; }
  virtual bool canKill() const { return isActive(); }
  virtual bool canCheckpoint() const { return true; }
  virtual QString checkpointUnsupportedReason() const { return {}; }

  virtual qint64 elapsedMs() const = 0;
  virtual qint64 plannedSteps() const = 0;
  virtual qint64 lastStep() const = 0;
  virtual double lastLoss() const = 0;
  virtual double lastValLoss() const = 0;
  virtual double tokensPerSec() const = 0;
  virtual double mfu() const = 0;
  // Over the whole run (runs/run_speed.h: the worker's summary rule), for an ended run's header.
  virtual double runTokensPerSec() const { return tokensPerSec(); }
  virtual double runMfu() const { return mfu(); }

  virtual const SeriesStore& series() const = 0;
  virtual const QVector<LogLine>& log() const = 0;
  // The text samples so far, oldest first.
  virtual QVector<TextSample> samples() const { return {}; }
  // The records already delivered by recordReceived, in order (the first deliveredRecords() of
  // the feed), which a page that starts following late replays; nullptr when there are none.
  virtual std::shared_ptr<const runs::RecordFeed> feed() const = 0;
  virtual qint64 deliveredRecords() const = 0;
  // The run's id in the store (0: not stored, or not known yet).
  virtual qint64 storeId() const { return 0; }

 protected:
  // For a watcher thread's runs::WatchHooks::on_budget: emits budgetCrossed on this object's thread.
  void postBudget(const std::string& message, bool stopping) {
    QMetaObject::invokeMethod(
        this, [this, m = QString::fromStdString(message), stopping] { emit budgetCrossed(m, stopping); },
        Qt::QueuedConnection);
  }

 signals:
  // Every metrics-protocol record once stored (docs/metrics-protocol.md), before the typed signals.
  void recordReceived(const flotilla::MetricsRecord& record);
  void logAppended(const QString& level, const QString& text);
  void sampleAppended(qint64 step, const QString& text);
  void stateChanged(flotilla::ui::RunHandle::State state);
  // The runs layer's budget guard crossed the warning (stopping false) or the cap or time limit
  // (stopping true), in its words ("run 'x' has spent $0.08 of its $0.10 budget").
  void budgetCrossed(const QString& message, bool stopping);
  // At most once per poll: progress numbers changed.
  void changed();
};

}  // namespace flotilla::ui

Q_DECLARE_METATYPE(flotilla::MetricsRecord)
