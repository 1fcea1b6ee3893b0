// One `flotilla-worker chat` child process for the Chat page (docs/chat.md): started on the first
// message for a model, kept (the model stays loaded) while the source is the same, restarted when
// it changes or after the process died.
//
// Decisions: the process is a QProcess driven by signals, so nothing here ever waits on the UI
// thread (no waitFor*). Request lines written before the process has started are kept and written
// when it starts. A process that ends without being asked to (killed, crashed, a load error) is
// reported once through died() with its exit code or signal and its last stderr line, the
// generation in flight (if any) is over, and the next generate() starts a fresh process.
#pragma once

#include <QByteArray>
#include <QObject>
#include <QString>
#include <QStringList>

#include "runs/chat_protocol.h"

class QProcess;

namespace flotilla::ui {

class ChatWorker : public QObject {
  Q_OBJECT

 public:
  explicit ChatWorker(const QString& workerPath, QObject* parent = nullptr);
  ~ChatWorker() override;

  // What to load: a checkpoint (step-N, checkpoints or run folder), or a Hugging Face folder or
  // Hub name. A different source ends the running process; the next generate() loads it.
  void setSource(const QString& checkpoint, const QString& hfModel);
  QString checkpoint() const { return m_checkpoint; }
  QString hfModel() const { return m_hfModel; }
  bool hasSource() const { return !m_checkpoint.isEmpty() || !m_hfModel.isEmpty(); }
  void setWorkerPath(const QString& path) { m_workerPath = path; }

  // Asks for an answer (starting the process when none runs); returns the request's id.
  qint64 generate(const std::vector<runs::ChatTurn>& messages, const QString& format,
                  const runs::ChatOptions& options);
  // Stops the answer in flight after its current token (done() follows with "cancelled").
  void cancel();
  // Ends the process (quit, then killed if it lingers); no died() for it.
  void shutdown();

  bool isRunning() const { return m_process != nullptr; }
  bool isReady() const { return m_ready; }
  bool isGenerating() const { return m_current >= 0; }
  qint64 processId() const;
  // The ready line's facts (empty until ready).
  const runs::ChatEvent& readyInfo() const { return m_readyInfo; }

 signals:
  void loading();  // the process started, the model loads
  // Loaded: what (the worker's description line), the checkpoint's step (-1: Hugging Face), the
  // chat format `auto` resolves to (readyInfo() has the rest).
  void ready(const QString& description, qint64 step, const QString& format);
  void started(qint64 id, int promptTokens, const QString& format);
  void delta(qint64 id, const QString& text, qint64 tokens, double tokensPerSecond);
  void done(qint64 id, const QString& stop, qint64 tokens, double tokensPerSecond, double prefillMs);
  void failed(qint64 id, const QString& message);  // an error event (id -1: not about a request)
  // The process ended unasked; `reason` says how (exit code or signal, last stderr line);
  // `loaded`: it had said ready (else the model could not be loaded). The answer in flight, if
  // any, ends with it.
  void died(const QString& reason, bool loaded);

 private:
  void startProcess();
  void writeLine(const std::string& line);
  void readLines();
  void handle(const runs::ChatEvent& e);
  void processEnded(int code, bool crashed);

  QString m_workerPath, m_checkpoint, m_hfModel;
  QProcess* m_process = nullptr;
  bool m_started = false;  // the process is running (pending lines can be written)
  bool m_ready = false;
  bool m_quitting = false;
  QList<QByteArray> m_pending;  // lines written before the process started
  QByteArray m_out;             // stdout not yet split into lines
  QByteArray m_errTail;         // the last stderr bytes, for a death's reason
  qint64 m_nextId = 1;
  qint64 m_current = -1;  // the id being answered (-1: none)
  runs::ChatEvent m_readyInfo;
};

}  // namespace flotilla::ui
