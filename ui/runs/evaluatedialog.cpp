// The Evaluate dialog (see evaluatedialog.h).
#include "ui/runs/evaluatedialog.h"

#include <QComboBox>
#include <QDialogButtonBox>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QProcess>
#include <QPushButton>
#include <QSpinBox>
#include <QTableWidget>
#include <QVBoxLayout>

#include "engine/core/error.h"

namespace flotilla::ui {
namespace {

// The worker's last stderr line (its progress, or why it stopped).
QString lastLine(const QByteArray& err) {
  const QStringList lines = QString::fromUtf8(err).split(QLatin1Char('\n'), Qt::SkipEmptyParts);
  return lines.isEmpty() ? QString() : lines.last().trimmed();
}

// A score as a person reads it: counts whole, fractions with four digits.
QString scoreText(const std::string& name, double v) {
  if (name == "n" || name == "tokens" || name == "bytes") return QString::number(v, 'f', 0);
  return QString::number(v, 'f', 4);
}

// A browse button beside a line edit.
QWidget* withBrowse(QLineEdit* edit, QWidget* parent, const QString& title) {
  auto* row = new QWidget(parent);
  auto* h = new QHBoxLayout(row);
  h->setContentsMargins(0, 0, 0, 0);
  h->addWidget(edit, 1);
  auto* browse = new QPushButton(QObject::tr("Browse…"), row);
  h->addWidget(browse);
  QObject::connect(browse, &QPushButton::clicked, edit, [edit, parent, title] {
    const QString path = QFileDialog::getOpenFileName(parent, title, edit->text());
    if (!path.isEmpty()) edit->setText(path);
  });
  return row;
}

}  // namespace

EvaluateDialog::EvaluateDialog(const QString& runName, const QString& worker,
                               const QList<CheckpointChoice>& checkpoints, QWidget* parent)
    : QDialog(parent),
      m_worker(worker),
      m_choices(checkpoints),
      m_checkpoint(new QComboBox(this)),
      m_task(new QLineEdit(this)),
      m_kind(new QComboBox(this)),
      m_fewshot(new QSpinBox(this)),
      m_dev(new QLineEdit(this)),
      m_limit(new QSpinBox(this)),
      m_evaluate(new QPushButton(tr("Evaluate"), this)),
      m_stop(new QPushButton(tr("Stop"), this)),
      m_scores(new QTableWidget(0, 2, this)),
      m_status(new QLabel(this)) {
  setObjectName(QStringLiteral("evaluateDialog"));
  setWindowTitle(tr("Evaluate %1").arg(runName));
  auto* layout = new QVBoxLayout(this);
  auto* about = new QLabel(
      tr("Score a checkpoint on a task file: multiple choice (JSONL with context, choices and answer: "
         "acc and acc_norm as lm-evaluation-harness computes them), perplexity and bits per byte on a "
         "text file, or exact match on generated answers (JSONL with question and answer). The scores "
         "are stored as the run's metrics at the checkpoint's step: Compare plots them against tokens, "
         "hours or dollars. Task file formats: docs/eval.md."),
      this);
  about->setObjectName(QStringLiteral("evaluateAbout"));
  about->setWordWrap(true);
  layout->addWidget(about);

  auto* form = new QFormLayout;
  m_checkpoint->setObjectName(QStringLiteral("evalCheckpoint"));
  for (const CheckpointChoice& c : m_choices) m_checkpoint->addItem(c.label, c.step);
  form->addRow(tr("Checkpoint"), m_checkpoint);
  m_task->setObjectName(QStringLiteral("evalTask"));
  m_task->setPlaceholderText(tr("a .jsonl or text file on this computer"));
  form->addRow(tr("Task file"), withBrowse(m_task, this, tr("Task file")));
  m_kind->setObjectName(QStringLiteral("evalKind"));
  m_kind->addItem(tr("From the file"), QString());
  m_kind->addItem(tr("Multiple choice"), QStringLiteral("multiple_choice"));
  m_kind->addItem(tr("Perplexity"), QStringLiteral("perplexity"));
  m_kind->addItem(tr("Generation, exact match"), QStringLiteral("generate"));
  m_kind->setToolTip(
      tr("From the file: JSONL with \"choices\" is multiple choice, with \"question\" and "
         "\"answer\" generation, any other text perplexity"));
  form->addRow(tr("Kind"), m_kind);
  m_fewshot->setObjectName(QStringLiteral("evalFewshot"));
  m_fewshot->setRange(0, 64);
  m_fewshot->setSpecialValueText(tr("none (zero-shot)"));
  m_fewshot->setToolTip(tr("Examples from the dev file put before each question"));
  m_dev->setObjectName(QStringLiteral("evalDev"));
  m_dev->setPlaceholderText(tr("the few-shot examples: a file of the same format"));
  auto* shots = new QHBoxLayout;
  shots->addWidget(m_fewshot);
  shots->addWidget(withBrowse(m_dev, this, tr("Few-shot examples")), 1);
  form->addRow(tr("Few-shot"), shots);
  m_limit->setObjectName(QStringLiteral("evalLimit"));
  m_limit->setRange(0, 100000000);
  m_limit->setSpecialValueText(tr("all"));
  m_limit->setToolTip(tr("Only the first N examples (perplexity: windows) of the file"));
  form->addRow(tr("Limit"), m_limit);
  layout->addLayout(form);

  auto* buttons = new QHBoxLayout;
  m_evaluate->setObjectName(QStringLiteral("evaluate"));
  m_evaluate->setDefault(true);
  m_evaluate->setEnabled(!m_choices.isEmpty());
  m_stop->setObjectName(QStringLiteral("stopEvaluating"));
  m_stop->setVisible(false);
  buttons->addWidget(m_evaluate);
  buttons->addWidget(m_stop);
  buttons->addStretch();
  layout->addLayout(buttons);

  m_status->setObjectName(QStringLiteral("evalStatus"));
  m_status->setWordWrap(true);
  m_status->setMinimumHeight(m_status->fontMetrics().lineSpacing() * 2 + 4);
  m_status->setTextInteractionFlags(Qt::TextSelectableByMouse);
  if (m_choices.isEmpty()) m_status->setText(tr("This run has no checkpoint to evaluate yet."));
  layout->addWidget(m_status);
  m_scores->setObjectName(QStringLiteral("evalScores"));
  m_scores->setHorizontalHeaderLabels({tr("Score"), tr("Value")});
  m_scores->verticalHeader()->hide();
  m_scores->horizontalHeader()->setStretchLastSection(true);
  m_scores->setEditTriggers(QAbstractItemView::NoEditTriggers);
  m_scores->setAlternatingRowColors(true);
  layout->addWidget(m_scores, 1);
  auto* close = new QDialogButtonBox(QDialogButtonBox::Close, this);
  connect(close, &QDialogButtonBox::rejected, this, &QDialog::reject);
  layout->addWidget(close);

  connect(m_evaluate, &QPushButton::clicked, this, &EvaluateDialog::evaluate);
  connect(m_stop, &QPushButton::clicked, this, &EvaluateDialog::stopEvaluating);
  resize(620, 560);
}

EvaluateDialog::~EvaluateDialog() {
  if (m_process) {
    m_process->disconnect(this);
    m_process->kill();
    m_process->waitForFinished(2000);
  }
}

runs::EvalRequest EvaluateDialog::request() const {
  runs::EvalRequest r;
  r.task = m_task->text().trimmed().toStdString();
  r.kind = m_kind->currentData().toString().toStdString();
  r.fewshot = m_fewshot->value();
  r.dev = r.fewshot > 0 ? m_dev->text().trimmed().toStdString() : std::string();
  r.limit = m_limit->value();
  r.tokenizer = m_tokenizer.toStdString();
  return r;
}

void EvaluateDialog::evaluate() {
  if (m_process || m_choices.isEmpty()) return;
  const QString task = m_task->text().trimmed();
  if (task.isEmpty() || !QFileInfo(task).isFile()) {
    m_status->setText(task.isEmpty() ? tr("Choose a task file.") : tr("No such file: %1").arg(task));
    return;
  }
  if (m_fewshot->value() > 0 && !QFileInfo(m_dev->text().trimmed()).isFile()) {
    m_status->setText(tr("Few-shot examples need a dev file (a file of the same format as the task)."));
    return;
  }
  const int at = std::max(0, m_checkpoint->currentIndex());
  const CheckpointChoice choice = m_choices.value(at);
  m_evaluate->setEnabled(false);
  m_status->setText(tr("Finding the checkpoint at step %1…").arg(choice.step));
  const auto go = [this, step = choice.step](const QString& dir) {
    if (dir.isEmpty()) {
      done(false, tr("the checkpoint could not be had here"));
      return;
    }
    start(dir, step);
  };
  if (resolveCheckpoint)
    resolveCheckpoint(choice.step, choice.dir, go);
  else
    go(choice.dir);
}

void EvaluateDialog::start(const QString& dir, qint64 step) {
  runs::EvalRequest r = request();
  r.checkpoint = dir.toStdString();
  QStringList args;
  for (const std::string& a : runs::eval_worker_args(r)) args << QString::fromStdString(a);
  m_out.clear();
  m_err.clear();
  m_outcome.reset();
  m_stored.clear();
  m_storedStep = -1;
  m_scores->setRowCount(0);
  m_status->setText(tr("Evaluating step %1… (the model loads, then the examples are scored)").arg(step));
  m_stop->setVisible(true);
  m_clock.start();
  m_process = new QProcess(this);
  m_process->setProgram(m_worker);
  m_process->setArguments(args);  // no shell: nothing typed is interpreted
  connect(m_process, &QProcess::readyReadStandardOutput, this,
          [this] { m_out += m_process->readAllStandardOutput(); });
  connect(m_process, &QProcess::readyReadStandardError, this, [this] {
    m_err += m_process->readAllStandardError();
    const QString line = lastLine(m_err);
    if (!line.isEmpty()) m_status->setText(line);  // the worker's progress
  });
  connect(m_process, &QProcess::finished, this, [this, step](int code, QProcess::ExitStatus status) {
    m_out += m_process->readAllStandardOutput();
    m_err += m_process->readAllStandardError();
    if (m_stopping) {
      m_stopping = false;
      done(false, tr("stopped, as asked: nothing was stored"));
      return;
    }
    if (status != QProcess::NormalExit || code != 0) {
      const QString why = lastLine(m_err);
      done(false, why.isEmpty() ? tr("the worker stopped (exit %1)").arg(code) : why);
      return;
    }
    runs::EvalOutcome outcome;
    try {
      outcome = runs::parse_eval_json(m_out.toStdString());
    } catch (const flotilla::Error& e) {
      done(false, QString::fromUtf8(e.what()));
      return;
    }
    m_outcome = outcome;
    showScores(outcome);
    // The checkpoint's own step, as the worker read it (the choice's step when it says none).
    const qint64 at = outcome.step >= 0 ? outcome.step : step;
    QString error;
    QStringList names;
    if (store) error = store(at, outcome, &names);
    if (!error.isEmpty()) {
      done(false, tr("scored, but not stored: %1").arg(error));
      return;
    }
    m_storedStep = at;
    m_stored = names;
    const QString seconds = QString::number(m_clock.elapsed() / 1000.0, 'f', 1);
    const QString head = tr("%1 (%2) at step %3 · %4 examples/s · %5 s")
                             .arg(QString::fromStdString(outcome.task), QString::fromStdString(outcome.kind))
                             .arg(at)
                             .arg(outcome.examples_per_s, 0, 'f', 1)
                             .arg(seconds);
    done(true, store ? head + QLatin1Char('\n') +
                           tr("Stored as the run's metrics task/%1/<score> at step %2: Compare plots them.")
                               .arg(QString::fromStdString(outcome.task))
                               .arg(at)
                     : head);
  });
  connect(m_process, &QProcess::errorOccurred, this, [this](QProcess::ProcessError e) {
    if (e == QProcess::FailedToStart)
      done(false, tr("cannot start %1: %2").arg(m_worker, m_process->errorString()));
  });
  m_process->start();
}

void EvaluateDialog::showScores(const runs::EvalOutcome& outcome) {
  m_scores->setRowCount(static_cast<int>(outcome.scores.size()));
  std::vector<std::string> metrics;
  for (const auto& kv : outcome.scores) metrics.push_back("task/" + outcome.task + "/" + kv.first);
  std::string headline = runs::headline_task_metric(metrics);
  headline = headline.substr(headline.rfind('/') + 1);
  int row = 0;
  for (const auto& [name, value] : outcome.scores) {
    auto* key = new QTableWidgetItem(QString::fromStdString(name));
    auto* val = new QTableWidgetItem(scoreText(name, value));
    if (name == headline) {  // the score the task is judged by
      QFont bold = key->font();
      bold.setBold(true);
      key->setFont(bold);
      val->setFont(bold);
    }
    val->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
    m_scores->setItem(row, 0, key);
    m_scores->setItem(row, 1, val);
    ++row;
  }
  m_scores->resizeColumnToContents(0);
}

void EvaluateDialog::done(bool ok, const QString& text) {
  QProcess* process = m_process;
  m_process = nullptr;
  if (process) process->deleteLater();
  m_evaluate->setEnabled(!m_choices.isEmpty());
  m_stop->setVisible(false);
  m_status->setText(ok ? text : tr("Evaluation failed: %1").arg(text));
  emit finished(ok, text);
}

void EvaluateDialog::stopEvaluating() {
  if (!m_process) return;
  m_stopping = true;
  m_process->kill();  // finished() follows and reports it
}

}  // namespace flotilla::ui
