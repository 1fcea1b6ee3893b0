// The Nodes page's heat map of a link matrix (issue 36): one cell per ordered pair of nodes (rows:
// from, columns: to, the diagonal the node's intra-node figure), coloured by the measured bandwidth
// on a logarithmic scale, the axes labelled with the node names.
//
// Decision: a logarithmic colour scale, because an intra-node figure (GB/s) and a slow inter-node
// link (MB/s) differ by orders of magnitude and on a linear scale every inter-node cell would be
// the same dark colour. A pair never measured or measured with an error is left blank (the
// gradient's NaN is transparent): a colour always means a figure. Lives in plot/, the only place
// that includes qcustomplot.h.
#pragma once

#include <QStringList>
#include <QVector>
#include <QWidget>

class QCustomPlot;
class QCPColorMap;
class QCPColorScale;

namespace flotilla::ui {

class LinkHeatMap : public QWidget {
  Q_OBJECT

 public:
  explicit LinkHeatMap(QWidget* parent = nullptr);

  // `bytesPerS` holds nodes.size()^2 values, row-major (from * n + to); NaN: no figure.
  void setLinks(const QStringList& nodes, const QVector<double>& bytesPerS);

  QCustomPlot* customPlot() const { return m_plot; }
  // For tests: the value drawn in cell (from, to) (NaN: blank), and the colour scale's range.
  double cellValue(int from, int to) const;
  bool logScale() const;
  double scaleLow() const;
  double scaleHigh() const;
  QStringList xLabels() const;

 private:
  QCustomPlot* m_plot;
  QCPColorMap* m_map;
  QCPColorScale* m_scale;
  QStringList m_nodes;
};

}  // namespace flotilla::ui
