// Placeholder plot and version (see plotsupport.h). Colours come from the palette at creation
// and are re-applied when it changes.
#include "ui/plot/plotsupport.h"

#include <qcustomplot.h>

#include <QEvent>
#include "ui/plot/plotstyle.h"

namespace flotilla::ui {
namespace {

class PlaceholderPlot : public QCustomPlot {
 public:
  PlaceholderPlot(const QString& xLabel, const QString& yLabel, const QString& message, QWidget* parent)
      : QCustomPlot(parent) {
    setObjectName(QStringLiteral("placeholderPlot"));
    xAxis->setLabel(xLabel);
    yAxis->setLabel(yLabel);
    xAxis->setRange(0, 1000);
    yAxis->setRange(0, 10);
    m_message = new QCPItemText(this);
    m_message->position->setType(QCPItemPosition::ptAxisRectRatio);
    m_message->position->setCoords(0.5, 0.5);
    m_message->setPositionAlignment(Qt::AlignCenter);
    m_message->setText(message);
    QFont font = this->font();
    font.setPointSizeF(font.pointSizeF() * 1.2);
    m_message->setFont(font);
    applyPalette();
  }

 protected:
  void changeEvent(QEvent* event) override {
    if (event->type() == QEvent::PaletteChange) {
      applyPalette();
      replot();
    }
    QCustomPlot::changeEvent(event);
  }

 private:
  void applyPalette() {
    const QPalette pal = palette();
    const QColor faint = pal.color(QPalette::PlaceholderText);
    plotstyle::styleAxes(this, pal, {xAxis, yAxis});
    m_message->setColor(faint);
  }

  QCPItemText* m_message = nullptr;
};

}  // namespace

QString qcustomplotVersion() { return QStringLiteral(QCUSTOMPLOT_VERSION_STR); }

QWidget* createPlaceholderPlot(const QString& xLabel, const QString& yLabel, const QString& message,
                               QWidget* parent) {
  return new PlaceholderPlot(xLabel, yLabel, message, parent);
}

}  // namespace flotilla::ui
