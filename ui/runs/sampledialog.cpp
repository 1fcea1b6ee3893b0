// The Sample dialog (see sampledialog.h).
#include "ui/runs/sampledialog.h"

#include <QApplication>
#include <QCheckBox>
#include <QClipboard>
#include <QDialogButtonBox>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QProcess>
#include <QPushButton>
#include <QRegularExpression>
#include <QSpinBox>
#include <QVBoxLayout>

namespace flotilla::ui {

namespace {

// "a, b\n, c" -> {"a", "b\n", "c"}: commas separate the strings; \n stands for a new line.
std::vector<std::string> parseStops(const QString& text) {
  std::vector<std::string> out;
  for (QString part : text.split(QLatin1Char(','))) {
    part = part.trimmed();
    part.replace(QStringLiteral("\\n"), QStringLiteral("\n"));
    if (!part.isEmpty()) out.push_back(part.toStdString());
  }
  return out;
}

// The worker's last stderr line that says how the answer ended ("sampled 9 tokens ...; stopped at
// <|im_end|>"), else its last line.
QString lastLine(const QByteArray& err) {
  const QStringList lines = QString::fromUtf8(err).split(QLatin1Char('\n'), Qt::SkipEmptyParts);
  for (auto it = lines.crbegin(); it != lines.crend(); ++it)
    if (it->startsWith(QStringLiteral("sampled "))) return *it;
  return lines.isEmpty() ? QString() : lines.last();
}

}  // namespace

SampleDialog::SampleDialog(const QString& runName, const QString& worker, const QString& checkpoint,
                           const QString& tokenizer, int vocabSize, QWidget* parent)
    : QDialog(parent),
      m_worker(worker),
      m_checkpoint(checkpoint),
      m_tokenizer(tokenizer),
      m_prompt(new QPlainTextEdit(this)),
      m_temperature(new QDoubleSpinBox(this)),
      m_topK(new QSpinBox(this)),
      m_topP(new QDoubleSpinBox(this)),
      m_tokens(new QSpinBox(this)),
      m_seed(new QSpinBox(this)),
      m_generate(new QPushButton(tr("Generate"), this)),
      m_stop(new QPushButton(tr("Stop"), this)),
      m_copy(new QPushButton(tr("Copy answer"), this)),
      m_answer(new QPlainTextEdit(this)),
      m_history(new QPlainTextEdit(this)),
      m_status(new QLabel(this)) {
  setObjectName(QStringLiteral("sampleDialog"));
  setWindowTitle(tr("Sample from %1").arg(runName));
  const runs::SampleRequest defaults;
  auto* layout = new QVBoxLayout(this);

  auto* about = new QLabel(this);
  about->setObjectName(QStringLiteral("sampleAbout"));
  about->setWordWrap(true);
  const bool chatModel = !tokenizer.isEmpty() && runs::has_chat_template(tokenizer.toStdString());
  if (tokenizer.isEmpty()) {
    const QString range =
        vocabSize > 0 ? tr("from 0 to %1").arg(vocabSize - 1) : tr("below the vocabulary size");
    about->setText(
        tr("This run has no tokenizer: its data (the synthetic demo corpus) is token ids, not text. "
           "Give token ids %1 separated by spaces (or none to start at token 0); the model "
           "continues them with ids.")
            .arg(range));
  } else if (chatModel) {
    about->setText(tr("A chat model: with the chat template on, the prompt is a user turn in the format its "
                      "data was prepared in, and the answer ends at the end of its turn. Tokenizer: %1")
                       .arg(tokenizer));
  } else {
    about->setText(tr("The model continues the prompt (its tokenizer has no chat template) and stops at the "
                      "end of text. Tokenizer: %1")
                       .arg(tokenizer));
  }
  layout->addWidget(about);

  m_prompt->setObjectName(QStringLiteral("prompt"));
  m_prompt->setPlaceholderText(tokenizer.isEmpty() ? tr("token ids, e.g. 1 2 3")
                                                   : tr("Ask or start a text…"));
  m_prompt->setTabChangesFocus(true);
  m_prompt->setFixedHeight(m_prompt->fontMetrics().lineSpacing() * 4 + 12);
  layout->addWidget(new QLabel(tokenizer.isEmpty() ? tr("Prompt (token ids)") : tr("Prompt"), this));
  layout->addWidget(m_prompt);

  auto* options = new QGroupBox(tr("Options"), this);
  auto* form = new QFormLayout(options);
  if (!tokenizer.isEmpty()) {
    m_chat = new QCheckBox(tr("Use the model's chat template"), this);
    m_chat->setObjectName(QStringLiteral("chat"));
    m_chat->setChecked(chatModel);
    m_chat->setToolTip(
        tr("On: the prompt becomes a user turn followed by the assistant's turn, as the run's "
           "chat data was prepared. Off: the model continues the prompt as plain text."));
    m_system = new QLineEdit(this);
    m_system->setObjectName(QStringLiteral("system"));
    m_system->setPlaceholderText(tr("optional: a system message before the prompt"));
    form->addRow(m_chat);
    form->addRow(tr("System"), m_system);
    // A system message belongs to a chat: its row shows with the template on.
    form->setRowVisible(m_system, chatModel);
    connect(m_chat, &QCheckBox::toggled, this, [form, this](bool on) { form->setRowVisible(m_system, on); });
  }
  m_temperature->setObjectName(QStringLiteral("temperature"));
  m_temperature->setRange(0, 5);
  m_temperature->setSingleStep(0.1);
  m_temperature->setDecimals(2);
  m_temperature->setValue(defaults.temperature);
  m_temperature->setSpecialValueText(tr("0 (greedy)"));
  m_temperature->setToolTip(tr("0 always takes the most likely token (greedy); higher is more varied"));
  m_topK->setObjectName(QStringLiteral("topK"));
  m_topK->setRange(0, 1000000);
  m_topK->setValue(defaults.top_k);
  m_topK->setSpecialValueText(tr("off"));
  m_topK->setToolTip(tr("Sample among the K most likely tokens only; off (0) keeps them all"));
  m_topP->setObjectName(QStringLiteral("topP"));
  m_topP->setRange(0.01, 1);
  m_topP->setSingleStep(0.05);
  m_topP->setDecimals(2);
  m_topP->setValue(defaults.top_p);
  m_topP->setToolTip(
      tr("Sample among the most likely tokens whose probabilities add up to P; 1 keeps them all"));
  m_tokens->setObjectName(QStringLiteral("maxTokens"));
  m_tokens->setRange(1, 4096);
  m_tokens->setValue(defaults.tokens);
  m_tokens->setToolTip(tr("The answer ends here at the latest"));
  m_seed->setObjectName(QStringLiteral("seed"));
  m_seed->setRange(0, 1000000000);
  m_seed->setValue(static_cast<int>(defaults.seed));
  m_seed->setToolTip(tr("The same seed and settings give the same answer"));
  auto* row = new QHBoxLayout;
  row->addWidget(new QLabel(tr("Temperature"), this));
  row->addWidget(m_temperature);
  row->addWidget(new QLabel(tr("Top-k"), this));
  row->addWidget(m_topK);
  row->addWidget(new QLabel(tr("Top-p"), this));
  row->addWidget(m_topP);
  row->addStretch();
  form->addRow(row);
  auto* row2 = new QHBoxLayout;
  row2->addWidget(new QLabel(tr("Max new tokens"), this));
  row2->addWidget(m_tokens);
  row2->addWidget(new QLabel(tr("Seed"), this));
  row2->addWidget(m_seed);
  row2->addStretch();
  form->addRow(row2);
  if (!tokenizer.isEmpty()) {
    m_stops = new QLineEdit(this);
    m_stops->setObjectName(QStringLiteral("stops"));
    m_stops->setPlaceholderText(
        tr("optional: texts that end the answer, separated by commas (\\n: a new line)"));
    form->addRow(tr("Stop at"), m_stops);
    m_special = new QCheckBox(tr("Show special tokens (such as <|im_end|>)"), this);
    m_special->setObjectName(QStringLiteral("special"));
    form->addRow(m_special);
  }
  layout->addWidget(options);

  auto* buttons = new QHBoxLayout;
  m_generate->setObjectName(QStringLiteral("generate"));
  m_generate->setDefault(true);
  m_stop->setObjectName(QStringLiteral("stopGenerating"));
  m_stop->setVisible(false);
  m_copy->setObjectName(QStringLiteral("copyAnswer"));
  buttons->addWidget(m_generate);
  buttons->addWidget(m_stop);
  buttons->addStretch();
  buttons->addWidget(m_copy);
  layout->addLayout(buttons);

  m_answer->setObjectName(QStringLiteral("answer"));
  m_answer->setReadOnly(true);
  m_answer->setPlaceholderText(tr("The answer appears here as it is generated."));
  layout->addWidget(new QLabel(tr("Answer"), this));
  layout->addWidget(m_answer, 2);
  m_status->setObjectName(QStringLiteral("sampleStatus"));
  m_status->setWordWrap(true);
  m_status->setMinimumHeight(m_status->fontMetrics().lineSpacing() * 2 + 4);  // a reason may take two lines
  m_status->setTextInteractionFlags(Qt::TextSelectableByMouse);
  layout->addWidget(m_status);
  m_history->setObjectName(QStringLiteral("history"));
  m_history->setReadOnly(true);
  m_history->setPlaceholderText(tr("Earlier answers stay here, with their settings, to compare."));
  layout->addWidget(new QLabel(tr("Earlier answers"), this));
  layout->addWidget(m_history, 2);
  auto* close = new QDialogButtonBox(QDialogButtonBox::Close, this);
  connect(close, &QDialogButtonBox::rejected, this, &QDialog::reject);
  layout->addWidget(close);

  connect(m_generate, &QPushButton::clicked, this, &SampleDialog::generate);
  connect(m_stop, &QPushButton::clicked, this, &SampleDialog::stopGenerating);
  connect(m_copy, &QPushButton::clicked, this, &SampleDialog::copyAnswer);
  resize(640, 720);
}

SampleDialog::~SampleDialog() {
  if (m_process) {
    m_process->disconnect(this);
    m_process->kill();
    m_process->waitForFinished(2000);
  }
}

runs::SampleRequest SampleDialog::request() const {
  runs::SampleRequest r;
  r.checkpoint = m_checkpoint.toStdString();
  r.tokenizer = m_tokenizer.toStdString();
  r.prompt = m_prompt->toPlainText().toStdString();
  r.temperature = m_temperature->value();
  r.top_k = m_topK->value();
  r.top_p = m_topP->value();
  r.tokens = m_tokens->value();
  r.seed = static_cast<uint64_t>(m_seed->value());
  if (m_chat) {
    r.chat = m_chat->isChecked() ? "on" : "off";
    if (m_chat->isChecked()) r.system = m_system->text().toStdString();
    r.stops = parseStops(m_stops->text());
    r.special = m_special->isChecked();
  }
  return r;
}

QString SampleDialog::answer() const { return m_answer->toPlainText(); }

void SampleDialog::generate() {
  if (m_process) return;
  if (m_tokenizer.isEmpty()) {
    static const QRegularExpression ids(QStringLiteral("^[\\s0-9]*$"));
    if (!ids.match(m_prompt->toPlainText()).hasMatch()) {
      m_status->setText(
          tr("This run has no tokenizer: give token ids (numbers separated by spaces), or nothing to start "
             "at token 0."));
      return;
    }
  }
  const runs::SampleRequest r = request();
  QStringList args;
  for (const std::string& a : runs::sample_worker_args(r)) args << QString::fromStdString(a);
  m_settings = tr("temperature %1 · top-k %2 · top-p %3 · max %4 tokens · seed %5")
                   .arg(r.temperature)
                   .arg(r.top_k)
                   .arg(r.top_p)
                   .arg(r.tokens)
                   .arg(r.seed);
  if (m_chat) m_settings += m_chat->isChecked() ? tr(" · chat template") : tr(" · plain text");
  m_askedPrompt = m_prompt->toPlainText();
  m_out.clear();
  m_err.clear();
  m_answer->clear();
  m_status->setText(tr("Generating… (the model loads, then the answer appears as it is generated)"));
  m_generate->setEnabled(false);
  m_stop->setVisible(true);
  m_clock.start();
  m_process = new QProcess(this);
  m_process->setProgram(m_worker);
  m_process->setArguments(args);  // no shell: nothing typed is interpreted
  connect(m_process, &QProcess::readyReadStandardOutput, this, [this] {
    m_out += m_process->readAllStandardOutput();
    showArrived();
  });
  connect(m_process, &QProcess::readyReadStandardError, this,
          [this] { m_err += m_process->readAllStandardError(); });
  connect(m_process, &QProcess::finished, this, [this](int code, QProcess::ExitStatus status) {
    m_out += m_process->readAllStandardOutput();
    m_err += m_process->readAllStandardError();
    showArrived();
    done(status == QProcess::NormalExit && code == 0, lastLine(m_err));
  });
  connect(m_process, &QProcess::errorOccurred, this, [this](QProcess::ProcessError e) {
    if (e == QProcess::FailedToStart)
      done(false, tr("cannot start %1: %2").arg(m_worker, m_process->errorString()));
  });
  m_process->start();
}

void SampleDialog::showArrived() {
  QString text = QString::fromUtf8(m_out);
  if (text.endsWith(QChar::ReplacementCharacter)) text.chop(1);  // a character still arriving
  if (m_answer->toPlainText() != text) m_answer->setPlainText(text);
}

void SampleDialog::done(bool ok, QString reason) {
  QProcess* process = m_process;
  m_process = nullptr;
  if (process) process->deleteLater();
  m_generate->setEnabled(true);
  m_stop->setVisible(false);
  const QString seconds = QString::number(m_clock.elapsed() / 1000.0, 'f', 1);
  QString result = QString::fromUtf8(m_out);
  if (result.endsWith(QLatin1Char('\n'))) result.chop(1);
  m_answer->setPlainText(result);
  if (m_stopping) {  // Stop: what arrived is an answer too
    m_stopping = false;
    ok = true;
    reason = tr("stopped after %1 characters, as asked").arg(result.size());
  }
  if (!ok) {
    const QString why = reason.isEmpty() ? tr("the worker stopped") : reason;
    m_status->setText(tr("Sampling failed: %1").arg(why));
    emit finished(false, why);
    return;
  }
  // "sampled 23 tokens from DIR (step 160); stopped at <|im_end|>" -> "23 tokens from step 160,
  // stopped at <|im_end|> · 0.4 s" (the folder is long and the user chose the run).
  static const QRegularExpression summary(
      QStringLiteral("^sampled (\\d+) tokens from .* \\(step (\\d+)\\); (.*)$"));
  const QRegularExpressionMatch m = summary.match(reason);
  m_status->setText(
      m.hasMatch()
          ? tr("%1 tokens from step %2, %3 · %4 s").arg(m.captured(1), m.captured(2), m.captured(3), seconds)
          : tr("%1 · %2 s").arg(reason, seconds));
  ++m_answers;
  QString entry = tr("#%1 · %2\nPrompt: %3\nAnswer: %4\n")
                      .arg(m_answers)
                      .arg(m_settings, m_askedPrompt.isEmpty() ? tr("(none)") : m_askedPrompt, result);
  m_history->setPlainText(entry + (m_history->toPlainText().isEmpty() ? QString() : QStringLiteral("\n")) +
                          m_history->toPlainText());
  emit finished(true, result);
}

void SampleDialog::stopGenerating() {
  if (!m_process) return;
  m_stopping = true;
  m_process->kill();  // finished() follows and reports it
}

void SampleDialog::copyAnswer() { QApplication::clipboard()->setText(m_answer->toPlainText()); }

}  // namespace flotilla::ui
