// The Nodes page's link matrix (issue 36): how fast the transport runs use (Gloo's TCP, NCCL)
// carries data between the nodes, as `flotilla nodes links` measures it (runs/link_job.h): a table
// with the one-way latency and the bandwidth of every ordered pair (rows: from, columns: to; the
// diagonal is the node's intra-node figure, two ranks on it), a heat map of the bandwidth beside it
// (linkheatmap.h), the slowest link named in a line above both, when and over what it was measured,
// and the problems the measurement met. "Measure links" asks the page to measure (the view itself
// does no I/O).
//
// Decision: the view shows one stored measurement whole (the newest, as the page opens, or the one
// just taken), never figures of different measurements mixed, so the slowest link named is the
// slowest of what the table shows. The slowest link is the link job's (runs::slowest_link), not
// recomputed here. The TCP-connect matrix above it (latencyview.h) is the reachability check.
#pragma once

#include <QStringList>
#include <QVector>
#include <QWidget>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "db/links.h"
#include "runs/link_job.h"

class QLabel;
class QPushButton;
class QTableWidget;

namespace flotilla::ui {

class LinkHeatMap;

struct LinkCell {
  bool present = false;  // the measurement has a row for this ordered pair
  std::optional<double> latencySeconds, bytesPerSecond;
  QString error;
};

// One measurement laid out for the view: nodes (by id order), cells row-major (from * n + to).
struct LinkMatrix {
  qint64 id = 0;
  QStringList nodes;
  QVector<LinkCell> cells;
  double measuredAt = 0;
  double seconds = 0;
  QString transport;
  QString note;  // problems, one sentence per line
  std::optional<runs::SlowestLink> slowest;
  bool empty() const { return nodes.isEmpty(); }
};

// Lays `m` out with the nodes' names (`names`: id -> name; an id not named reads "node <id>").
LinkMatrix makeLinkMatrix(const db::LinkMeasurement& m, const std::map<int64_t, std::string>& names,
                          std::optional<runs::SlowestLink> slowest);

class LinksView : public QWidget {
  Q_OBJECT

 public:
  explicit LinksView(QWidget* parent = nullptr);

  void setMatrix(const LinkMatrix& matrix);
  void setBusy(bool busy);
  void setMessage(const QString& text);
  void setMeasureEnabled(bool enabled, const QString& whyNot = {});

  QTableWidget* table() const { return m_table; }
  LinkHeatMap* heatMap() const { return m_heat; }
  QPushButton* measureButton() const { return m_measure; }
  QString slowestText() const;
  QString measuredText() const;
  QString noteText() const;
  QString messageText() const;

  // "61 µs", "1.20 ms", "0.25 s".
  static QString latencyText(double seconds);

 signals:
  void measureRequested();

 private:
  QTableWidget* m_table;
  LinkHeatMap* m_heat;
  QLabel* m_slowest;
  QLabel* m_when;
  QLabel* m_note;
  QLabel* m_message;
  QPushButton* m_measure;
  QString m_measureTip;
  bool m_busy = false;
};

}  // namespace flotilla::ui
