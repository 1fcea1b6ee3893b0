// Wizard page base (see pagebase.h).
#include "ui/wizard/pagebase.h"

#include <QFormLayout>
#include <QLabel>
#include <QVBoxLayout>

#include "ui/wizard/configdraft.h"

namespace flotilla::ui {

WizardPageBase::WizardPageBase(ConfigDraft* draft, const QStringList& fieldPrefixes, QWidget* parent)
    : QWizardPage(parent),
      m_draft(draft),
      m_prefixes(fieldPrefixes),
      m_layout(new QVBoxLayout(this)),
      m_problems(new QLabel(this)) {
  m_problems->setObjectName(QStringLiteral("problems"));
  m_problems->setWordWrap(true);
  m_problems->setTextInteractionFlags(Qt::TextSelectableByMouse);
  // Red that reads at 4.5:1 on either theme's window (WCAG AA).
  QPalette pal = m_problems->palette();
  const bool dark = pal.color(QPalette::Window).lightness() < 128;
  pal.setColor(QPalette::WindowText, dark ? QColor(0xff, 0x8a, 0x80) : QColor(0xb7, 0x1c, 0x1c));
  m_problems->setPalette(pal);
  m_problems->hide();
  m_layout->addStretch(1);
  m_layout->addWidget(m_problems);
  connect(m_draft, &ConfigDraft::changed, this, &WizardPageBase::onDraftChanged);
  connect(m_draft, &ConfigDraft::replaced, this, &WizardPageBase::reload);
}

QFormLayout* WizardPageBase::addForm() {
  auto* form = new QFormLayout;
  form->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);
  // Insert before the stretch and the problems label.
  m_layout->insertLayout(m_layout->count() - 2, form);
  return form;
}

void WizardPageBase::addBlock(QWidget* widget, int stretch) {
  m_layout->insertWidget(m_layout->count() - 2, widget, stretch);
  // A block that wants the spare height gets it all: the filler stretch above the problems yields.
  if (stretch > 0) m_layout->setStretch(m_layout->count() - 2, 0);
}

void WizardPageBase::addBlock(QLayout* layout) { m_layout->insertLayout(m_layout->count() - 2, layout); }

void WizardPageBase::initializePage() { reload(); }

void WizardPageBase::reload() {
  m_loading = true;
  load();
  m_loading = false;
  onDraftChanged();
}

void WizardPageBase::recheck() { onDraftChanged(); }

QStringList WizardPageBase::shownProblems() const {
  return m_draft->problemsUnder(m_prefixes) + extraProblems();
}

void WizardPageBase::onDraftChanged() {
  refreshDerived();
  const QStringList problems = shownProblems();
  m_problems->setText(problems.join(QLatin1Char('\n')));
  m_problems->setVisible(!problems.isEmpty());
  const bool complete = problems.isEmpty();
  if (complete != m_complete) {
    m_complete = complete;
    emit completeChanged();
  }
}

bool WizardPageBase::isComplete() const { return m_complete; }

bool WizardPageBase::validatePage() {
  recheck();
  return m_complete;
}

}  // namespace flotilla::ui
