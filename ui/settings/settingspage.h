// The Settings page: the workspace (where it is now, and which folder to open at the next start),
// how this machine's runs are priced, display units and the theme.
//
// Decision: preferences that concern only this user's view (next workspace, units, theme) go to
// QSettings (preferences.h); the local machine's price is a fact about the workspace's costs, so
// it is written to the database (the "local" node's pricing), off the UI thread.
#pragma once

#include <QWidget>

#include "ui/main/workspaceinfo.h"
#include "ui/settings/localpricing.h"
#include "ui/settings/preferences.h"

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QFormLayout;
class QLabel;
class QLineEdit;

namespace flotilla::ui {

class SettingsPage : public QWidget {
  Q_OBJECT

 public:
  // Applies the saved theme at once (the page is built when the window starts).
  SettingsPage(const WorkspaceInfo& workspace, const QString& settingsFile, QWidget* parent = nullptr);

  // The value shown for a row label of the workspace box, e.g. "Database file" (tests read it).
  QString value(const QString& label) const;
  Preferences preferences() const { return m_prefs; }

  // Controls, for tests.
  QComboBox* themeBox() const { return m_theme; }
  QComboBox* tokenUnitBox() const { return m_tokens; }
  QComboBox* timeUnitBox() const { return m_time; }
  QLineEdit* nextWorkspaceEdit() const { return m_nextWorkspace; }
  QComboBox* pricingKindBox() const { return m_pricingKind; }
  QDoubleSpinBox* flatRateBox() const { return m_flat; }
  QDoubleSpinBox* powerBox() const { return m_power; }
  QDoubleSpinBox* tariffBox() const { return m_tariff; }
  QString pricingStatus() const;
  // The message of the last failed preferences save ("" when the last save worked).
  QString preferencesError() const;

 public slots:
  // Writes the pricing controls to the store (asynchronously; pricingSaved() follows).
  void applyPricing();

 signals:
  void preferencesChanged(const flotilla::ui::Preferences& prefs);
  void pricingLoaded();
  void pricingSaved(bool ok);

 private:
  QWidget* buildWorkspaceBox(const WorkspaceInfo& workspace, const QString& settingsFile);
  QWidget* buildPricingBox();
  QWidget* buildDisplayBox();
  void loadPricing();
  void showPricing(const LocalPricing& p);
  void updatePricingControls();
  void storePreferences();

  QString m_databasePath;
  Preferences m_prefs;
  QFormLayout* m_form = nullptr;
  QLineEdit* m_nextWorkspace = nullptr;
  QComboBox* m_pricingKind = nullptr;
  QDoubleSpinBox* m_flat = nullptr;
  QDoubleSpinBox* m_power = nullptr;
  QDoubleSpinBox* m_tariff = nullptr;
  QLabel* m_pricingStatus = nullptr;
  QLabel* m_prefsError = nullptr;  // hidden unless the last save of the preferences failed
  QComboBox* m_tokens = nullptr;
  QComboBox* m_time = nullptr;
  QComboBox* m_theme = nullptr;
  QCheckBox* m_notify = nullptr;
};

}  // namespace flotilla::ui
