// The Settings page: where this workspace lives (folder, database, schema version) and where
// window layout is remembered. Preferences (defaults for new runs, pricing, SSH agent) join later.
#pragma once

#include <QWidget>

#include "ui/main/workspaceinfo.h"

class QFormLayout;

namespace flotilla::ui {

class SettingsPage : public QWidget {
  Q_OBJECT

 public:
  SettingsPage(const WorkspaceInfo& workspace, const QString& settingsFile, QWidget* parent = nullptr);

  // The value shown for a row label, e.g. "Database file" (tests read it).
  QString value(const QString& label) const;

 private:
  QFormLayout* m_form;
};

}  // namespace flotilla::ui
