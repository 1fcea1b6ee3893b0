// Screenshots of every view at 1280×800 over a realistic workspace (tests/ui/store_workspace.h:
// four runs with metrics and costs, one still running), saved as PNGs into FLOTILLA_SCREENSHOT_DIR
// for docs/screenshots/ (scripts/refresh-screenshots). Asserts that each image is real (big, many
// colours) and that the Compare and Costs plots hold data when grabbed.
#include <QApplication>
#include <QDir>
#include <QImage>
#include <QSet>
#include <QSettings>
#include <QSignalSpy>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QtTest>

#include "db/database.h"
#include "db/sql.h"
#include "store_workspace.h"
#include "ui/compare/comparepage.h"
#include "ui/compare/runpickermodel.h"
#include "ui/costs/costspage.h"
#include "ui/main/mainwindow.h"
#include "ui/plot/compareplot.h"
#include "ui/plot/costplot.h"
#include "ui/wizard/runwizard.h"

using namespace flotilla;
using namespace flotilla::ui;

namespace {

int colourCount(const QImage& image) {
  QSet<QRgb> colours;
  for (int y = 0; y < image.height(); y += 3)
    for (int x = 0; x < image.width(); x += 3) colours.insert(image.pixel(x, y));
  return static_cast<int>(colours.size());
}

void save(QWidget* w, const QString& name) {
  const QImage image = w->grab().toImage();
  const QString path = QStringLiteral(FLOTILLA_SCREENSHOT_DIR "/") + name + QStringLiteral(".png");
  QVERIFY2(image.save(path), qPrintable(path));
  QVERIFY2(colourCount(image) > 40, qPrintable(name));
  qInfo("screenshot: %s", qPrintable(path));
}

}  // namespace

class TestScreenshots : public QObject {
  Q_OBJECT

 private slots:
  void everyView();
};

void TestScreenshots::everyView() {
  QTemporaryDir tmp;
  QStandardPaths::setTestModeEnabled(true);
  QSettings::setPath(QSettings::NativeFormat, QSettings::UserScope, tmp.filePath(QStringLiteral("config")));
  QSettings(QStringLiteral("Flotilla"), QStringLiteral("Flotilla")).clear();
  WorkspaceInfo ws;
  ws.directory = tmp.path();
  ws.databasePath = tmp.filePath(QStringLiteral("flotilla.db"));
  const auto ids = store_workspace::build(ws.databasePath.toStdString(), db::now_seconds());
  ws.schemaVersion = db::Database(ws.databasePath.toStdString()).schema_version();

  MainWindow w(ws);
  w.resize(1280, 800);
  w.show();
  QVERIFY(QTest::qWaitForWindowExposed(&w));
  // MainWindow builds these pages without the database path (see the Compare/Costs constructors).
  auto* compare = qobject_cast<ComparePage*>(w.page(MainWindow::Compare));
  auto* costs = qobject_cast<CostsPage*>(w.page(MainWindow::Costs));
  QVERIFY(compare && costs);
  if (compare->databasePath().isEmpty()) compare->setDatabasePath(ws.databasePath);
  if (costs->databasePath().isEmpty()) costs->setDatabasePath(ws.databasePath);

  const char* names[] = {"runs", "live", "compare", "nodes", "costs", "settings"};
  for (int i = 0; i < MainWindow::PageCount; ++i) {
    w.showPage(i);
    if (i == MainWindow::Compare) {
      QTRY_VERIFY_WITH_TIMEOUT(compare->runModel()->rowCount() == 4 && !compare->busy(), 10000);
      compare->runModel()->setChecked(ids[0], true);
      compare->runModel()->setChecked(ids[1], true);
      QTRY_VERIFY_WITH_TIMEOUT(!compare->busy() && compare->plot()->curveCount() == 2, 10000);
      QVERIFY(compare->plot()->pointCount(0) > 100);
    }
    if (i == MainWindow::Costs) {
      QTRY_VERIFY_WITH_TIMEOUT(!costs->busy() && costs->dayChart()->barCount() >= 3, 10000);
    }
    QTest::qWait(50);
    save(&w, QStringLiteral("view-%1").arg(QLatin1String(names[i])));
  }

  RunWizard wizard(w.machineProbe());
  wizard.resize(900, 700);
  wizard.show();
  QVERIFY(QTest::qWaitForWindowExposed(&wizard));
  for (int page = 0; page < RunWizard::PageCount; ++page) {
    QTest::qWait(50);
    save(&wizard, QStringLiteral("wizard-%1").arg(page + 1));
    if (page + 1 < RunWizard::PageCount) wizard.next();
  }
  wizard.reject();
}

QTEST_MAIN(TestScreenshots)
#include "test_screenshots.moc"
