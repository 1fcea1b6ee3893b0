// One conversation of the Chat page (see chatpane.h).
#include "ui/chat/chatpane.h"

#include <algorithm>

#include <QComboBox>
#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QScrollBar>
#include <QTextCursor>
#include <QToolButton>
#include <QVBoxLayout>

#include "ui/chat/chatworker.h"

namespace flotilla::ui {

namespace {

// The run combo's entries that are not runs.
const QString kCheckpointFolder = QStringLiteral("#checkpoint");
const QString kHfModel = QStringLiteral("#hf");

}  // namespace

ChatPane::ChatPane(const QString& title, const QString& workerPath, QWidget* parent)
    : QWidget(parent),
      m_worker(new ChatWorker(workerPath, this)),
      m_run(new QComboBox(this)),
      m_step(new QComboBox(this)),
      m_path(new QLineEdit(this)),
      m_browse(new QToolButton(this)),
      m_transcript(new QPlainTextEdit(this)),
      m_status(new QLabel(this)) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  auto* heading = new QLabel(QStringLiteral("<b>%1</b>").arg(title.toHtmlEscaped()), this);
  layout->addWidget(heading);

  m_run->setObjectName(QStringLiteral("chatRun"));
  m_run->setToolTip(tr("The run whose checkpoint answers, or a folder / Hugging Face model"));
  m_run->addItem(tr("Checkpoint folder…"), kCheckpointFolder);
  m_run->addItem(tr("Hugging Face folder or name…"), kHfModel);
  m_step->setObjectName(QStringLiteral("chatCheckpoint"));
  m_step->setToolTip(tr("Which of the run's checkpoints"));
  m_path->setObjectName(QStringLiteral("chatPath"));
  m_browse->setText(tr("Browse…"));
  m_browse->setObjectName(QStringLiteral("chatBrowse"));
  auto* source = new QHBoxLayout;
  source->addWidget(new QLabel(tr("Model"), this));
  source->addWidget(m_run, 2);
  source->addWidget(m_step, 1);
  source->addWidget(m_path, 3);
  source->addWidget(m_browse);
  layout->addLayout(source);

  m_transcript->setObjectName(QStringLiteral("chatTranscript"));
  m_transcript->setReadOnly(true);
  m_transcript->setPlaceholderText(tr("The conversation appears here, the answer as it is generated."));
  layout->addWidget(m_transcript, 1);
  m_status->setObjectName(QStringLiteral("chatStatus"));
  m_status->setWordWrap(true);
  m_status->setTextInteractionFlags(Qt::TextSelectableByMouse);
  m_status->setMinimumHeight(m_status->fontMetrics().lineSpacing() * 2 + 4);
  layout->addWidget(m_status);

  connect(m_run, &QComboBox::currentIndexChanged, this, [this] { sourceChosen(); });
  connect(m_browse, &QToolButton::clicked, this, [this] {
    const QString dir = QFileDialog::getExistingDirectory(
        this, tr("A checkpoint or Hugging Face model folder"), m_path->text());
    if (!dir.isEmpty()) m_path->setText(dir);
  });

  connect(m_worker, &ChatWorker::loading, this, [this] {
    m_status->setText(tr("Loading the model (once; it stays loaded for the next messages)…"));
  });
  connect(m_worker, &ChatWorker::ready, this,
          [this](const QString& description, qint64 step, const QString& format) {
            m_modelLine = step >= 0 ? tr("step %1 · %2 format").arg(step).arg(format)
                                    : tr("%1 · %2 format").arg(description, format);
            m_status->setText(tr("Loaded: %1").arg(m_modelLine));
          });
  connect(m_worker, &ChatWorker::started, this, [this](qint64 id, int promptTokens, const QString& format) {
    if (id != m_request) return;
    const int context = m_worker->readyInfo().context;
    m_contextNote =
        context > 0 && promptTokens > context
            ? tr("the conversation (%1 tokens) is longer than the model's context: it sees the last %2")
                  .arg(promptTokens)
                  .arg(context)
            : QString();
    m_status->setText(tr("Answering… (%1 prompt tokens, %2 format)").arg(promptTokens).arg(format) +
                      (m_contextNote.isEmpty() ? QString() : QStringLiteral(" · ") + m_contextNote));
  });
  connect(m_worker, &ChatWorker::delta, this,
          [this](qint64 id, const QString& text, qint64 tokens, double rate) {
            if (id != m_request) return;
            m_answer += text;
            appendText(text);
            m_status->setText(tr("Answering… %1 tokens · %2 tokens/s").arg(tokens).arg(rate, 0, 'f', 1));
          });
  connect(m_worker, &ChatWorker::done, this,
          [this](qint64 id, const QString& stop, qint64 tokens, double rate, double prefillMs) {
            if (id != m_request) return;
            const QString why = stop == QLatin1String("end token")     ? tr("ended its turn")
                                : stop == QLatin1String("stop string") ? tr("reached a stop text")
                                : stop == QLatin1String("cancelled")   ? tr("stopped, as asked")
                                                                       : tr("reached the token limit");
            m_history.push_back({"assistant", m_answer.toStdString()});
            finish(stop, tr("%1 tokens · %2 tokens/s · first token after %3 ms · %4%5")
                                 .arg(tokens)
                                 .arg(rate, 0, 'f', 1)
                                 .arg(prefillMs, 0, 'f', 0)
                                 .arg(why, m_modelLine.isEmpty() ? QString()
                                                                 : QStringLiteral(" · ") + m_modelLine) +
                             (m_contextNote.isEmpty() ? QString() : QStringLiteral(" · ") + m_contextNote));
          });
  connect(m_worker, &ChatWorker::failed, this, [this](qint64 id, const QString& message) {
    if (id >= 0 && id != m_request) return;
    if (!m_generating) {
      m_status->setText(tr("The worker said: %1").arg(message));
      return;
    }
    if (!m_history.empty()) m_history.pop_back();  // the unanswered turn
    appendText(tr("(no answer: %1)").arg(message));
    finish(QStringLiteral("error"), tr("No answer: %1").arg(message));
  });
  connect(m_worker, &ChatWorker::died, this, [this](const QString& reason, bool loaded) {
    const QString what =
        !loaded ? tr("The model could not be loaded (%1).").arg(reason)
        : m_generating
            ? tr("The worker stopped mid-answer (%1). The next message starts a fresh one.").arg(reason)
            : tr("The worker stopped (%1). The next message starts a fresh one.").arg(reason);
    if (m_generating) {
      if (!m_history.empty()) m_history.pop_back();
      appendText(loaded ? tr(" (the worker stopped)") : tr(" (not loaded)"));
      finish(QStringLiteral("died"), what);
    } else {
      m_status->setText(what);
    }
  });
  sourceChosen();
}

void ChatPane::setWorkerPath(const QString& path) { m_worker->setWorkerPath(path); }

void ChatPane::setRuns(const QList<ChatRunEntry>& runs) {
  const QString current = m_run->currentData().toString();
  QSignalBlocker block(m_run);
  while (m_run->count() > 2) m_run->removeItem(0);
  for (int i = 0; i < runs.size(); ++i) m_run->insertItem(i, runs[i].name, runs[i].runDir);
  const int again = m_run->findData(current);
  m_run->setCurrentIndex(again >= 0 ? again : 0);
  block.unblock();
  sourceChosen();
}

void ChatPane::setCheckpoint(const QString& dir) {
  m_run->setCurrentIndex(m_run->findData(kCheckpointFolder));
  m_path->setText(dir);
}

void ChatPane::setHfModel(const QString& nameOrFolder) {
  m_run->setCurrentIndex(m_run->findData(kHfModel));
  m_path->setText(nameOrFolder);
}

void ChatPane::sourceChosen() {
  const QString data = m_run->currentData().toString();
  const bool folder = data == kCheckpointFolder || data == kHfModel;
  m_step->setVisible(!folder);
  m_path->setVisible(folder);
  m_browse->setVisible(folder);
  m_path->setPlaceholderText(data == kHfModel
                                 ? tr("a Hugging Face folder, or a Hub name (org/name)")
                                 : tr("a checkpoint folder (step-N, checkpoints or a run folder)"));
  if (!folder) listCheckpoints();
}

void ChatPane::listCheckpoints() {
  m_step->clear();
  const QString runDir = m_run->currentData().toString();
  QDir dir(runDir + QStringLiteral("/checkpoints"));
  QStringList steps =
      dir.entryList({QStringLiteral("step-*")}, QDir::Dirs | QDir::NoDotAndDotDot, QDir::Name);
  std::reverse(steps.begin(), steps.end());  // newest first (step-%08d sorts by name)
  for (int i = 0; i < steps.size(); ++i) {
    bool ok = false;
    const qint64 step = steps[i].mid(5).toLongLong(&ok);
    const QString label = ok ? tr("step %1").arg(step) : steps[i];
    m_step->addItem(i == 0 ? tr("%1 (newest)").arg(label) : label, dir.filePath(steps[i]));
  }
  if (steps.isEmpty()) m_step->addItem(tr("no checkpoint on this machine"), QString());
}

QString ChatPane::sourceCheckpoint() const {
  const QString data = m_run->currentData().toString();
  if (data == kHfModel) return {};
  if (data == kCheckpointFolder) return m_path->text().trimmed();
  return m_step->currentData().toString();
}

QString ChatPane::sourceHfModel() const {
  return m_run->currentData().toString() == kHfModel ? m_path->text().trimmed() : QString();
}

bool ChatPane::send(const QString& text, const QString& system, const QString& format,
                    const runs::ChatOptions& options) {
  if (m_generating) return false;
  const QString checkpoint = sourceCheckpoint(), hf = sourceHfModel();
  if (checkpoint.isEmpty() && hf.isEmpty()) {
    m_status->setText(
        tr("Choose a model first: a run's checkpoint, a checkpoint folder or a Hugging Face model."));
    return false;
  }
  if (checkpoint != m_loadedCheckpoint || hf != m_loadedHf) {  // another model: a new conversation
    m_history.clear();
    if (!m_transcript->toPlainText().isEmpty())
      appendText(tr("\n— %1 —\n").arg(checkpoint.isEmpty() ? hf : checkpoint));
    m_loadedCheckpoint = checkpoint;
    m_loadedHf = hf;
    m_modelLine.clear();
  }
  m_worker->setSource(checkpoint, hf);
  m_history.push_back({"user", text.toStdString()});
  std::vector<runs::ChatTurn> messages;
  if (!system.trimmed().isEmpty()) messages.push_back({"system", system.toStdString()});
  messages.insert(messages.end(), m_history.begin(), m_history.end());
  if (!m_transcript->toPlainText().isEmpty()) appendText(QStringLiteral("\n\n"));
  appendText(tr("You: "), true);
  appendText(text + QStringLiteral("\n"));
  appendText(tr("Model: "), true);
  m_answer.clear();
  m_stop.clear();
  m_generating = true;
  m_clock.start();
  m_request = m_worker->generate(messages, format, options);
  emit generatingChanged(true);
  return true;
}

void ChatPane::stop() {
  if (m_generating) m_worker->cancel();
}

void ChatPane::clear() {
  if (m_generating) return;
  m_history.clear();
  m_transcript->clear();
  m_answer.clear();
}

QString ChatPane::transcript() const { return m_transcript->toPlainText(); }
QString ChatPane::statusText() const { return m_status->text(); }
void ChatPane::setStatus(const QString& text) { m_status->setText(text); }

void ChatPane::appendText(const QString& text, bool bold) {
  QTextCursor cursor(m_transcript->document());
  cursor.movePosition(QTextCursor::End);
  QTextCharFormat format;
  format.setFontWeight(bold ? QFont::Bold : QFont::Normal);
  cursor.insertText(text, format);
  QScrollBar* bar = m_transcript->verticalScrollBar();
  bar->setValue(bar->maximum());
}

void ChatPane::finish(const QString& stop, const QString& status) {
  m_generating = false;
  m_request = -1;
  m_stop = stop;
  m_status->setText(status);
  emit generatingChanged(false);
  emit answered(stop);
}

}  // namespace flotilla::ui
