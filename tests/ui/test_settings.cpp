// The Settings page: preferences round-trip through QSettings (never the database), the theme
// switches the application palette (dark, light, back to the system's), units change how numbers
// read, and the local machine's price is written to the store's "local" node off the UI thread.
#include <QApplication>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QLineEdit>
#include <QPalette>
#include <QSettings>
#include <QSignalSpy>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QtTest>

#include "db/costs.h"
#include "db/run_store.h"
#include "ui/settings/localpricing.h"
#include "ui/settings/preferences.h"
#include "ui/settings/settingspage.h"

using namespace flotilla;
using namespace flotilla::ui;

class TestSettings : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase();
  void preferencesRoundTripAndFormat();
  void themeSwitchesThePalette();
  void localPricingGoesToTheStore();

 private:
  WorkspaceInfo m_ws;
  QTemporaryDir m_tmp;
};

void TestSettings::initTestCase() {
  QStandardPaths::setTestModeEnabled(true);
  QSettings::setPath(QSettings::NativeFormat, QSettings::UserScope, m_tmp.filePath(QStringLiteral("config")));
  QSettings(QStringLiteral("Flotilla"), QStringLiteral("Flotilla")).clear();
  m_ws.directory = m_tmp.path();
  m_ws.databasePath = m_tmp.filePath(QStringLiteral("flotilla.db"));
  db::Database db(m_ws.databasePath.toStdString());
  m_ws.schemaVersion = db.schema_version();
}

void TestSettings::preferencesRoundTripAndFormat() {
  SettingsPage page(m_ws, QStringLiteral("settings.conf"));
  QCOMPARE(page.value(QStringLiteral("Database file")), m_ws.databasePath);
  page.nextWorkspaceEdit()->setText(QStringLiteral("/data/flotilla-next"));
  emit page.nextWorkspaceEdit()->editingFinished();
  page.tokenUnitBox()->setCurrentIndex(0);  // k
  page.timeUnitBox()->setCurrentIndex(0);   // s
  const Preferences p = Preferences::load();
  QCOMPARE(p.workspaceDir, QStringLiteral("/data/flotilla-next"));
  QCOMPARE(p.tokens, Preferences::TokenUnit::Thousands);
  QCOMPARE(p.time, Preferences::TimeUnit::Seconds);
  QCOMPARE(p.formatTokens(26214400), QStringLiteral("26214"));
  QCOMPARE(p.formatDuration(5400), QStringLiteral("5400 s"));
  Preferences q = p;
  q.tokens = Preferences::TokenUnit::Millions;
  q.time = Preferences::TimeUnit::Hours;
  QCOMPARE(q.formatTokens(26214400), QStringLiteral("26.2"));
  QCOMPARE(q.formatDuration(5400), QStringLiteral("1.50 h"));
  QCOMPARE(q.formatMoney(12.345), QStringLiteral("$12.35"));
  // Nothing of this went into the database.
  const db::Database db(m_ws.databasePath.toStdString());
  QVERIFY(db.meta("preferences/theme").empty());
}

void TestSettings::themeSwitchesThePalette() {
  const QColor systemWindow = QApplication::palette().color(QPalette::Window);
  SettingsPage page(m_ws, QStringLiteral("settings.conf"));
  page.themeBox()->setCurrentIndex(static_cast<int>(Preferences::Theme::Dark));
  QVERIFY(QApplication::palette().color(QPalette::Window).lightness() < 80);
  QVERIFY(QApplication::palette().color(QPalette::WindowText).lightness() > 180);
  QCOMPARE(Preferences::load().theme, Preferences::Theme::Dark);
  page.themeBox()->setCurrentIndex(static_cast<int>(Preferences::Theme::Light));
  QVERIFY(QApplication::palette().color(QPalette::Window).lightness() > 200);
  page.themeBox()->setCurrentIndex(static_cast<int>(Preferences::Theme::System));
  QCOMPARE(QApplication::palette().color(QPalette::Window), systemWindow);
  // A new page applies the saved theme at start.
  page.themeBox()->setCurrentIndex(static_cast<int>(Preferences::Theme::Dark));
  applyTheme(Preferences::Theme::System);
  SettingsPage again(m_ws, QStringLiteral("settings.conf"));
  QVERIFY(QApplication::palette().color(QPalette::Window).lightness() < 80);
  again.themeBox()->setCurrentIndex(static_cast<int>(Preferences::Theme::System));
}

void TestSettings::localPricingGoesToTheStore() {
  SettingsPage page(m_ws, QStringLiteral("settings.conf"));
  QSignalSpy loaded(&page, &SettingsPage::pricingLoaded);
  QVERIFY(loaded.wait(10000));
  QCOMPARE(page.pricingKindBox()->currentIndex(), 0);
  page.pricingKindBox()->setCurrentIndex(static_cast<int>(LocalPricing::Kind::Power));
  QVERIFY(!page.flatRateBox()->isEnabled());
  page.powerBox()->setValue(350);
  page.tariffBox()->setValue(0.3);
  QSignalSpy saved(&page, &SettingsPage::pricingSaved);
  page.applyPricing();
  QVERIFY(saved.wait(10000));
  QVERIFY(saved.first().at(0).toBool());
  QVERIFY2(page.pricingStatus().contains(QStringLiteral("350 W")), qPrintable(page.pricingStatus()));
  {
    const db::Database db(m_ws.databasePath.toStdString());
    const auto node = db::find_node(db, "local");
    QVERIFY(node);
    const db::Rate rate = db::node_rate(db, node->id, 1);
    QVERIFY(std::abs(rate.usd_per_hour - 0.105) < 1e-9);
  }
  // A new page reads it back.
  SettingsPage again(m_ws, QStringLiteral("settings.conf"));
  QSignalSpy loaded2(&again, &SettingsPage::pricingLoaded);
  QVERIFY(loaded2.wait(10000));
  QCOMPARE(again.pricingKindBox()->currentIndex(), static_cast<int>(LocalPricing::Kind::Power));
  QCOMPARE(again.powerBox()->value(), 350.0);
  // Flat rate.
  again.pricingKindBox()->setCurrentIndex(static_cast<int>(LocalPricing::Kind::Flat));
  again.flatRateBox()->setValue(1.2);
  QSignalSpy saved2(&again, &SettingsPage::pricingSaved);
  again.applyPricing();
  QVERIFY(saved2.wait(10000));
  const db::Database db(m_ws.databasePath.toStdString());
  QVERIFY(std::abs(db::node_rate(db, db::find_node(db, "local")->id, 1).usd_per_hour - 1.2) < 1e-9);
}

QTEST_MAIN(TestSettings)
#include "test_settings.moc"
