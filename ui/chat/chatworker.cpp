// The chat worker process (see chatworker.h).
#include "ui/chat/chatworker.h"

#include <QProcess>
#include <QTimer>

namespace flotilla::ui {

namespace {

constexpr int kErrTailBytes = 4096;

// The last non-empty line of the worker's stderr ("flotilla-worker chat: usage: no tokenizer ...").
QString lastLine(const QByteArray& err) {
  const QStringList lines = QString::fromUtf8(err).split(QLatin1Char('\n'), Qt::SkipEmptyParts);
  return lines.isEmpty() ? QString() : lines.last().trimmed();
}

}  // namespace

ChatWorker::ChatWorker(const QString& workerPath, QObject* parent)
    : QObject(parent), m_workerPath(workerPath) {}

ChatWorker::~ChatWorker() {
  if (m_process) {
    m_process->disconnect(this);
    m_process->kill();
    m_process->waitForFinished(2000);  // the window is closing: reap it
  }
}

void ChatWorker::setSource(const QString& checkpoint, const QString& hfModel) {
  if (checkpoint == m_checkpoint && hfModel == m_hfModel) return;
  shutdown();
  m_checkpoint = checkpoint;
  m_hfModel = hfModel;
}

qint64 ChatWorker::processId() const { return m_process ? m_process->processId() : 0; }

void ChatWorker::startProcess() {
  m_out.clear();
  m_errTail.clear();
  m_ready = false;
  m_started = false;
  m_quitting = false;
  m_readyInfo = {};
  m_process = new QProcess(this);
  QProcess* p = m_process;
  QStringList args;
  for (const std::string& a : runs::chat_worker_args(m_checkpoint.toStdString(), m_hfModel.toStdString()))
    args << QString::fromStdString(a);
  p->setProgram(m_workerPath);
  p->setArguments(args);  // no shell: nothing typed is interpreted
  connect(p, &QProcess::started, this, [this, p] {
    if (p != m_process) return;
    m_started = true;
    for (const QByteArray& line : m_pending) p->write(line);
    m_pending.clear();
  });
  connect(p, &QProcess::readyReadStandardOutput, this, [this, p] {
    if (p != m_process) return;
    m_out += p->readAllStandardOutput();
    readLines();
  });
  connect(p, &QProcess::readyReadStandardError, this, [this, p] {
    if (p != m_process) return;
    m_errTail += p->readAllStandardError();
    if (m_errTail.size() > kErrTailBytes) m_errTail = m_errTail.right(kErrTailBytes);
  });
  connect(p, &QProcess::finished, this, [this, p](int code, QProcess::ExitStatus status) {
    if (p != m_process) return;
    m_out += p->readAllStandardOutput();
    m_errTail += p->readAllStandardError();
    readLines();
    processEnded(code, status == QProcess::CrashExit);
  });
  connect(p, &QProcess::errorOccurred, this, [this, p](QProcess::ProcessError error) {
    if (p != m_process || error != QProcess::FailedToStart) return;
    m_errTail = tr("cannot start %1: %2").arg(m_workerPath, p->errorString()).toUtf8();
    processEnded(-1, false);
  });
  emit loading();
  p->start();
}

void ChatWorker::writeLine(const std::string& line) {
  QByteArray bytes = QByteArray::fromStdString(line);
  bytes += '\n';
  if (m_started)
    m_process->write(bytes);
  else
    m_pending << bytes;
}

qint64 ChatWorker::generate(const std::vector<runs::ChatTurn>& messages, const QString& format,
                            const runs::ChatOptions& options) {
  if (!m_process) startProcess();
  const qint64 id = m_nextId++;
  m_current = id;
  writeLine(runs::chat_generate_line(id, messages, format.toStdString(), options));
  return id;
}

void ChatWorker::cancel() {
  if (m_process && m_current >= 0) writeLine(runs::chat_cancel_line(m_current));
}

void ChatWorker::shutdown() {
  if (!m_process) return;
  QProcess* p = m_process;
  m_process = nullptr;  // its signals are ignored from now on
  const bool started = m_started;
  m_pending.clear();
  m_current = -1;
  m_ready = false;
  m_started = false;
  p->disconnect(this);
  // quit, then killed if it is still there in 3 s (a generation cancels within a token); never
  // waited for here: the process deletes itself once it has ended.
  if (started) p->write(QByteArray::fromStdString(runs::chat_quit_line() + "\n"));
  p->closeWriteChannel();
  connect(p, &QProcess::finished, p, &QObject::deleteLater);
  connect(p, &QProcess::errorOccurred, p, [p](QProcess::ProcessError e) {
    if (e == QProcess::FailedToStart) p->deleteLater();
  });
  if (p->state() == QProcess::NotRunning) {
    p->deleteLater();
    return;
  }
  QTimer::singleShot(3000, p, [p] {
    if (p->state() != QProcess::NotRunning) p->kill();
  });
}

void ChatWorker::readLines() {
  for (;;) {
    const qsizetype nl = m_out.indexOf('\n');
    if (nl < 0) return;
    const QByteArray line = m_out.left(nl);
    m_out.remove(0, nl + 1);
    if (line.trimmed().isEmpty()) continue;
    handle(runs::parse_chat_event(line.toStdString()));
    if (!m_process) return;  // a handler shut it down
  }
}

void ChatWorker::handle(const runs::ChatEvent& e) {
  using Kind = runs::ChatEvent::Kind;
  switch (e.kind) {
    case Kind::kReady:
      m_ready = true;
      m_readyInfo = e;
      emit ready(QString::fromStdString(e.description), e.step, QString::fromStdString(e.format));
      break;
    case Kind::kStart:
      emit started(e.id, static_cast<int>(e.prompt_tokens), QString::fromStdString(e.format));
      break;
    case Kind::kDelta:
      emit delta(e.id, QString::fromStdString(e.text), e.tokens, e.tokens_per_s);
      break;
    case Kind::kDone:
      if (e.id == m_current) m_current = -1;
      emit done(e.id, QString::fromStdString(e.stop), e.tokens, e.tokens_per_s, e.prefill_ms);
      break;
    case Kind::kError:
      if (e.id >= 0 && e.id == m_current) m_current = -1;
      emit failed(e.id, QString::fromStdString(e.text));
      break;
    case Kind::kUnknown:
      break;  // a line this app does not know (a newer worker): ignored
  }
}

void ChatWorker::processEnded(int code, bool crashed) {
  QProcess* p = m_process;
  const bool loaded = m_ready;
  m_process = nullptr;
  m_current = -1;
  m_ready = false;
  m_started = false;
  m_pending.clear();
  if (p) p->deleteLater();
  QString how =
      crashed ? tr("the worker was killed or crashed") : tr("the worker exited with code %1").arg(code);
  if (code == -1 && !crashed) how = tr("the worker did not start");
  const QString line = lastLine(m_errTail);
  emit died(line.isEmpty() ? how : how + QStringLiteral(": ") + line, loaded);
}

}  // namespace flotilla::ui
