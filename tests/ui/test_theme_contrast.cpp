// Issue 18 item 5: every page's text is readable in both themes (WCAG AA: 4.5:1), measured on
// what is drawn, not on what the palette says. The main window is built in the light theme and
// switched to dark (and back), as a user does on the Settings page; each page is grabbed and
// every visible label, check box, button and sidebar row is measured on the image: its
// background is the most common colour of its rectangle, its text the drawn pixel that differs
// most from it (text stems reach the full text colour), and their contrast is the WCAG ratio of
// relative luminances. A colour fixed in a style sheet, or resolved from the palette once and
// not again, shows up here as the dark theme's "near-black on dark grey".
#include <QAbstractButton>
#include <QCheckBox>
#include <QHash>
#include <QLabel>
#include <QListWidget>
#include <QSettings>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QtTest>

#include <cmath>

#include "db/database.h"
#include "db/workspace.h"
#include "ui/main/mainwindow.h"
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

}  // namespace

class TestThemeContrast : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase();
  void everyPageIsReadableInBothThemes();

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

QTEST_MAIN(TestThemeContrast)
#include "test_theme_contrast.moc"
