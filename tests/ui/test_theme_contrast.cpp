// Issue 18 item 5: every page's text is readable in both themes (WCAG AA: 4.5:1), measured on
// what is drawn, not on what the palette says. The main window is built in the light theme and
// switched to dark (and back), as a user does on the Settings page; each page is grabbed and
// every visible label, check box, button and sidebar row is measured on the image: its
// background is the most common colour of its rectangle, its text the drawn pixel that differs
// most from it (text stems reach the full text colour), and their contrast is the WCAG ratio of
// relative luminances. A colour fixed in a style sheet, or resolved from the palette once and
// not again, shows up here as the dark theme's "near-black on dark grey". Non-text shapes (check
// box indicators, plot legend swatches, focus rings) are held to WCAG's 3:1 the same way.
#include <QAbstractButton>
#include <QAbstractSpinBox>
#include <QCheckBox>
#include <QComboBox>
#include <QHash>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QPushButton>
#include <QSet>
#include <QSettings>
#include <QStandardPaths>
#include <QStyle>
#include <QStyleOptionButton>
#include <QTemporaryDir>
#include <QtTest>

#include <cmath>

#include <qcustomplot.h>

#include "db/database.h"
#include "db/workspace.h"
#include "fake_worker.h"
#include "ui/live/livedashboard.h"
#include "ui/live/livepage.h"
#include "ui/main/mainwindow.h"
#include "ui/plot/plotpanel.h"
#include "ui/settings/preferences.h"

using flotilla::ui::MainWindow;
using flotilla::ui::Preferences;

namespace {

double channel(int c) {
  const double s = c / 255.0;
  return s <= 0.04045 ? s / 12.92 : std::pow((s + 0.055) / 1.055, 2.4);
}
double luminance(QRgb p) {
  return 0.2126 * channel(qRed(p)) + 0.7152 * channel(qGreen(p)) + 0.0722 * channel(qBlue(p));
}
double contrast(QRgb a, QRgb b) {
  const double la = luminance(a), lb = luminance(b);
  return (std::max(la, lb) + 0.05) / (std::min(la, lb) + 0.05);
}

// The contrast of the text drawn in `rect` of `image`: most common colour vs the farthest drawn one.
double drawnContrast(const QImage& image, const QRect& rect, QRgb* bgOut = nullptr, QRgb* fgOut = nullptr) {
  QHash<QRgb, int> counts;
  const QRect r = rect.intersected(image.rect());
  for (int y = r.top(); y <= r.bottom(); ++y)
    for (int x = r.left(); x <= r.right(); ++x) ++counts[image.pixel(x, y) | 0xff000000u];
  QRgb bg = 0;
  int most = -1;
  for (auto it = counts.cbegin(); it != counts.cend(); ++it)
    if (it.value() > most) {
      most = it.value();
      bg = it.key();
    }
  double best = 1.0;
  QRgb fg = bg;
  for (auto it = counts.cbegin(); it != counts.cend(); ++it)
    if (it.value() >= 2 && contrast(it.key(), bg) > best) {  // a lone pixel is noise, not text
      best = contrast(it.key(), bg);
      fg = it.key();
    }
  if (bgOut) *bgOut = bg;
  if (fgOut) *fgOut = fg;
  return best;
}

QString hex(QRgb c) { return QColor(c).name(); }

// The contrast of a drawn shape (a check box's indicator, a legend swatch) against what is around
// it (WCAG 1.4.11, 3:1): the most common colour of a `ring`-pixel band just outside `rect`, against
// the pixel inside that differs most from it.
double shapeContrast(const QImage& image, const QRect& rect, int ring, QRgb* bgOut, QRgb* fgOut) {
  QHash<QRgb, int> around;
  const QRect outer = rect.adjusted(-ring, -ring, ring, ring).intersected(image.rect());
  for (int y = outer.top(); y <= outer.bottom(); ++y)
    for (int x = outer.left(); x <= outer.right(); ++x)
      if (!rect.contains(x, y)) ++around[image.pixel(x, y) | 0xff000000u];
  QRgb bg = 0;
  int most = -1;
  for (auto it = around.cbegin(); it != around.cend(); ++it)
    if (it.value() > most) {
      most = it.value();
      bg = it.key();
    }
  QHash<QRgb, int> inside;
  const QRect r = rect.intersected(image.rect());
  for (int y = r.top(); y <= r.bottom(); ++y)
    for (int x = r.left(); x <= r.right(); ++x) ++inside[image.pixel(x, y) | 0xff000000u];
  double best = 1.0;
  QRgb fg = bg;
  for (auto it = inside.cbegin(); it != inside.cend(); ++it)
    if (it.value() >= 3 && contrast(it.key(), bg) > best) {
      best = contrast(it.key(), bg);
      fg = it.key();
    }
  *bgOut = bg;
  *fgOut = fg;
  return best;
}

// How many pixels of `widget` change by at least 3:1 between its unfocused and focused drawing
// (WCAG 2.4.13's focus indicator: a 3:1 change of colour over an area like a 1 px outline).
int focusChangePixels(QWidget* widget) {
  widget->clearFocus();
  widget->window()->setAttribute(Qt::WA_KeyboardFocusChange);  // as after a Tab press
  QCoreApplication::processEvents();
  const QImage before = widget->grab().toImage().convertToFormat(QImage::Format_RGB32);
  widget->setFocus(Qt::TabFocusReason);
  QCoreApplication::processEvents();
  const QImage after = widget->grab().toImage().convertToFormat(QImage::Format_RGB32);
  widget->clearFocus();
  if (before.size() != after.size()) return 0;
  int changed = 0;
  for (int y = 0; y < before.height(); ++y)
    for (int x = 0; x < before.width(); ++x)
      if (contrast(before.pixel(x, y), after.pixel(x, y)) >= 3.0) ++changed;
  return changed;
}

}  // namespace

class TestThemeContrast : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase();
  void everyPageIsReadableInBothThemes();
  void controlsAndSwatchesStandOutInBothThemes();

 private:
  QTemporaryDir m_tmp{QStringLiteral(FLOTILLA_TEST_TMP "/theme-XXXXXX")};
  flotilla::ui::WorkspaceInfo m_workspace;
};

void TestThemeContrast::initTestCase() {
  QVERIFY(m_tmp.isValid());
  QStandardPaths::setTestModeEnabled(true);
  QSettings::setPath(QSettings::NativeFormat, QSettings::UserScope, m_tmp.filePath(QStringLiteral("config")));
  const std::string dir = m_tmp.filePath(QStringLiteral("workspace")).toStdString();
  flotilla::db::ensure_workspace_dir(dir);
  const flotilla::db::Database d(flotilla::db::workspace_database_path(dir));
  m_workspace.directory = QString::fromStdString(dir);
  m_workspace.databasePath = QString::fromStdString(d.path());
}

void TestThemeContrast::everyPageIsReadableInBothThemes() {
  QStringList failures;
  int measured = 0;
  // A window made in one theme and switched (Settings), and one made in the dark theme (a start).
  for (const Preferences::Theme startTheme : {Preferences::Theme::Light, Preferences::Theme::Dark}) {
    flotilla::ui::applyTheme(startTheme);
    MainWindow w(m_workspace);
    w.resize(1280, 800);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    const auto themes = startTheme == Preferences::Theme::Light
                            ? QList<Preferences::Theme>{Preferences::Theme::Dark, Preferences::Theme::Light}
                            : QList<Preferences::Theme>{Preferences::Theme::Dark};
    for (const Preferences::Theme theme : themes) {
      flotilla::ui::applyTheme(theme);
      const QString themeText = flotilla::ui::themeName(theme);
      for (int page = 0; page < MainWindow::PageCount; ++page) {
        w.showPage(page);
        QCoreApplication::processEvents();
        const QImage image = w.grab().toImage().convertToFormat(QImage::Format_RGB32);
        if (theme == Preferences::Theme::Dark && startTheme == Preferences::Theme::Light &&
            (page == 0 || page == 1 || page == MainWindow::Settings))
          image.save(QStringLiteral(FLOTILLA_SCREENSHOT_DIR "/view-dark-%1.png")
                         .arg(QLatin1String(page == 0   ? "runs"
                                            : page == 1 ? "live"
                                                        : "settings")));
        const auto check = [&](QWidget* widget, const QRect& local, const QString& what) {
          if (!widget->isVisible() || local.width() < 4 || local.height() < 6) return;
          const QRect rect(widget->mapTo(&w, local.topLeft()), local.size());
          QRgb bg = 0, fg = 0;
          const double ratio = drawnContrast(image, rect, &bg, &fg);
          ++measured;
          if (ratio < 4.5)
            failures << QStringLiteral("%1, page %2: %3: %4 on %5 = %6:1")
                            .arg(themeText)
                            .arg(page)
                            .arg(what, hex(fg), hex(bg))
                            .arg(ratio, 0, 'f', 2);
        };
        for (QLabel* label : w.findChildren<QLabel*>()) {
          if (label->text().trimmed().isEmpty() || !label->pixmap().isNull() || !label->isVisible()) continue;
          if (label->text().startsWith(QLatin1Char('<'))) continue;  // rich text: links and images
          check(label, label->contentsRect(),
                QStringLiteral("label %1 \"%2\"").arg(label->objectName(), label->text().left(30)));
        }
        for (QCheckBox* box : w.findChildren<QCheckBox*>())
          check(box, box->rect(), QStringLiteral("check box \"%1\"").arg(box->text().left(30)));
        for (QListWidget* list : w.findChildren<QListWidget*>()) {
          if (list->objectName() != QLatin1String("sidebarList")) continue;
          for (int i = 0; i < list->count(); ++i) {
            // Inside the row's rounded background (its style sheet's 10 px margin and padding),
            // past the icon: the text alone.
            const QRect item =
                list->visualItemRect(list->item(i)).adjusted(20 + list->iconSize().width() + 6, 8, -12, -8);
            check(list->viewport(), item, QStringLiteral("sidebar row \"%1\"").arg(list->item(i)->text()));
          }
        }
      }
    }
  }
  qInfo("%d text areas measured", measured);
  QVERIFY(measured > 40);
  QVERIFY2(failures.isEmpty(), qPrintable(failures.join(QLatin1Char('\n'))));
}

// Issue 18 item 5, non-text (WCAG 1.4.11 and 2.4.13: 3:1): a check box's indicator against the
// window, every plot legend's swatch against the plot, and the focus ring of buttons, fields,
// spin boxes, combo boxes and check boxes (the change between focused and not) in both themes.
void TestThemeContrast::controlsAndSwatchesStandOutInBothThemes() {
  QStringList failures;
  int indicators = 0, swatches = 0, rings = 0;
  double minIndicator = 99, minSwatch = 99;
  for (const Preferences::Theme theme : {Preferences::Theme::Light, Preferences::Theme::Dark}) {
    flotilla::ui::applyTheme(theme);
    const QString themeText = flotilla::ui::themeName(theme);
    MainWindow w(m_workspace);
    w.resize(1280, 800);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    w.activateWindow();
    QVERIFY(QTest::qWaitForWindowActive(&w));
    for (int page = 0; page < MainWindow::PageCount; ++page) {
      w.showPage(page);
      QCoreApplication::processEvents();
      QWidget* current = w.page(static_cast<MainWindow::Page>(page));
      if (auto* live = qobject_cast<flotilla::ui::LivePage*>(current)) {
        // A run's plots, legends and all (a 2-rank GPU run: every series of the dashboard).
        if (live->dashboard()->data().steps().rows() == 0)
          for (const QJsonObject& r : fake_worker::syntheticRun(fake_worker::Synthetic()))
            live->dashboard()->ingest(fake_worker::record(r));
        live->dashboard()->dataChanged();
        live->dashboard()->refreshAll();
      }
      const QImage image = w.grab().toImage().convertToFormat(QImage::Format_RGB32);
      for (QCheckBox* box : current->findChildren<QCheckBox*>()) {
        if (!box->isVisible()) continue;
        QStyleOptionButton option;
        option.initFrom(box);
        const QRect local = box->style()->subElementRect(QStyle::SE_CheckBoxIndicator, &option, box);
        QRgb bg = 0, fg = 0;
        const double ratio =
            shapeContrast(image, QRect(box->mapTo(&w, local.topLeft()), local.size()), 2, &bg, &fg);
        ++indicators;
        minIndicator = std::min(minIndicator, ratio);
        if (ratio < 3.0)
          failures << QStringLiteral("%1, page %2: check box \"%3\" indicator %4 on %5 = %6:1")
                          .arg(themeText)
                          .arg(page)
                          .arg(box->text(), hex(fg), hex(bg))
                          .arg(ratio, 0, 'f', 2);
      }
      for (QCustomPlot* plot : current->findChildren<QCustomPlot*>()) {
        if (!plot->isVisible() || !plot->legend->visible()) continue;
        for (int i = 0; i < plot->legend->itemCount(); ++i) {
          auto* item = qobject_cast<QCPPlottableLegendItem*>(plot->legend->item(i));
          if (!item || !item->visible() || item->rect().isEmpty()) continue;
          const QMargins m = item->margins();
          const QRect icon(item->rect().topLeft() + QPoint(m.left(), m.top()), plot->legend->iconSize());
          QRgb bg = 0, fg = 0;
          const double ratio =
              shapeContrast(image, QRect(plot->mapTo(&w, icon.topLeft()), icon.size()), 2, &bg, &fg);
          ++swatches;
          minSwatch = std::min(minSwatch, ratio);
          if (ratio < 3.0)
            failures << QStringLiteral("%1, page %2: %3's legend swatch \"%4\" %5 on %6 = %7:1")
                            .arg(themeText)
                            .arg(page)
                            .arg(plot->objectName(), item->plottable()->name(), hex(fg), hex(bg))
                            .arg(ratio, 0, 'f', 2);
        }
      }
      // One of each kind of focusable control per page (they share the style's drawing).
      QSet<QString> kinds;
      for (QWidget* control : current->findChildren<QWidget*>()) {
        if (!control->isVisible() || !control->isEnabled() || !(control->focusPolicy() & Qt::TabFocus))
          continue;
        const char* kind = qobject_cast<QPushButton*>(control)        ? "button"
                           : qobject_cast<QCheckBox*>(control)        ? "check box"
                           : qobject_cast<QLineEdit*>(control)        ? "text field"
                           : qobject_cast<QAbstractSpinBox*>(control) ? "spin box"
                           : qobject_cast<QComboBox*>(control)        ? "combo box"
                                                                      : nullptr;
        if (!kind || kinds.contains(QLatin1String(kind))) continue;
        if (qobject_cast<QLineEdit*>(control) && qobject_cast<QAbstractSpinBox*>(control->parentWidget()))
          continue;
        kinds.insert(QLatin1String(kind));
        const int changed = focusChangePixels(control);
        const int needed = control->width() + control->height();  // about half of a 1 px outline
        ++rings;
        if (changed < needed)
          failures << QStringLiteral("%1, page %2: %3 %4's focus ring: %5 px change by 3:1 (needs %6)")
                          .arg(themeText)
                          .arg(page)
                          .arg(QLatin1String(kind), control->objectName())
                          .arg(changed)
                          .arg(needed);
      }
    }
  }
  qInfo(
      "%d check box indicators (lowest %.2f:1), %d legend swatches (lowest %.2f:1), %d focus rings measured",
      indicators, minIndicator, swatches, minSwatch, rings);
  QVERIFY(indicators >= 4);
  QVERIFY(swatches >= 10);
  QVERIFY(rings >= 10);
  for (const QString& failure : std::as_const(failures)) qInfo("%s", qPrintable(failure));
  QVERIFY2(failures.isEmpty(),
           qPrintable(QStringLiteral("%1 shapes below 3:1 (listed above)").arg(failures.size())));
}

QTEST_MAIN(TestThemeContrast)
#include "test_theme_contrast.moc"
