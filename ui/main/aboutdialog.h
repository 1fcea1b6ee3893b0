// Help > About Flotilla: what Flotilla is and the versions of everything it runs on (Flotilla,
// Qt, QCustomPlot, SQLite, libssh, the BLAS kernel and CUDA status from the machine probe), in
// selectable text so a bug report can quote it.
#pragma once

#include <QDialog>

#include "ui/main/versions.h"

class QLabel;

namespace flotilla::ui {

class MachineProbe;

class AboutDialog : public QDialog {
  Q_OBJECT

 public:
  AboutDialog(const VersionInfo& versions, MachineProbe* probe, QWidget* parent = nullptr);

  // The version table as HTML; probe facts read "probing…" until the probe has finished.
  static QString versionsHtml(const VersionInfo& versions, const MachineProbe* probe);
  QString text() const;

 private:
  void refresh();

  VersionInfo m_versions;
  MachineProbe* m_probe;
  QLabel* m_text;
};

}  // namespace flotilla::ui
