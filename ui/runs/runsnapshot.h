// One row of the Runs table as read from the store, and the reader that takes a snapshot of all of
// them on its own thread.
//
// Decision: the table never queries on the UI thread. A StorePoller lives on a QThread with its
// own read connection and, every second (or when asked), reads the run list plus one indexed
// "last value" lookup per run for the live columns (tokens/s, MFU) and the accrued cost, and
// sends the whole snapshot back as a queued signal. The runs table has one row per run, so a
// snapshot is small even when the metrics table holds millions of rows.
#pragma once

#include <QMetaType>
#include <QObject>
#include <QString>
#include <QStringList>
#include <QVector>

#include <memory>

namespace flotilla::db {
class Database;
}

class QTimer;

namespace flotilla::ui {

struct RunRow {
  qint64 id = 0;
  QString name;
  QString status;      // the store's status name ("running", "stopped", ...)
  QString statusNote;  // why ("budget reached: $0.0201 of $0.02"), "" when nothing to say
  QString target;
  QString runDir;
  QStringList tags;
  QString notes;
  qint64 parameters = 0;  // 0: not known yet
  QString layout;         // "dp2 × tp1 × pp1" from the config
  qint64 plannedSteps = 0;
  qint64 lastStep = 0;
  double loss = 0;
  bool hasLoss = false;
  qint64 checkpoints = 0;  // committed checkpoints the store records
  double tokensPerSec = 0, mfu = 0;
  double secondsPerStep = 0;  // running runs: the pace measured on its recent steps (0: not known)
  double createdAt = 0, startedAt = 0, endedAt = 0;  // Unix seconds; 0: not set
  // Running time as of readAt (db::RunSummary::running_s: what the price is charged for); a
  // running run's goes on with the clock from there.
  double runningSeconds = 0, readAt = 0;
  double costUsd = 0;
  double usdPerHour = 0;       // open accruals' rate (running runs only)
  double priceUsdPerHour = 0;  // the run's price stored when it started (0: unpriced or not resolved)
  QString priceSource;
  double budgetUsd = 0;  // its cap (0: none)
  qint64 parentId = 0;
  QString parentKind;
};

// Every run, newest first, with live columns as of `now` (Unix seconds; 0: the present, costs and
// running time then measured monotonically as db/costs.h reads them).
QVector<RunRow> readRunRows(const flotilla::db::Database& db, double now);

class StorePoller : public QObject {
  Q_OBJECT

 public:
  // Opens a read connection to `databasePath` lazily, on the thread the poller lives on.
  explicit StorePoller(const QString& databasePath, int intervalMs = 1000);
  ~StorePoller() override;

 public slots:
  void start();    // begin polling (call through a queued connection after moveToThread)
  void refresh();  // one snapshot now
  void stopPolling();

 signals:
  void snapshot(const QVector<flotilla::ui::RunRow>& rows);
  void failed(const QString& message);

 private:
  QString m_path;
  int m_interval;
  QTimer* m_timer = nullptr;
  std::unique_ptr<flotilla::db::Database> m_db;
};

}  // namespace flotilla::ui

Q_DECLARE_METATYPE(flotilla::ui::RunRow)
