// The common frame of every dashboard plot: a QCustomPlot with palette-following colours, a
// centred message for the empty state, linear/log y, an x axis by step, tokens or wall time, a
// context menu exporting the picture (PNG, SVG, PDF) and the data (CSV), and a replot counter.
//
// Decision: export goes through the subclass only for the data. The picture is whatever
// QCustomPlot draws (savePng/savePdf, SVG by rendering the plot into a QSvgGenerator), so an
// exported plot always matches the screen; the CSV is the subclass's raw (not decimated)
// numbers for the current x axis, via writeCsv(). Subclasses draw in refresh() and call
// replotNow(), which counts, so tests and the dashboard can check the ≤ 25 replots/s promise.
// Callers see QWidget API only: qcustomplot.h stays inside ui/plot/*.cpp.
#pragma once

#include <QRectF>
#include <QString>
#include <QVector>
#include <QWidget>

class QCPAxisTicker;
class QCustomPlot;
class QCPItemStraightLine;
class QCPItemText;
class QMenu;
class QTextStream;

namespace flotilla::ui {

enum class XAxisKind { Step, Tokens, WallTime };

class PlotPanel : public QWidget {
  Q_OBJECT

 public:
  PlotPanel(const QString& objectName, const QString& title, QWidget* parent = nullptr);
  ~PlotPanel() override;

  QString title() const { return m_title; }
  QWidget* plotWidget() const;

  // The centred message shown while there is nothing to draw ("No run selected"). It is wrapped
  // at word boundaries to the width of the plot area when drawn (never cut at the edges).
  void setMessage(const QString& message);
  QString message() const { return m_messageText; }
  bool messageVisible() const;
  // As drawn at the last replot (tests): the message's text with its wrapping, its box and the
  // plot area's, in plot-widget pixels; the x axis' tick labels' boxes, left to right.
  QString drawnMessage() const;
  QRect messageRect() const;
  QRect plotAreaRect() const;
  QVector<QRectF> xTickLabelRects() const;

  virtual void setXAxisKind(XAxisKind kind);
  XAxisKind xAxisKind() const { return m_xKind; }
  void setLogY(bool log);
  bool logY() const { return m_logY; }

  // Exploring (issue 18): the mouse wheel zooms and a drag pans the x axis; a double-click goes
  // back to the automatic range. While zoomed, new data does not move the view.
  bool zoomed() const { return m_zoomed; }
  void resetZoom();
  // The x axis follows the data (true, the default) or spans the run's planned end as well.
  void setFollowData(bool follow);
  bool followData() const { return m_followData; }
  // The hover readout at x (axis units): "step 120 · train loss 3.412 · smoothed 3.520", each
  // series' drawn point nearest to x (a real data point: decimation keeps original points);
  // "" when nothing is drawn. Hovering the plot shows it with a line at the cursor, inside the
  // plot area (one series a line when one line would not fit). A graph with the property
  // kReadoutNameOnly shows its name alone (it says its value: "budget $0.15"); one with
  // kReadoutSparse (validation every N steps) shows its value only within kSparseNearPixels of
  // a point of its own, else its last value before x with that point's x ("(last, at step 25)").
  static constexpr const char* kReadoutNameOnly = "readoutNameOnly";
  static constexpr const char* kReadoutSparse = "readoutSparse";
  static constexpr int kSparseNearPixels = 6;
  QString readoutAt(double x) const;
  QString readoutText() const;  // what the hover shows now ("" when hidden)

  // Redraws when data or a setting changed since the last replot; returns whether it did.
  virtual bool refresh() = 0;
  int replotCount() const { return m_replots; }
  // Forces the next refresh() to redraw.
  void markDirty() { m_dirty = true; }

  // The picture, format from the suffix (.png, .svg, .pdf), at the widget's size (at least
  // 640x400). The data as CSV (a header row, then one row per point). False with errorText().
  bool exportImage(const QString& path);
  bool exportCsv(const QString& path);
  QString errorText() const { return m_error; }
  // The context menu's actions (also offered by the dashboard's Export button).
  void addExportActions(QMenu* menu);

 protected:
  QCustomPlot* customPlot() const { return m_plot; }
  QCPItemText* messageItem() const { return m_message; }
  void setMessageVisible(bool visible);
  // The x axis label and ticker for `kind` (tokens use engineering notation, time h:mm:ss).
  static QString xLabel(XAxisKind kind);
  // Writes the header row and the data rows. Returns false when there is nothing to write.
  virtual bool writeCsv(QTextStream& out) const = 0;
  // Colours of the series, called after the frame's own palette is applied.
  virtual void applySeriesPalette(const QPalette&) {}
  // Sets the x range the data asks for, unless the user zoomed or panned (then the view stays).
  void setXRange(double lo, double hi);
  // Sets the y range from the data extent, honouring log scale (only positive values count).
  void setYRange(double lo, double hi, double minPositive);
  void replotNow();
  bool takeDirty() {
    const bool was = m_dirty;
    m_dirty = false;
    return was;
  }

  void changeEvent(QEvent* event) override;
  void resizeEvent(QResizeEvent* event) override;

 private:
  void applyPalette();
  // The x ticker for m_xKind, asking for `ticks` labels.
  void installXTicker();
  // After a replot: wraps the message to the plot area, and asks for fewer x tick labels while
  // neighbours overlap. True when something changed (the caller replots again).
  bool fitToWidth();
  void showMenu(const QPoint& pos);
  void showReadout(const QPoint& pos);
  void hideReadout();
  bool eventFilter(QObject* watched, QEvent* event) override;
  void chooseAndExport(const QString& suffix);

  QString m_title;
  QCustomPlot* m_plot = nullptr;
  QCPItemText* m_message = nullptr;
  QCPItemText* m_readout = nullptr;
  QCPItemStraightLine* m_cursorLine = nullptr;
  bool m_zoomed = false;
  bool m_followData = true;
  bool m_settingRange = false;         // setXRange is moving the axis (not the user)
  QString m_messageText;               // as set; m_message holds it wrapped
  QCPAxisTicker* m_xTicker = nullptr;  // the x ticker installed here (a subclass may replace it)
  int m_xTicks = 5;                    // labels asked of it now
  int m_xTicksWanted = 5;              // for this kind of axis, when there is room
  XAxisKind m_xKind = XAxisKind::Step;
  bool m_logY = false;
  bool m_dirty = true;
  int m_replots = 0;
  QString m_error;
};

}  // namespace flotilla::ui
