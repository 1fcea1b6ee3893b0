// The Nodes page's reachability matrix (TCP connect to sshd; the link matrix on the collective path
// is linksview.h): rows are where a connect starts (this machine, then each node),
// columns where it goes; a cell is the median TCP connect time to the node's sshd in ms with one
// decimal, or the error in red with the full reason as its tooltip. "Measure latency" asks the
// page to measure (the view itself does no I/O).
//
// Decision: the view shows exactly the stored links among the nodes it is given, so a matrix
// measured at a run's start and one measured here look the same; a pair never measured is "–".
#pragma once

#include <QWidget>
#include <cstdint>
#include <vector>

#include "db/nodes.h"

class QLabel;
class QPushButton;
class QTableWidget;

namespace flotilla::ui {

class LatencyView : public QWidget {
  Q_OBJECT

 public:
  explicit LatencyView(QWidget* parent = nullptr);

  // `localId`: the store's local node (this machine's row; 0 when it has none).
  void setMatrix(const std::vector<db::SshNode>& nodes, int64_t localId,
                 const std::vector<db::NodeLatency>& rows);
  void setBusy(bool busy);
  void setMessage(const QString& text);
  void setMeasureEnabled(bool enabled, const QString& whyNot = {});

  QTableWidget* table() const { return m_table; }
  QPushButton* measureButton() const { return m_measure; }
  QString measuredText() const;
  QString messageText() const;

 signals:
  void measureRequested();

 private:
  QTableWidget* m_table;
  QLabel* m_when;
  QLabel* m_message;
  QPushButton* m_measure;
  QString m_measureTip;
  bool m_busy = false;
};

}  // namespace flotilla::ui
