// Host key confirmation (see hostkeydialog.h).
#include "ui/nodes/hostkeydialog.h"

#include <QDialogButtonBox>
#include <QFontDatabase>
#include <QLabel>
#include <QPushButton>
#include <QVBoxLayout>

namespace flotilla::ui {

HostKeyDialog::HostKeyDialog(const QString& node, const QString& address, const QString& fingerprint,
                             QWidget* parent)
    : QDialog(parent), m_node(node), m_fingerprint(fingerprint) {
  setObjectName(QStringLiteral("hostKeyDialog"));
  setWindowTitle(tr("Unknown host key"));
  auto* intro = new QLabel(
      tr("<b>%1</b> (%2) presented a host key this workspace has never seen. Trust it only if the "
         "fingerprint below matches the node's own, e.g. from <code>ssh-keygen -lf "
         "/etc/ssh/ssh_host_ed25519_key.pub</code> run on the node or from your provider's console.")
          .arg(node.toHtmlEscaped(), address.toHtmlEscaped()),
      this);
  intro->setWordWrap(true);
  auto* fp = new QLabel(fingerprint, this);
  fp->setObjectName(QStringLiteral("fingerprint"));
  fp->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
  fp->setTextInteractionFlags(Qt::TextSelectableByMouse);
  fp->setContentsMargins(12, 8, 12, 8);
  auto* buttons = new QDialogButtonBox(this);
  m_trust = buttons->addButton(tr("Trust this key"), QDialogButtonBox::AcceptRole);
  m_trust->setObjectName(QStringLiteral("trustButton"));
  buttons->addButton(QDialogButtonBox::Cancel);
  connect(buttons, &QDialogButtonBox::accepted, this, &QDialog::accept);
  connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
  auto* layout = new QVBoxLayout(this);
  layout->addWidget(intro);
  layout->addWidget(fp);
  layout->addWidget(buttons);
  setMinimumWidth(520);
}

}  // namespace flotilla::ui
