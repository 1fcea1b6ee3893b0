// Wizard page base (see pagebase.h).
#include "ui/wizard/pagebase.h"

#include <algorithm>

#include <QAbstractButton>
#include <QFormLayout>
#include <QHash>
#include <QWizard>
#include <QLabel>
#include <QVBoxLayout>

#include "ui/wizard/configdraft.h"

namespace flotilla::ui {
namespace {

bool darkWindow(const QWidget* w) { return w->palette().color(QPalette::Window).lightness() < 128; }

// Red that reads at 4.5:1 on either theme's window (WCAG AA).
void paintAsProblem(QLabel* label) {
  QPalette pal = label->palette();
  pal.setColor(QPalette::WindowText, darkWindow(label) ? QColor(0xff, 0x8a, 0x80) : QColor(0xb7, 0x1c, 0x1c));
  label->setPalette(pal);
}

// Whether `item` (a form row's field) is, holds or lays out `widget`.
bool holds(QLayoutItem* item, const QWidget* widget) {
  if (!item) return false;
  if (QWidget* w = item->widget()) return w == widget || w->isAncestorOf(widget);
  if (QLayout* l = item->layout())
    for (int i = 0; i < l->count(); ++i)
      if (holds(l->itemAt(i), widget)) return true;
  return false;
}

// The engine's "path: message", or the message alone when it starts by naming the key itself
// ("parallel.tp=3 does not divide …", not "parallel.tp: parallel.tp=3 …").
QString problemText(const flotilla::ConfigProblem& p) {
  if (!p.path.empty() && p.message.rfind(p.path + "=", 0) == 0) return QString::fromStdString(p.message);
  return QString::fromStdString(flotilla::to_string(p));
}

bool under(const QString& path, const QString& bound) {
  return path == bound || path.startsWith(bound + QLatin1Char('.'));
}

}  // namespace

WizardPageBase::WizardPageBase(ConfigDraft* draft, const QStringList& fieldPrefixes, QWidget* parent)
    : QWizardPage(parent),
      m_draft(draft),
      m_prefixes(fieldPrefixes),
      m_layout(new QVBoxLayout(this)),
      m_problems(new QLabel(this)) {
  m_problems->setObjectName(QStringLiteral("problems"));
  m_problems->setWordWrap(true);
  m_problems->setTextInteractionFlags(Qt::TextSelectableByMouse);
  paintAsProblem(m_problems);
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

void WizardPageBase::bindField(const QString& path, QWidget* widget) {
  for (QFormLayout* form : findChildren<QFormLayout*>()) {
    for (int row = 0; row < form->rowCount(); ++row) {
      if (!holds(form->itemAt(row, QFormLayout::FieldRole), widget) &&
          !holds(form->itemAt(row, QFormLayout::SpanningRole), widget))
        continue;
      // Widgets of one row (dp, tp and pp) share the message label under it.
      QLabel* message = nullptr;
      for (const Binding& b : m_bindings) {
        int at = -1;
        QFormLayout::ItemRole role;
        if (b.form == form && (form->getWidgetPosition(b.message, &at, &role), at == row + 1)) message = b.message;
      }
      if (!message) {
        message = new QLabel(this);
        message->setObjectName(QStringLiteral("fieldProblem-") + path);
        message->setWordWrap(true);
        message->setTextInteractionFlags(Qt::TextSelectableByMouse);
        paintAsProblem(message);
        form->insertRow(row + 1, QString(), message);
        form->setRowVisible(message, false);
      }
      QString label;
      if (QLayoutItem* l = form->itemAt(row, QFormLayout::LabelRole))
        if (auto* text = qobject_cast<QLabel*>(l->widget())) label = text->text().remove(QLatin1Char('&'));
      if (label.isEmpty())
        if (auto* box = qobject_cast<QAbstractButton*>(widget)) label = box->text().remove(QLatin1Char('&'));
      m_bindings.append({path, widget, widget->toolTip(), message, form, label});
      return;
    }
  }
  qWarning("WizardPageBase::bindField: %s is in none of the page's forms", qPrintable(path));
}

QList<WizardPageBase::FieldProblem> WizardPageBase::allProblems() const {
  QList<FieldProblem> out;
  for (const auto& p : m_draft->problems()) {
    const QString path = QString::fromStdString(p.path);
    if (std::any_of(m_prefixes.begin(), m_prefixes.end(),
                    [&](const QString& prefix) { return prefix.isEmpty() || under(path, prefix); }))
      out.append({path, problemText(p)});
  }
  for (const QString& text : extraProblems()) out.append({QString(), text});
  out += extraFieldProblems();
  return out;
}

QStringList WizardPageBase::shownProblems() const {
  QStringList out;
  for (const FieldProblem& p : allProblems()) out << p.text;
  return out;
}

bool WizardPageBase::ownsPath(const QString& path) const {
  return std::any_of(m_prefixes.begin(), m_prefixes.end(),
                     [&](const QString& prefix) { return !prefix.isEmpty() && under(path, prefix); });
}

QString WizardPageBase::whereToFix(const QStringList& prefixes) const {
  for (const auto& p : m_draft->problems()) {
    const QString path = QString::fromStdString(p.path);
    if (!prefixes.isEmpty() &&
        std::none_of(prefixes.begin(), prefixes.end(), [&](const QString& x) { return under(path, x); }))
      continue;
    const QString text = problemText(p);
    if (ownsPath(path)) {
      const Binding* best = nullptr;
      for (const Binding& b : m_bindings)
        if (under(path, b.path) && b.widget->isVisibleTo(this) && (!best || b.path.size() > best->path.size()))
          best = &b;
      if (best && !best->label.isEmpty()) return tr("fix the problem under “%1”").arg(best->label);
      return tr("fix the problem listed at the foot of this page");
    }
    if (QWizard* w = wizard())
      for (int id : w->pageIds())
        if (auto* page = qobject_cast<WizardPageBase*>(w->page(id)); page && page != this && page->ownsPath(path))
          return tr("fix it on the %1 page: %2").arg(page->title(), text);
    return tr("fix it first: %1").arg(text);
  }
  return {};
}

QString WizardPageBase::problemBeside(const QString& path) const {
  for (const Binding& b : m_bindings)
    if (b.path == path) return b.message->isHidden() ? QString() : b.message->text();
  return {};
}

void WizardPageBase::onDraftChanged() {
  refreshDerived();
  const QList<FieldProblem> problems = allProblems();
  QStringList listed;
  QHash<QLabel*, QStringList> beside;
  QHash<QWidget*, QStringList> atWidget;
  for (const FieldProblem& p : problems) {
    const Binding* best = nullptr;
    if (!p.path.isEmpty())
      for (const Binding& b : m_bindings)
        if (under(p.path, b.path) && b.widget->isVisibleTo(this) &&  // a hidden field's problem is listed
            (!best || b.path.size() > best->path.size()))
          best = &b;
    if (!best) {
      listed << p.text;
      continue;
    }
    if (!beside[best->message].contains(p.text)) beside[best->message] << p.text;
    atWidget[best->widget] << p.text;
  }
  const bool dark = darkWindow(this);
  for (const Binding& b : m_bindings) {
    const QStringList& texts = beside[b.message];
    b.message->setText(texts.join(QLatin1Char('\n')));
    b.form->setRowVisible(b.message, !texts.isEmpty());
    const QStringList& mine = atWidget[b.widget];
    if (mine.isEmpty()) {
      b.widget->setPalette(QPalette());  // back to the window's palette (follows a theme switch)
      b.widget->setToolTip(b.tooltip);
    } else {
      // A tint behind the field's own text colour: both themes keep it readable.
      QPalette tint;
      const QColor bad = dark ? QColor(0x5a, 0x24, 0x24) : QColor(0xfd, 0xe4, 0xe4);
      tint.setColor(QPalette::Base, bad);
      tint.setColor(QPalette::Button, bad);
      b.widget->setPalette(tint);
      b.widget->setToolTip((b.tooltip.isEmpty() ? QString() : b.tooltip + QStringLiteral("\n\n")) +
                           mine.join(QLatin1Char('\n')));
    }
  }
  m_problems->setText(listed.join(QLatin1Char('\n')));
  m_problems->setVisible(!listed.isEmpty());
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
