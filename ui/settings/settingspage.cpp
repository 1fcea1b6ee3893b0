// Settings page (see settingspage.h). Paths are selectable so they can be copied into a terminal.
#include "ui/settings/settingspage.h"

#include <QDesktopServices>
#include <QFormLayout>
#include <QGroupBox>
#include <QLabel>
#include <QPushButton>
#include <QUrl>
#include <QVBoxLayout>

#include "db/workspace.h"
#include "ui/common/pageheader.h"

namespace flotilla::ui {
namespace {

QLabel* valueLabel(const QString& text) {
  auto* label = new QLabel(text);
  label->setTextInteractionFlags(Qt::TextSelectableByMouse);
  label->setWordWrap(true);
  return label;
}

}  // namespace

SettingsPage::SettingsPage(const WorkspaceInfo& workspace, const QString& settingsFile, QWidget* parent)
    : QWidget(parent), m_form(new QFormLayout) {
  auto* header = new PageHeader(
      tr("Settings"),
      tr("Where Flotilla keeps its data. Runs, metrics, nodes and prices live in the workspace database; "
         "only the window layout is kept in your desktop settings. To use another workspace, start "
         "Flotilla with --workspace DIR."),
      this);

  auto* box = new QGroupBox(tr("Workspace"), this);
  m_form->setHorizontalSpacing(24);
  m_form->setVerticalSpacing(8);
  m_form->addRow(tr("Workspace folder"), valueLabel(workspace.directory));
  m_form->addRow(tr("Database file"), valueLabel(workspace.databasePath));
  m_form->addRow(tr("Schema version"), valueLabel(QString::number(workspace.schemaVersion)));
  m_form->addRow(tr("SQLite"), valueLabel(QString::fromStdString(db::sqlite_version())));
  m_form->addRow(tr("Window settings"), valueLabel(settingsFile));

  auto* open = new QPushButton(tr("Open workspace folder"), box);
  open->setObjectName(QStringLiteral("openWorkspaceButton"));
  connect(open, &QPushButton::clicked, this,
          [dir = workspace.directory] { QDesktopServices::openUrl(QUrl::fromLocalFile(dir)); });

  auto* boxLayout = new QVBoxLayout(box);
  boxLayout->setContentsMargins(16, 16, 16, 12);
  boxLayout->addLayout(m_form);
  boxLayout->addSpacing(6);
  boxLayout->addWidget(open, 0, Qt::AlignLeft);

  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(28, 24, 28, 24);
  layout->setSpacing(16);
  layout->addWidget(header);
  layout->addWidget(box);
  layout->addStretch(1);
}

QString SettingsPage::value(const QString& label) const {
  for (int row = 0; row < m_form->rowCount(); ++row) {
    auto* name = qobject_cast<QLabel*>(m_form->itemAt(row, QFormLayout::LabelRole)->widget());
    auto* field = qobject_cast<QLabel*>(m_form->itemAt(row, QFormLayout::FieldRole)->widget());
    if (name && field && name->text() == label) return field->text();
  }
  return QString();
}

}  // namespace flotilla::ui
