// SSH key passphrase prompt (see passphraseprompt.h).
#include "ui/runs/passphraseprompt.h"

#include <QApplication>
#include <QDialogButtonBox>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QVBoxLayout>

#include <algorithm>

namespace flotilla::ui {

void wipeSecret(std::string& secret) {
  volatile char* p = secret.data();
  for (size_t i = 0; i < secret.size(); ++i) p[i] = '\0';
  secret.clear();
}

void wipeSecret(QString& secret) {
  if (!secret.isDetached()) {  // shared: wiping would only wipe a fresh copy
    secret.clear();
    return;
  }
  std::fill(secret.begin(), secret.end(), QChar(0));
  secret.clear();
}

void wipeSecret(QByteArray& secret) {
  if (secret.isDetached()) std::fill(secret.begin(), secret.end(), '\0');
  secret.clear();
}

PassphraseDialog::PassphraseDialog(const QString& node, const QString& keyPath, QWidget* parent)
    : QDialog(parent), m_prompt(new QLabel(this)), m_edit(new QLineEdit(this)) {
  setObjectName(QStringLiteral("passphraseDialog"));
  setWindowTitle(tr("Key passphrase for %1").arg(node));
  m_prompt->setObjectName(QStringLiteral("passphrasePrompt"));
  m_prompt->setWordWrap(true);
  m_prompt->setTextFormat(Qt::PlainText);
  m_prompt->setText(
      tr("Node %1: the key file %2 is protected by a passphrase. Type it to connect.").arg(node, keyPath));
  m_edit->setObjectName(QStringLiteral("passphraseEdit"));
  m_edit->setEchoMode(QLineEdit::Password);
  m_edit->setMinimumWidth(320);
  auto* note =
      new QLabel(tr("Used for this connection only and never stored. ssh-agent avoids the question."), this);
  note->setWordWrap(true);
  note->setForegroundRole(QPalette::PlaceholderText);
  auto* buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, this);
  buttons->button(QDialogButtonBox::Ok)->setText(tr("Connect"));
  connect(buttons, &QDialogButtonBox::accepted, this, &QDialog::accept);
  connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
  auto* layout = new QVBoxLayout(this);
  layout->addWidget(m_prompt);
  layout->addWidget(m_edit);
  layout->addWidget(note);
  layout->addWidget(buttons);
}

PassphraseDialog::~PassphraseDialog() {
  std::string left;
  takePassphrase(left);
  wipeSecret(left);
}

QString PassphraseDialog::promptText() const { return m_prompt->text(); }

void PassphraseDialog::takePassphrase(std::string& into) {
  // text() shares the edit's buffer; setText() makes the edit let go of it (and drops its undo
  // history) without copying it, so `text` then holds the only reference and wiping it wipes the
  // buffer the edit had. The undo entries' memory is freed by Qt, not overwritten.
  QString text = m_edit->text();
  m_edit->setText(QString());
  QByteArray utf8 = text.toUtf8();
  wipeSecret(text);
  wipeSecret(into);
  into.assign(utf8.constData(), static_cast<size_t>(utf8.size()));
  wipeSecret(utf8);
}

std::optional<std::string> askPassphraseDialog(const QString& node, const QString& keyPath) {
  PassphraseDialog dialog(node, keyPath, QApplication::activeWindow());
  if (dialog.exec() != QDialog::Accepted) return std::nullopt;
  std::optional<std::string> out(std::in_place);  // filled in place: no temporary copy to wipe
  dialog.takePassphrase(*out);
  return out;
}

}  // namespace flotilla::ui
