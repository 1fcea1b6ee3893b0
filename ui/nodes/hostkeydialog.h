// Asks the user to confirm an unknown node's host key by its SHA256 fingerprint (docs/reliability.md S3).
//
// Decision: the dialog only shows and confirms; trusting is the monitor's Session::trust on a
// pool thread, which accepts the key only if the node still presents this exact fingerprint.
#pragma once

#include <QDialog>

class QLabel;
class QPushButton;

namespace flotilla::ui {

class HostKeyDialog : public QDialog {
  Q_OBJECT

 public:
  HostKeyDialog(const QString& node, const QString& address, const QString& fingerprint,
                QWidget* parent = nullptr);

  QString node() const { return m_node; }
  QString fingerprint() const { return m_fingerprint; }
  QPushButton* trustButton() const { return m_trust; }

 private:
  QString m_node, m_fingerprint;
  QPushButton* m_trust;
};

}  // namespace flotilla::ui
