// Line edits with their problems under them (see checkedform.h).
#include "ui/common/checkedform.h"

#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QVBoxLayout>

namespace flotilla::ui {

CheckedForm::CheckedForm(QWidget* owner, std::function<void()> changed)
    : m_owner(owner), m_changed(std::move(changed)), m_form(new QFormLayout) {
  m_form->setFieldGrowthPolicy(QFormLayout::ExpandingFieldsGrow);
}

QLineEdit* CheckedForm::addField(const QString& key, const QString& label, const QString& placeholder,
                                 QWidget* extra) {
  auto* edit = new QLineEdit(m_owner);
  edit->setObjectName(key + QStringLiteral("Edit"));
  edit->setPlaceholderText(placeholder);
  auto* problem = new QLabel(m_owner);
  problem->setObjectName(key + QStringLiteral("Problem"));
  problem->setWordWrap(true);
  QPalette pal = problem->palette();
  pal.setColor(QPalette::WindowText, QColor(0xd0, 0x45, 0x3a));
  problem->setPalette(pal);
  problem->hide();
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

QString CheckedForm::text(const QString& key) const {
  const QLineEdit* e = m_edits.value(key);
  return e ? e->text() : QString();
}

void CheckedForm::setTouchedText(const QString& key, const QString& text) {
  if (QLineEdit* e = m_edits.value(key)) e->setText(text);
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
      m_edits.value(key)->setFocus();
      break;
    }
  return false;
}

}  // namespace flotilla::ui
