// Line edits with their problems under them (see checkedform.h).
#include "ui/common/checkedform.h"

#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QVBoxLayout>

namespace flotilla::ui {

CheckedForm::CheckedForm(QWidget* owner, std::function<void()> changed)
    : m_owner(owner), m_changed(std::move(changed)), m_form(new QFormLayout) {
  m_form->setFieldGrowthPolicy(QFormLayout::ExpandingFieldsGrow);
}

QLabel* CheckedForm::makeProblem(const QString& key) {
  auto* problem = new QLabel(m_owner);
  problem->setObjectName(key + QStringLiteral("Problem"));
  problem->setWordWrap(true);
  QPalette pal = problem->palette();
  pal.setColor(QPalette::WindowText, QColor(0xd0, 0x45, 0x3a));
  problem->setPalette(pal);
  problem->hide();
  return problem;
}

QLineEdit* CheckedForm::addField(const QString& key, const QString& label, const QString& placeholder,
                                 QWidget* extra) {
  auto* edit = new QLineEdit(m_owner);
  edit->setObjectName(key + QStringLiteral("Edit"));
  edit->setPlaceholderText(placeholder);
  QLabel* problem = makeProblem(key);
  auto* column = new QVBoxLayout;
  column->setSpacing(2);
  if (extra) {
    auto* row = new QHBoxLayout;
    row->addWidget(edit, 1);
    row->addWidget(extra);
    column->addLayout(row);
  } else {
    column->addWidget(edit);
  }
  column->addWidget(problem);
  m_form->addRow(label, column);
  m_order << key;
  m_edits.insert(key, edit);
  m_problems.insert(key, problem);
  QObject::connect(edit, &QLineEdit::textEdited, m_owner, [this, key] {
    m_touched.insert(key, true);
    if (m_changed) m_changed();
  });
  return edit;
}

QPlainTextEdit* CheckedForm::addTextField(const QString& key, const QString& label, const QString& placeholder) {
  auto* edit = new QPlainTextEdit(m_owner);
  edit->setObjectName(key + QStringLiteral("Edit"));
  edit->setPlaceholderText(placeholder);
  edit->setTabChangesFocus(true);
  edit->setLineWrapMode(QPlainTextEdit::NoWrap);
  edit->setFixedHeight(edit->fontMetrics().lineSpacing() * 4 + 12);
  QLabel* problem = makeProblem(key);
  auto* column = new QVBoxLayout;
  column->setSpacing(2);
  column->addWidget(edit);
  column->addWidget(problem);
  m_form->addRow(label, column);
  m_order << key;
  m_texts.insert(key, edit);
  m_problems.insert(key, problem);
  QObject::connect(edit, &QPlainTextEdit::textChanged, m_owner, [this, key] {
    if (m_settingInitial) return;
    m_touched.insert(key, true);
    if (m_changed) m_changed();
  });
  return edit;
}

QString CheckedForm::text(const QString& key) const {
  if (const QPlainTextEdit* t = m_texts.value(key)) return t->toPlainText();
  const QLineEdit* e = m_edits.value(key);
  return e ? e->text() : QString();
}

void CheckedForm::setInitialText(const QString& key, const QString& text) {
  m_settingInitial = true;
  if (QLineEdit* e = m_edits.value(key)) e->setText(text);
  if (QPlainTextEdit* t = m_texts.value(key)) t->setPlainText(text);
  m_settingInitial = false;
}

void CheckedForm::setTouchedText(const QString& key, const QString& text) {
  if (QLineEdit* e = m_edits.value(key)) e->setText(text);
  if (QPlainTextEdit* t = m_texts.value(key)) {
    m_settingInitial = true;
    t->setPlainText(text);
    m_settingInitial = false;
  }
  m_touched.insert(key, true);
  if (m_changed) m_changed();
}

int CheckedForm::show(const QHash<QString, QStringList>& problems) {
  int count = 0;
  for (auto it = m_problems.begin(); it != m_problems.end(); ++it) {
    const QStringList list = problems.value(it.key());
    count += static_cast<int>(list.size());
    const bool visible = !list.isEmpty() && (m_showAll || m_touched.value(it.key()));
    it.value()->setText(visible ? list.join(QLatin1Char('\n')) : QString());
    it.value()->setVisible(visible);
  }
  return count;
}

bool CheckedForm::acceptable(const QHash<QString, QStringList>& problems) {
  m_showAll = true;
  if (show(problems) == 0) return true;
  for (const QString& key : std::as_const(m_order))
    if (!problems.value(key).isEmpty()) {
      if (QLineEdit* e = m_edits.value(key)) e->setFocus();
      if (QPlainTextEdit* t = m_texts.value(key)) t->setFocus();
      break;
    }
  return false;
}

}  // namespace flotilla::ui
