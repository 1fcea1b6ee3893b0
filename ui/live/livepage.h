// The Live page: loss, throughput, GPU use, communication time and spend of a running run,
// replotted as records arrive. Until the live dashboard lands it shows the labelled, empty loss
// plot (which also proves the plotting stack is linked and themed).
#pragma once

#include <QWidget>

namespace flotilla::ui {

class LivePage : public QWidget {
  Q_OBJECT

 public:
  explicit LivePage(QWidget* parent = nullptr);

  QWidget* lossPlot() const { return m_lossPlot; }

 private:
  QWidget* m_lossPlot;
};

}  // namespace flotilla::ui
