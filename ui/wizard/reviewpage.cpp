// Review page (see reviewpage.h).
#include "ui/wizard/reviewpage.h"

#include <QFontDatabase>
#include <QHBoxLayout>
#include <QInputDialog>
#include <QLabel>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QTimer>

#include <exception>

#include "engine/config/config_io.h"
#include "ui/wizard/configdraft.h"
#include "ui/wizard/templates.h"

namespace flotilla::ui {

ReviewPage::ReviewPage(ConfigDraft* configDraft, TemplateStore* templates, QWidget* parent)
    : WizardPageBase(configDraft, {QString()}, parent),
      m_templates(templates),
      m_editor(new QPlainTextEdit(this)),
      m_scriptTitle(new QLabel(this)),
      m_script(new QPlainTextEdit(this)),
      m_save(new QPushButton(tr("Save as template…"), this)),
      m_status(new QLabel(this)),
      m_modelNote(new QLabel(this)),
      m_parseDelay(new QTimer(this)) {
  setTitle(tr("Review"));
  setSubTitle(
      tr("The run's configuration file, exactly as the worker will read it. Edit it here if you like: "
         "it is checked as you type."));
  m_editor->setObjectName(QStringLiteral("tomlEditor"));
  m_editor->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
  m_editor->setLineWrapMode(QPlainTextEdit::NoWrap);
  m_scriptTitle->setObjectName(QStringLiteral("batchScriptTitle"));
  m_scriptTitle->setWordWrap(true);
  m_script->setObjectName(QStringLiteral("batchScript"));
  m_script->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
  m_script->setLineWrapMode(QPlainTextEdit::NoWrap);
  m_script->setReadOnly(true);
  m_save->setObjectName(QStringLiteral("saveTemplateButton"));
  m_status->setObjectName(QStringLiteral("reviewStatus"));
  m_status->setWordWrap(true);
  m_modelNote->setObjectName(QStringLiteral("reviewModel"));
  m_modelNote->setWordWrap(true);
  m_modelNote->setTextInteractionFlags(Qt::TextSelectableByMouse);
  m_modelNote->hide();
  addBlock(m_modelNote);
  addBlock(m_editor, 2);
  addBlock(m_scriptTitle);
  addBlock(m_script, 1);
  auto* row = new QHBoxLayout;
  row->addWidget(m_status, 1);
  row->addWidget(m_save);
  addBlock(row);

  m_parseDelay->setSingleShot(true);
  m_parseDelay->setInterval(300);
  connect(m_parseDelay, &QTimer::timeout, this, &ReviewPage::applyText);
  connect(m_editor, &QPlainTextEdit::textChanged, this, [this] {
    if (!loading()) m_parseDelay->start();
  });
  connect(m_save, &QPushButton::clicked, this, [this] {
    bool ok = false;
    const QString name =
        QInputDialog::getText(this, tr("Save as template"), tr("Template name:"), QLineEdit::Normal,
                              QString::fromStdString(this->draft()->config().run.name), &ok);
    if (ok) saveTemplate(name.trimmed());
  });
}

void ReviewPage::load() {
  if (m_applying) return;  // the draft came from this text: keep the user's cursor and layout
  m_parseError.clear();
  m_editor->setPlainText(QString::fromStdString(flotilla::config_to_toml(draft()->config())));
}

void ReviewPage::refreshDerived() {
  m_status->setText(shownProblems().isEmpty() ? tr("Valid: ready to launch.")
                                              : tr("Not valid yet: see the problems below."));
  const StoredCluster* cluster = draft()->targetCluster();
  m_scriptTitle->setVisible(cluster);
  m_script->setVisible(cluster);
  if (!cluster) return;
  const runs::SlurmPreview preview = draft()->slurmPreview();
  const QString name = QString::fromStdString(cluster->record.name);
  m_scriptTitle->setText(
      preview.script.empty()
          ? tr("The batch script for cluster %1 appears here once the Slurm choices on the Hardware page are "
               "valid.")
                .arg(name)
          : tr("The batch script submitted to cluster %1 with sbatch (%2 node(s) × %3 task(s)%4):")
                .arg(name)
                .arg(draft()->clusterLaunch().nodes)
                .arg(preview.tasks_per_node)
                .arg(preview.price.usd_per_hour > 0
                         ? tr(", $%1/h").arg(preview.price.usd_per_hour, 0, 'f', 2)
                         : tr(", unpriced")));
  const QString text = QString::fromStdString(preview.script);
  if (m_script->toPlainText() != text) m_script->setPlainText(text);
}

void ReviewPage::applyText() {
  m_parseDelay->stop();
  try {
    const RunConfig parsed = flotilla::parse_config_toml(m_editor->toPlainText().toStdString(), "review");
    m_parseError.clear();
    m_applying = true;
    draft()->replace(parsed);
    m_applying = false;
  } catch (const std::exception& e) {
    m_parseError = QString::fromUtf8(e.what());
    recheck();
  }
}

QStringList ReviewPage::extraProblems() const {
  QStringList out;
  if (!m_parseError.isEmpty()) out << m_parseError;
  if (!m_modelBlocker.isEmpty()) out << m_modelBlocker;
  return out;
}

void ReviewPage::setModelState(const QString& note, const QString& blocker) {
  m_modelNote->setText(note);
  m_modelNote->setVisible(!note.isEmpty());
  if (blocker == m_modelBlocker) return;
  m_modelBlocker = blocker;
  recheck();
}

QString ReviewPage::modelNote() const { return m_modelNote->text(); }

bool ReviewPage::validatePage() {
  if (m_parseDelay->isActive()) applyText();
  return WizardPageBase::validatePage();
}

bool ReviewPage::saveTemplate(const QString& name) {
  if (m_parseDelay->isActive()) applyText();
  QString error;
  if (!m_parseError.isEmpty())
    error = tr("Fix the file first: %1").arg(m_parseError);
  else if (!m_templates->save(name, draft()->config(), &error)) {
  } else {
    m_status->setText(tr("Saved as template \"%1\" in %2.").arg(name, m_templates->directory()));
    emit templateSaved(name);
    return true;
  }
  m_status->setText(error);
  return false;
}

QString ReviewPage::statusText() const { return m_status->text(); }

}  // namespace flotilla::ui
