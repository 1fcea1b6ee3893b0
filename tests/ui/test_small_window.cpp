// Issue 18: "no clipped text at 1280x800 or at 1024x640 (test it)". The main window at each size,
// every page shown in turn: every visible label, button and check box is at least as wide as its
// text needs (its size hint: nothing cut or squeezed) and, unless it sits in a scroll area (where
// scrolling reaches it), wholly inside the window. Labels that elide on purpose say so with the
// whole text in their tooltip; they are held to the tooltip instead.
#include <QAbstractButton>
#include <QAbstractScrollArea>
#include <QCheckBox>
#include <QLabel>
#include <QPushButton>
#include <QScrollArea>
#include <QScrollBar>
#include <QSettings>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QtTest>

#include "db/database.h"
#include "db/workspace.h"
#include "ui/main/mainwindow.h"
#include "ui/settings/preferences.h"

using flotilla::ui::MainWindow;

namespace {

bool inScrollArea(const QWidget* w) {
  for (const QWidget* p = w->parentWidget(); p; p = p->parentWidget())
    if (qobject_cast<const QAbstractScrollArea*>(p)) return true;
  return false;
}

QString describe(const QWidget* w, const QString& text) {
  return QStringLiteral("%1 %2 \"%3\"")
      .arg(QLatin1String(w->metaObject()->className()), w->objectName(), text.left(50));
}

}  // namespace

class TestSmallWindow : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase();
  void nothingIsCutAtEitherSize_data();
  void nothingIsCutAtEitherSize();

 private:
  QTemporaryDir m_tmp{QStringLiteral(FLOTILLA_TEST_TMP "/small-XXXXXX")};
  flotilla::ui::WorkspaceInfo m_workspace;
};

void TestSmallWindow::initTestCase() {
  QVERIFY(m_tmp.isValid());
  QStandardPaths::setTestModeEnabled(true);
  QSettings::setPath(QSettings::NativeFormat, QSettings::UserScope, m_tmp.filePath(QStringLiteral("config")));
  const std::string dir = m_tmp.filePath(QStringLiteral("workspace")).toStdString();
  flotilla::db::ensure_workspace_dir(dir);
  const flotilla::db::Database d(flotilla::db::workspace_database_path(dir));
  m_workspace.directory = QString::fromStdString(dir);
  m_workspace.databasePath = QString::fromStdString(d.path());
}

void TestSmallWindow::nothingIsCutAtEitherSize_data() {
  QTest::addColumn<QSize>("size");
  QTest::newRow("1280x800") << QSize(1280, 800);
  QTest::newRow("1024x640") << QSize(1024, 640);
}

void TestSmallWindow::nothingIsCutAtEitherSize() {
  QFETCH(QSize, size);
  flotilla::ui::applyTheme(flotilla::ui::Preferences::Theme::Light);
  MainWindow w(m_workspace);
  w.resize(size);
  w.show();
  QVERIFY(QTest::qWaitForWindowExposed(&w));
  QCOMPARE(w.size(), size);  // the window's minimum allows it
  QStringList failures;
  int checked = 0;
  for (int page = 0; page < MainWindow::PageCount; ++page) {
    w.showPage(page);
    QCoreApplication::processEvents();
    QWidget* current = w.page(static_cast<MainWindow::Page>(page));
    if (size == QSize(1024, 640))
      w.grab().save(QStringLiteral(FLOTILLA_SCREENSHOT_DIR "/small-%1.png").arg(current->objectName()));
    const QRect window = w.rect();
    const auto check = [&](QWidget* widget, const QString& text, int needed) {
      if (!widget->isVisible() || text.trimmed().isEmpty()) return;
      ++checked;
      if (widget->width() + 1 < needed)
        failures << QStringLiteral("page %1: %2 is %3 px wide, its text needs %4")
                        .arg(page)
                        .arg(describe(widget, text))
                        .arg(widget->width())
                        .arg(needed);
      const QRect inWindow(widget->mapTo(&w, QPoint(0, 0)), widget->size());
      // Cut by an ancestor's edge (a splitter pane, a page narrower than its content): what is
      // drawn of it is less than its rectangle. In a scroll area, scrolling reaches the rest.
      const QRect drawn = widget->visibleRegion().boundingRect();
      const bool clipped = drawn != widget->rect();
      if (!drawn.isEmpty() && drawn.width() < widget->width())  // cut sideways, even in a scroll area
        failures << QStringLiteral("page %1: %2 shows %3 of its %4 px width")
                        .arg(page)
                        .arg(describe(widget, text))
                        .arg(drawn.width())
                        .arg(widget->width());
      else if (!inScrollArea(widget) && (clipped || !window.contains(inWindow)))
        failures << QStringLiteral("page %1: %2 at (%3,%4 %5x%6) is cut by the window or its pane")
                        .arg(page)
                        .arg(describe(widget, text))
                        .arg(inWindow.x())
                        .arg(inWindow.y())
                        .arg(inWindow.width())
                        .arg(inWindow.height());
    };
    for (QLabel* label : current->findChildren<QLabel*>()) {
      if (label->wordWrap() || !label->pixmap().isNull() || label->textFormat() == Qt::RichText ||
          label->text().startsWith(QLatin1Char('<')))
        continue;
      if (!label->toolTip().isEmpty() && label->text().endsWith(QChar(0x2026)) &&
          label->toolTip().startsWith(label->text().chopped(1)))
        continue;  // elided on purpose, the whole text in its tooltip
      const QMargins m = label->contentsMargins();
      int needed = m.left() + m.right();
      for (const QString& line : label->text().split(QLatin1Char('\n')))
        needed = std::max(needed, label->fontMetrics().horizontalAdvance(line) + m.left() + m.right());
      check(label, label->text(), needed);
    }
    // A page's own scroll area may scroll down, never sideways: a page wider than the window cuts
    // its right edge (plots, table columns) until the user finds the scroll bar.
    for (QScrollArea* area : current->findChildren<QScrollArea*>()) {
      if (!area->isVisible() || !area->horizontalScrollBar()->isVisible()) continue;
      failures << QStringLiteral(
                      "page %1: scroll area %2 scrolls sideways (content %3 px wide in a %4 px view)")
                      .arg(page)
                      .arg(area->objectName())
                      .arg(area->widget() ? area->widget()->minimumSizeHint().width() : 0)
                      .arg(area->viewport()->width());
    }
    for (QAbstractButton* button : current->findChildren<QAbstractButton*>()) {
      if (!qobject_cast<QPushButton*>(button) && !qobject_cast<QCheckBox*>(button)) continue;
      check(button, button->text(), button->minimumSizeHint().width());
    }
  }
  qInfo("%d widgets checked", checked);
  QVERIFY(checked > 50);
  for (const QString& f : std::as_const(failures)) qInfo("%s", qPrintable(f));
  QVERIFY2(failures.isEmpty(), qPrintable(QStringLiteral("%1 cut (listed above)").arg(failures.size())));
}

QTEST_MAIN(TestSmallWindow)
#include "test_small_window.moc"
