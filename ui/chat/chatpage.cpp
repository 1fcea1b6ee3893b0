// The Chat page (see chatpage.h).
#include "ui/chat/chatpage.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDir>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QFutureWatcher>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QKeySequence>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QScrollArea>
#include <QShortcut>
#include <QSpinBox>
#include <QSplitter>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>

#include "db/database.h"
#include "db/queries.h"
#include "engine/core/error.h"
#include "runs/worker_command.h"
#include "ui/chat/chatpane.h"
#include "ui/chat/chatworker.h"
#include "ui/common/pageheader.h"

namespace flotilla::ui {

namespace {

// "a, b\n, c" -> {"a", "b\n", "c"}: commas separate the texts; \n stands for a new line.
std::vector<std::string> parseStops(const QString& text) {
  std::vector<std::string> out;
  for (QString part : text.split(QLatin1Char(','))) {
    part = part.trimmed();
    part.replace(QStringLiteral("\\n"), QStringLiteral("\n"));
    if (!part.isEmpty()) out.push_back(part.toStdString());
  }
  return out;
}

// The store's runs with a folder on this machine, newest first (off the UI thread).
QList<ChatRunEntry> storedRuns(const QString& databasePath) {
  QList<ChatRunEntry> out;
  try {
    db::OpenOptions options;
    options.create = false;
    options.quick_check = false;
    const db::Database database(databasePath.toStdString(), options);
    for (const db::RunListItem& item : db::list_runs(database)) {
      const QString dir = QString::fromStdString(item.run.run_dir);
      if (dir.isEmpty() || !QDir(dir).exists()) continue;  // elsewhere: `flotilla runs fetch` it first
      out.push_back({QString::fromStdString(item.run.name), dir});
    }
  } catch (const std::exception&) {
    // no store to read: folders and Hugging Face models only
  }
  return out;
}

}  // namespace

ChatPage::ChatPage(const QString& databasePath, const QString& workerPath, QWidget* parent)
    : QWidget(parent),
      m_databasePath(databasePath),
      m_workerPath(workerPath),
      m_format(new QComboBox(this)),
      m_temperature(new QDoubleSpinBox(this)),
      m_topK(new QSpinBox(this)),
      m_topP(new QDoubleSpinBox(this)),
      m_penalty(new QDoubleSpinBox(this)),
      m_tokens(new QSpinBox(this)),
      m_seed(new QSpinBox(this)),
      m_stops(new QLineEdit(this)),
      m_system(new QLineEdit(this)),
      m_special(new QCheckBox(tr("Show special tokens"), this)),
      m_ignoreEnd(new QCheckBox(tr("Go on past the end of turn"), this)),
      m_compare(new QCheckBox(tr("Compare side by side"), this)),
      m_split(new QSplitter(Qt::Horizontal, this)),
      m_left(new ChatPane(tr("Model A"), workerPath, m_split)),
      m_right(new ChatPane(tr("Model B"), workerPath, m_split)),
      m_prompt(new QPlainTextEdit(this)),
      m_send(new QPushButton(tr("Send"), this)),
      m_stopButton(new QPushButton(tr("Stop"), this)),
      m_clear(new QPushButton(tr("New conversation"), this)) {
  auto* outer = new QVBoxLayout(this);
  outer->addWidget(new PageHeader(
      tr("Chat"),
      tr("Talk to a run's checkpoint or a Hugging Face model in its chat format and watch the answer "
         "arrive with its speed in tokens/s. Compare side by side puts a second model on the same "
         "messages. Each model runs in its own worker process, loaded once."),
      this));
  // The rest scrolls in a small window (the page's minimum stays small).
  auto* body = new QWidget(this);
  auto* layout = new QVBoxLayout(body);
  layout->setContentsMargins(0, 0, 0, 0);
  auto* scroll = new QScrollArea(this);
  scroll->setWidgetResizable(true);
  scroll->setFrameShape(QFrame::NoFrame);
  const runs::ChatOptions defaults;
  auto* options = new QGroupBox(tr("Chat format and sampling"), this);
  auto* form = new QFormLayout(options);
  m_format->setObjectName(QStringLiteral("chatFormat"));
  m_format->addItem(tr("the model's (auto)"), QStringLiteral("auto"));
  for (const char* f : {"llama3", "chatml", "qwen3", "plain"})
    m_format->addItem(QLatin1String(f), QLatin1String(f));
  m_format->setToolTip(
      tr("How the conversation is written for the model: auto is the format its tokenizer's chat "
         "template implies (plain for a base model, which continues the text)"));
  m_temperature->setObjectName(QStringLiteral("chatTemperature"));
  m_temperature->setRange(0, 5);
  m_temperature->setSingleStep(0.1);
  m_temperature->setDecimals(2);
  m_temperature->setValue(defaults.temperature);
  m_temperature->setSpecialValueText(tr("0 (greedy)"));
  m_topK->setObjectName(QStringLiteral("chatTopK"));
  m_topK->setRange(0, 1000000);
  m_topK->setSpecialValueText(tr("off"));
  m_topP->setObjectName(QStringLiteral("chatTopP"));
  m_topP->setRange(0.01, 1);
  m_topP->setSingleStep(0.05);
  m_topP->setValue(defaults.top_p);
  m_penalty->setObjectName(QStringLiteral("chatRepetitionPenalty"));
  m_penalty->setRange(0.5, 3);
  m_penalty->setSingleStep(0.05);
  m_penalty->setValue(defaults.repetition_penalty);
  m_penalty->setToolTip(tr("Above 1 makes tokens already in the conversation less likely (1: off)"));
  m_tokens->setObjectName(QStringLiteral("chatMaxTokens"));
  m_tokens->setRange(1, 100000);
  m_tokens->setValue(defaults.max_tokens);
  m_seed->setObjectName(QStringLiteral("chatSeed"));
  m_seed->setRange(0, 1000000000);
  m_seed->setValue(static_cast<int>(defaults.seed));
  auto* row = new QHBoxLayout;
  row->addWidget(new QLabel(tr("Format"), this));
  row->addWidget(m_format);
  row->addWidget(new QLabel(tr("Temperature"), this));
  row->addWidget(m_temperature);
  row->addWidget(new QLabel(tr("Top-k"), this));
  row->addWidget(m_topK);
  row->addWidget(new QLabel(tr("Top-p"), this));
  row->addWidget(m_topP);
  row->addStretch();
  form->addRow(row);
  auto* row2 = new QHBoxLayout;
  row2->addWidget(new QLabel(tr("Repetition penalty"), this));
  row2->addWidget(m_penalty);
  row2->addWidget(new QLabel(tr("Max new tokens"), this));
  row2->addWidget(m_tokens);
  row2->addWidget(new QLabel(tr("Seed"), this));
  row2->addWidget(m_seed);
  m_stops->setObjectName(QStringLiteral("chatStops"));
  m_stops->setPlaceholderText(tr("texts that end the answer, separated by commas (\\n: a new line)"));
  row2->addStretch();
  form->addRow(row2);
  auto* row3 = new QHBoxLayout;
  row3->addWidget(m_stops, 1);
  m_special->setObjectName(QStringLiteral("chatSpecial"));
  m_ignoreEnd->setObjectName(QStringLiteral("chatIgnoreEnd"));
  m_ignoreEnd->setToolTip(tr("Generate up to the token limit even after the model ends its turn"));
  row3->addWidget(m_special);
  row3->addWidget(m_ignoreEnd);
  form->addRow(tr("Stop at"), row3);
  m_system->setObjectName(QStringLiteral("chatSystem"));
  m_system->setPlaceholderText(tr("optional: a system message before the conversation"));
  form->addRow(tr("System"), m_system);
  layout->addWidget(options);

  m_compare->setObjectName(QStringLiteral("chatCompare"));
  m_compare->setToolTip(tr("A second model gets the same messages in a second pane"));
  layout->addWidget(m_compare);
  m_left->setObjectName(QStringLiteral("chatPaneA"));
  m_right->setObjectName(QStringLiteral("chatPaneB"));
  m_split->addWidget(m_left);
  m_split->addWidget(m_right);
  m_right->setVisible(false);
  layout->addWidget(m_split, 1);

  m_prompt->setObjectName(QStringLiteral("chatPrompt"));
  m_prompt->setPlaceholderText(tr("Your message (Ctrl+Enter sends)"));
  m_prompt->setTabChangesFocus(true);
  m_prompt->setFixedHeight(m_prompt->fontMetrics().lineSpacing() * 3 + 12);
  layout->addWidget(m_prompt);
  auto* buttons = new QHBoxLayout;
  m_send->setObjectName(QStringLiteral("chatSend"));
  m_stopButton->setObjectName(QStringLiteral("chatStop"));
  m_clear->setObjectName(QStringLiteral("chatClear"));
  buttons->addWidget(m_send);
  buttons->addWidget(m_stopButton);
  buttons->addStretch();
  buttons->addWidget(m_clear);
  layout->addLayout(buttons);
  scroll->setWidget(body);
  outer->addWidget(scroll, 1);

  connect(m_send, &QPushButton::clicked, this, &ChatPage::send);
  connect(m_stopButton, &QPushButton::clicked, this, &ChatPage::stop);
  connect(m_clear, &QPushButton::clicked, this, &ChatPage::clear);
  connect(m_compare, &QCheckBox::toggled, this, [this](bool on) { setSideBySide(on); });
  auto* shortcut = new QShortcut(QKeySequence(Qt::CTRL | Qt::Key_Return), m_prompt);
  shortcut->setContext(Qt::WidgetShortcut);
  connect(shortcut, &QShortcut::activated, this, &ChatPage::send);
  for (ChatPane* pane : {m_left, m_right})
    connect(pane, &ChatPane::generatingChanged, this, &ChatPage::updateButtons);
  updateButtons();
}

void ChatPage::setWorkerPath(const QString& path) {
  m_workerPath = path;
  m_left->setWorkerPath(path);
  m_right->setWorkerPath(path);
}

QString ChatPage::workerPath() {
  if (m_workerPath.isEmpty()) {
    try {
      setWorkerPath(QString::fromStdString(runs::find_worker()));
    } catch (const Error& e) {
      m_workerError = QString::fromUtf8(e.what());
    }
  }
  return m_workerPath;
}

runs::ChatOptions ChatPage::options() const {
  runs::ChatOptions o;
  o.max_tokens = m_tokens->value();
  o.temperature = m_temperature->value();
  o.top_k = m_topK->value();
  o.top_p = m_topP->value();
  o.repetition_penalty = m_penalty->value();
  o.seed = static_cast<uint64_t>(m_seed->value());
  o.stops = parseStops(m_stops->text());
  o.special = m_special->isChecked();
  o.ignore_eos = m_ignoreEnd->isChecked();
  return o;
}

QString ChatPage::format() const { return m_format->currentData().toString(); }

bool ChatPage::sideBySide() const { return m_compare->isChecked(); }

void ChatPage::setSideBySide(bool on) {
  if (m_compare->isChecked() != on) m_compare->setChecked(on);  // toggled() comes back here
  m_right->setVisible(on);
  if (on) m_split->setSizes({1, 1});
  updateButtons();
}

void ChatPage::send() {
  const QString text = m_prompt->toPlainText().trimmed();
  if (text.isEmpty() || m_left->isGenerating() || m_right->isGenerating()) return;
  if (workerPath().isEmpty()) {
    for (ChatPane* pane : {m_left, m_right})
      pane->setStatus(tr("Cannot find flotilla-worker: %1").arg(m_workerError));
    return;
  }
  bool sent = m_left->send(text, m_system->text(), format(), options());
  if (sideBySide()) sent = m_right->send(text, m_system->text(), format(), options()) || sent;
  if (sent) m_prompt->clear();
  updateButtons();
}

void ChatPage::stop() {
  m_left->stop();
  m_right->stop();
}

void ChatPage::clear() {
  m_left->clear();
  m_right->clear();
}

void ChatPage::updateButtons() {
  const bool busy = m_left->isGenerating() || m_right->isGenerating();
  m_send->setEnabled(!busy);
  m_stopButton->setEnabled(busy);
  m_clear->setEnabled(!busy);
}

void ChatPage::showEvent(QShowEvent* event) {
  QWidget::showEvent(event);
  refreshRuns();
}

void ChatPage::refreshRuns() {
  if (m_databasePath.isEmpty() || m_listing) return;
  m_listing = true;
  auto* watcher = new QFutureWatcher<QList<ChatRunEntry>>(this);
  connect(watcher, &QFutureWatcher<QList<ChatRunEntry>>::finished, this, [this, watcher] {
    const QList<ChatRunEntry> runs = watcher->result();
    watcher->deleteLater();
    m_listing = false;
    m_left->setRuns(runs);
    m_right->setRuns(runs);
  });
  watcher->setFuture(QtConcurrent::run([path = m_databasePath] { return storedRuns(path); }));
}

}  // namespace flotilla::ui
