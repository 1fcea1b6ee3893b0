// Asking for an SSH key's passphrase when a run on SSH nodes connects from its worker thread:
// the prompt type a ServiceRun calls (on the UI thread) and the app's small password dialog.
//
// Decision: a passphrase lives only as long as one connection attempt needs it (docs/reliability.md
// S10): the dialog hands it out once and forgets it, each copy we make is overwritten before
// it is released, and nothing writes it anywhere (settings, store, log). A reconnection asks
// again rather than keeping it in memory for the run's lifetime. The prompt is a plain
// function so the offscreen tests can answer it, or drive the real dialog.
#pragma once

#include <QDialog>
#include <QString>

#include <functional>
#include <optional>
#include <string>

class QLabel;
class QLineEdit;

namespace flotilla::ui {

// Called on the UI thread: the passphrase of key file `keyPath`, needed to reach node `node`;
// nullopt when the user cancels (the key is then skipped and the connection fails with that).
using PassphrasePrompt =
    std::function<std::optional<std::string>(const QString& node, const QString& keyPath)>;

// Overwrites the bytes of a secret, then empties it.
void wipeSecret(std::string& secret);
void wipeSecret(QString& secret);
void wipeSecret(QByteArray& secret);

class PassphraseDialog : public QDialog {
  Q_OBJECT

 public:
  PassphraseDialog(const QString& node, const QString& keyPath, QWidget* parent = nullptr);
  ~PassphraseDialog() override;

  QLineEdit* passphraseEdit() const { return m_edit; }
  QString promptText() const;
  // Moves the typed passphrase (UTF-8) into `into` (its old content wiped); the edit is emptied
  // and the copies made on the way wiped.
  void takePassphrase(std::string& into);

 private:
  QLabel* m_prompt;
  QLineEdit* m_edit;
};

// The app's prompt: a modal PassphraseDialog over the active window.
std::optional<std::string> askPassphraseDialog(const QString& node, const QString& keyPath);

}  // namespace flotilla::ui
