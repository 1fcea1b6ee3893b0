// The Live page's "Communication" panel (issue 36), for runs with more than one rank: a plot of the
// share of the link each process group reaches and the share of its communication that was hidden
// behind compute, over the run's steps; a table per group (op, MB/step, ms/step, bus bandwidth, the
// slowest link the group crosses, share, hidden); and the advice on the run's communication.
//
// Decisions:
// - Every number comes from runs/comm_efficiency.h (comm_report for the table, comm_series for the
//   plot) and runs/comm_advice.h (run_advice): the panel formats, it never recomputes, so Live,
//   `flotilla runs show` and Compare cannot disagree.
// - The `comm/` metrics are per comm record (one every train.log_every steps), not per step, and the
//   efficiency needs the run's nodes and link figures too: the panel reads the store, not the step
//   records. Like the node readings (nodesamples.h) the page asks and the store answers off the UI
//   thread: poll() runs one read on the thread pool (a few indexed queries), never two at once, and
//   an answer for a run no longer followed is dropped. The page polls as comm records can arrive
//   (while the run is active and visible) and once more when it ends.
// - The panel stays hidden for a run that has nothing to show (one rank, no comm records yet), so a
//   single-GPU run's page looks as before; the report's note says why when it is shown empty.
#pragma once

#include <QFutureWatcher>
#include <QString>
#include <QStringList>
#include <QWidget>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "db/database.h"
#include "runs/comm_advice.h"
#include "runs/comm_efficiency.h"
#include "ui/plot/columntable.h"

class QLabel;
class QListWidget;
class QTableWidget;

namespace flotilla::ui {

class ChartPlot;

// What one read of the store gives the panel.
struct CommSnapshot {
  quint64 generation = 0;
  qint64 runId = 0;
  runs::CommReport report;
  std::map<std::string, std::vector<runs::CommPoint>> series;  // per group of the report
  std::vector<runs::Advice> advice;
  bool adviceRead = false;  // an advice source was set and answered
  QString error;            // the store could not be read (the panel keeps what it shows)
};

// The advice for a stored run (runs::run_advice once the advice rules are linked in).
using CommAdviceSource = std::function<std::vector<runs::Advice>(const db::Database&, int64_t)>;

// Reads run `runId`'s report, its groups' series and (with `advice`) its advice. Any thread; never throws.
CommSnapshot readCommSnapshot(const QString& databasePath, qint64 runId, const CommAdviceSource& advice);

class CommPanel : public QWidget {
  Q_OBJECT

 public:
  explicit CommPanel(QWidget* parent = nullptr);
  ~CommPanel() override;

  void setDatabasePath(const QString& path) { m_path = path; }
  void setAdviceSource(CommAdviceSource source) { m_adviceSource = std::move(source); }
  // Starts over for stored run `runId` (0: none): clears what is shown and hides the panel.
  void follow(qint64 runId);
  qint64 runId() const { return m_runId; }
  // Starts a read unless one is running or there is nothing to read; returns whether it did.
  bool poll();
  bool busy() const { return m_busy; }
  // Shows a snapshot (what a finished read does; tests call it with their own).
  void apply(const CommSnapshot& snapshot);
  // Whether the followed run has communication to show (the page shows the panel then).
  bool hasData() const { return m_hasData; }

  QTableWidget* table() const { return m_table; }
  ChartPlot* plot() const { return m_plot; }
  QListWidget* adviceList() const { return m_advice; }
  QString summaryText() const;
  // The table as text, one row per line, cells separated by " | " (tests, copy).
  QString tableText() const;

 signals:
  // A read finished and the panel shows its answer (hasData() may have changed).
  void updated();

 private:
  void finished();
  void rebuildPlot(const QStringList& groups);

  QString m_path;
  CommAdviceSource m_adviceSource;
  qint64 m_runId = 0;
  quint64 m_generation = 0;
  bool m_busy = false;
  bool m_hasData = false;
  QLabel* m_summary;
  QTableWidget* m_table;
  ChartPlot* m_plot = nullptr;
  QWidget* m_plotHolder;
  QStringList m_plotGroups;
  ColumnTable m_points;
  QLabel* m_adviceTitle;
  QListWidget* m_advice;
  QFutureWatcher<CommSnapshot> m_watcher;
};

}  // namespace flotilla::ui
