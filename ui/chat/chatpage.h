// The Chat page (sidebar "Chat"): talk to a run's checkpoint or a Hugging Face model in its chat
// format, see the answer stream in with tokens/s, stop it, and compare two models side by side on
// the same messages. docs/chat.md.
//
// Decisions: every generation runs in a `flotilla-worker chat` child process per pane (ChatWorker),
// never on the UI thread; the model stays loaded between messages. The sampling options and the
// chat format are the page's, shared by both panes, so a side-by-side comparison differs only in
// the model. The run list comes from the workspace's store, read off the UI thread.
#pragma once

#include <QString>
#include <QWidget>

#include "runs/chat_protocol.h"

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QLineEdit;
class QPlainTextEdit;
class QPushButton;
class QSpinBox;
class QSplitter;

namespace flotilla::ui {

class ChatPane;

class ChatPage : public QWidget {
  Q_OBJECT

 public:
  // `databasePath`: the workspace's run store ("" none: folders and Hugging Face models only).
  // `workerPath`: "" finds flotilla-worker beside the app (runs::find_worker) when first needed.
  explicit ChatPage(const QString& databasePath, const QString& workerPath = QString(),
                    QWidget* parent = nullptr);

  void setWorkerPath(const QString& path);
  // The fields as a request's options / format.
  runs::ChatOptions options() const;
  QString format() const;

  ChatPane* pane(int i) const { return i == 0 ? m_left : m_right; }
  bool sideBySide() const;
  void setSideBySide(bool on);
  QPlainTextEdit* promptEdit() const { return m_prompt; }
  QPushButton* sendButton() const { return m_send; }
  QPushButton* stopButton() const { return m_stopButton; }
  QComboBox* formatBox() const { return m_format; }
  QDoubleSpinBox* temperatureBox() const { return m_temperature; }
  QSpinBox* maxTokensBox() const { return m_tokens; }
  QCheckBox* ignoreEndBox() const { return m_ignoreEnd; }
  QCheckBox* compareBox() const { return m_compare; }

 public slots:
  void send();  // the prompt to every shown pane
  void stop();
  void clear();
  void refreshRuns();

 protected:
  void showEvent(QShowEvent* event) override;

 private:
  void updateButtons();
  QString workerPath();

  QString m_databasePath, m_workerPath, m_workerError;
  QComboBox* m_format;
  QDoubleSpinBox* m_temperature;
  QSpinBox* m_topK;
  QDoubleSpinBox* m_topP;
  QDoubleSpinBox* m_penalty;
  QSpinBox* m_tokens;
  QSpinBox* m_seed;
  QLineEdit* m_stops;
  QLineEdit* m_system;
  QCheckBox* m_special;
  QCheckBox* m_ignoreEnd;
  QCheckBox* m_compare;
  QSplitter* m_split;
  ChatPane* m_left;
  ChatPane* m_right;
  QPlainTextEdit* m_prompt;
  QPushButton* m_send;
  QPushButton* m_stopButton;
  QPushButton* m_clear;
  bool m_listing = false;
};

}  // namespace flotilla::ui
