// One conversation of the Chat page: which model (a run's checkpoint, a checkpoint folder, or a
// Hugging Face folder / Hub name), the transcript with the answer streaming in, and a status line
// (what is loaded, tokens/s, how the answer ended, or why the worker stopped). The page holds one,
// or two side by side that get the same messages.
//
// Decision: each pane keeps its own history (the user's turns and its own model's answers), so two
// models compared side by side each continue their own conversation. An answer cut by Stop is
// kept as the model's turn (what the user saw); a turn whose worker died has no answer and is
// dropped from the history, so the next message starts a fresh worker on a clean conversation.
#pragma once

#include <QElapsedTimer>
#include <QList>
#include <QString>
#include <QWidget>

#include <vector>

#include "runs/chat_protocol.h"

class QComboBox;
class QLabel;
class QLineEdit;
class QPlainTextEdit;
class QToolButton;

namespace flotilla::ui {

class ChatWorker;

struct ChatRunEntry {
  QString name, runDir;
};

class ChatPane : public QWidget {
  Q_OBJECT

 public:
  ChatPane(const QString& title, const QString& workerPath, QWidget* parent = nullptr);

  // The runs to pick from (the store's, with a folder on this machine).
  void setRuns(const QList<ChatRunEntry>& runs);
  void setWorkerPath(const QString& path);
  // Choose a source directly: a checkpoint (step-N, checkpoints or run folder) or a Hugging Face
  // folder / Hub name.
  void setCheckpoint(const QString& dir);
  void setHfModel(const QString& nameOrFolder);
  // The chosen source (one of the two is set; both empty: none chosen).
  QString sourceCheckpoint() const;
  QString sourceHfModel() const;

  // Sends the user's message (after `system` when not empty) and streams the answer; false (and the
  // status says why) when no model is chosen or an answer is still coming.
  bool send(const QString& text, const QString& system, const QString& format,
            const runs::ChatOptions& options);
  void stop();
  void clear();  // a new conversation (the model stays loaded)
  bool isGenerating() const { return m_generating; }

  QString lastAnswer() const { return m_answer; }
  QString lastStop() const { return m_stop; }  // end token | stop string | length | cancelled | died | error
  QString transcript() const;
  QString statusText() const;
  void setStatus(const QString& text);
  int turns() const { return static_cast<int>(m_history.size()); }
  ChatWorker* worker() const { return m_worker; }
  QComboBox* runBox() const { return m_run; }
  QComboBox* checkpointBox() const { return m_step; }
  QLineEdit* pathEdit() const { return m_path; }

 signals:
  void generatingChanged(bool generating);
  void answered(const QString& stop);  // an answer ended (however: see lastStop())

 private:
  void sourceChosen();
  void listCheckpoints();
  void appendText(const QString& text, bool bold = false);
  void finish(const QString& stop, const QString& status);

  ChatWorker* m_worker;
  QComboBox* m_run;
  QComboBox* m_step;
  QLineEdit* m_path;
  QToolButton* m_browse;
  QPlainTextEdit* m_transcript;
  QLabel* m_status;
  std::vector<runs::ChatTurn> m_history;
  QString m_loadedCheckpoint, m_loadedHf;  // the source the history belongs to
  QString m_answer, m_stop, m_modelLine;
  QString m_contextNote;  // the conversation no longer fits the model's context ("" it does)
  qint64 m_request = -1;
  bool m_generating = false;
  QElapsedTimer m_clock;
};

}  // namespace flotilla::ui
