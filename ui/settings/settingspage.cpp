// Settings page (see settingspage.h). Paths are selectable so they can be copied into a terminal.
#include "ui/settings/settingspage.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDesktopServices>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QFutureWatcher>
#include <QGridLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QScrollArea>
#include <QUrl>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>

#include <exception>
#include <optional>

#include "db/workspace.h"
#include "ui/common/pageheader.h"
#include "ui/main/runnotifier.h"

namespace flotilla::ui {
namespace {

QLabel* valueLabel(const QString& text) {
  auto* label = new QLabel(text);
  label->setTextInteractionFlags(Qt::TextSelectableByMouse);
  return label;
}

QFormLayout* newForm() {
  auto* form = new QFormLayout;
  form->setHorizontalSpacing(24);
  form->setVerticalSpacing(8);
  form->setFieldGrowthPolicy(QFormLayout::ExpandingFieldsGrow);
  return form;
}

QDoubleSpinBox* spin(double max, int decimals, const QString& suffix, const QString& prefix = QString()) {
  auto* s = new QDoubleSpinBox;
  s->setRange(0, max);
  s->setDecimals(decimals);
  s->setSuffix(suffix);
  s->setPrefix(prefix);
  s->setMinimumWidth(140);
  return s;
}

}  // namespace

SettingsPage::SettingsPage(const WorkspaceInfo& workspace, const QString& settingsFile, QWidget* parent)
    : QWidget(parent), m_databasePath(workspace.databasePath), m_prefs(Preferences::load()) {
  if (m_prefs.theme != Preferences::Theme::System) applyTheme(m_prefs.theme);
  auto* header = new PageHeader(
      tr("Settings"),
      tr("Where Flotilla keeps its data, what this machine costs, and how numbers and colours are shown. "
         "Runs, metrics and prices live in the workspace database; display preferences live in your "
         "desktop settings."),
      this);

  auto* content = new QWidget;
  auto* grid = new QGridLayout(content);
  grid->setContentsMargins(0, 0, 8, 0);
  grid->setHorizontalSpacing(16);
  grid->setVerticalSpacing(16);
  grid->addWidget(buildWorkspaceBox(workspace, settingsFile), 0, 0, 1, 2);
  grid->addWidget(buildPricingBox(), 1, 0);
  grid->addWidget(buildDisplayBox(), 1, 1);
  grid->setRowStretch(2, 1);
  grid->setColumnStretch(0, 1);
  grid->setColumnStretch(1, 1);

  auto* scroll = new QScrollArea(this);
  scroll->setWidget(content);
  scroll->setWidgetResizable(true);
  scroll->setFrameShape(QFrame::NoFrame);

  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(28, 24, 28, 24);
  layout->setSpacing(16);
  layout->addWidget(header);
  layout->addWidget(scroll, 1);
  loadPricing();
}

QWidget* SettingsPage::buildWorkspaceBox(const WorkspaceInfo& workspace, const QString& settingsFile) {
  auto* box = new QGroupBox(tr("Workspace"));
  m_form = newForm();
  m_form->addRow(tr("Workspace folder"), valueLabel(workspace.directory));
  m_form->addRow(tr("Database file"), valueLabel(workspace.databasePath));
  m_form->addRow(tr("Schema version"), valueLabel(QString::number(workspace.schemaVersion)));
  m_form->addRow(tr("SQLite"), valueLabel(QString::fromStdString(db::sqlite_version())));
  m_form->addRow(tr("Window settings"), valueLabel(settingsFile));

  m_nextWorkspace = new QLineEdit(m_prefs.workspaceDir, box);
  m_nextWorkspace->setObjectName(QStringLiteral("nextWorkspaceEdit"));
  m_nextWorkspace->setPlaceholderText(QString::fromStdString(db::default_workspace_dir()));
  m_nextWorkspace->setClearButtonEnabled(true);
  auto* browse = new QPushButton(tr("Choose…"), box);
  connect(browse, &QPushButton::clicked, this, [this] {
    const QString dir =
        QFileDialog::getExistingDirectory(this, tr("Workspace for the next start"), m_nextWorkspace->text());
    if (!dir.isEmpty()) {
      m_nextWorkspace->setText(dir);
      storePreferences();
    }
  });
  connect(m_nextWorkspace, &QLineEdit::editingFinished, this, &SettingsPage::storePreferences);
  auto* row = new QHBoxLayout;
  row->addWidget(m_nextWorkspace, 1);
  row->addWidget(browse);
  m_form->addRow(tr("Open at next start"), row);
  auto* note =
      new QLabel(tr("Takes effect at the next start (--workspace DIR still wins); empty: the default."), box);
  note->setForegroundRole(QPalette::PlaceholderText);
  m_form->addRow(QString(), note);

  auto* open = new QPushButton(tr("Open workspace folder"), box);
  open->setObjectName(QStringLiteral("openWorkspaceButton"));
  connect(open, &QPushButton::clicked, this,
          [dir = workspace.directory] { QDesktopServices::openUrl(QUrl::fromLocalFile(dir)); });
  auto* boxLayout = new QVBoxLayout(box);
  boxLayout->setContentsMargins(16, 16, 16, 12);
  boxLayout->addLayout(m_form);
  boxLayout->addSpacing(6);
  boxLayout->addWidget(open, 0, Qt::AlignLeft);
  return box;
}

QWidget* SettingsPage::buildPricingBox() {
  auto* box = new QGroupBox(tr("This machine's price"));
  auto* form = newForm();
  m_pricingKind = new QComboBox(box);
  m_pricingKind->setObjectName(QStringLiteral("pricingKind"));
  m_pricingKind->addItem(tr("Free (no price)"));
  m_pricingKind->addItem(tr("Flat rate per hour"));
  m_pricingKind->addItem(tr("Power × electricity tariff"));
  m_flat = spin(100000, 3, tr(" /h"), QStringLiteral("$"));
  m_power = spin(100000, 0, tr(" W"));
  m_tariff = spin(100, 3, tr(" /kWh"), QStringLiteral("$"));
  form->addRow(tr("Price source"), m_pricingKind);
  form->addRow(tr("Rate"), m_flat);
  form->addRow(tr("Average power"), m_power);
  form->addRow(tr("Tariff"), m_tariff);
  auto* apply = new QPushButton(tr("Apply to the workspace"), box);
  apply->setObjectName(QStringLiteral("applyPricingButton"));
  m_pricingStatus = new QLabel(tr("Reading the workspace…"), box);
  m_pricingStatus->setWordWrap(true);
  connect(apply, &QPushButton::clicked, this, &SettingsPage::applyPricing);
  connect(m_pricingKind, &QComboBox::currentIndexChanged, this, &SettingsPage::updatePricingControls);
  auto* text = new QLabel(tr("Runs on this machine accrue cost at this rate from their next start. "
                             "Cloud nodes are priced from the catalogue on the Costs page."),
                          box);
  text->setWordWrap(true);
  auto* l = new QVBoxLayout(box);
  l->setContentsMargins(16, 16, 16, 12);
  l->addWidget(text);
  l->addLayout(form);
  l->addWidget(apply, 0, Qt::AlignLeft);
  l->addWidget(m_pricingStatus);
  l->addStretch(1);
  updatePricingControls();
  return box;
}

QWidget* SettingsPage::buildDisplayBox() {
  auto* box = new QGroupBox(tr("Display"));
  auto* form = newForm();
  m_tokens = new QComboBox(box);
  m_tokens->setObjectName(QStringLiteral("tokenUnit"));
  m_tokens->addItems({tr("Thousands (k)"), tr("Millions (M)")});
  m_tokens->setCurrentIndex(static_cast<int>(m_prefs.tokens));
  m_time = new QComboBox(box);
  m_time->setObjectName(QStringLiteral("timeUnit"));
  m_time->addItems({tr("Seconds"), tr("Hours")});
  m_time->setCurrentIndex(static_cast<int>(m_prefs.time));
  auto* currency = new QLabel(tr("US dollars ($)"), box);
  m_theme = new QComboBox(box);
  m_theme->setObjectName(QStringLiteral("theme"));
  for (auto t : {Preferences::Theme::System, Preferences::Theme::Light, Preferences::Theme::Dark})
    m_theme->addItem(themeName(t));
  m_theme->setCurrentIndex(static_cast<int>(m_prefs.theme));
  form->addRow(tr("Tokens"), m_tokens);
  form->addRow(tr("Time"), m_time);
  form->addRow(tr("Currency"), currency);
  form->addRow(tr("Theme"), m_theme);
  m_notify = new QCheckBox(tr("On the desktop"), box);
  m_notify->setToolTip(
      tr("A desktop notification when a run finishes, fails, is stopped by its budget or a preemption, "
         "stalls, or nears its budget (the status bar says it too)"));
  m_notify->setObjectName(QStringLiteral("notifyDesktop"));
  m_notify->setChecked(m_prefs.notifyDesktop);
  form->addRow(tr("Notifications"), m_notify);
  auto* webhook = new QLabel(RunNotifier::webhookDescription(), box);
  webhook->setObjectName(QStringLiteral("webhookStatus"));
  webhook->setTextInteractionFlags(Qt::TextSelectableByMouse);
  webhook->setToolTip(RunNotifier::webhookHelp());
  form->addRow(tr("Webhook"), webhook);
  connect(m_notify, &QCheckBox::toggled, this, &SettingsPage::storePreferences);
  for (QComboBox* c : {m_tokens, m_time, m_theme})
    connect(c, &QComboBox::currentIndexChanged, this, &SettingsPage::storePreferences);
  m_prefsError = new QLabel(box);
  m_prefsError->setObjectName(QStringLiteral("preferencesError"));
  m_prefsError->setWordWrap(true);
  m_prefsError->setVisible(false);
  auto* l = new QVBoxLayout(box);
  l->setContentsMargins(16, 16, 16, 12);
  l->addLayout(form);
  l->addWidget(m_prefsError);
  l->addStretch(1);
  return box;
}

QString SettingsPage::preferencesError() const { return m_prefsError->isHidden() ? QString() : m_prefsError->text(); }

void SettingsPage::storePreferences() {
  const Preferences::Theme before = m_prefs.theme;
  m_prefs.workspaceDir = m_nextWorkspace->text().trimmed();
  m_prefs.tokens = static_cast<Preferences::TokenUnit>(m_tokens->currentIndex());
  m_prefs.time = static_cast<Preferences::TimeUnit>(m_time->currentIndex());
  m_prefs.theme = static_cast<Preferences::Theme>(m_theme->currentIndex());
  m_prefs.notifyDesktop = m_notify->isChecked();
  const QString error = m_prefs.save();
  m_prefsError->setText(error);
  m_prefsError->setVisible(!error.isEmpty());
  if (m_prefs.theme != before) applyTheme(m_prefs.theme);
  emit preferencesChanged(m_prefs);
}

void SettingsPage::updatePricingControls() {
  const auto kind = static_cast<LocalPricing::Kind>(m_pricingKind->currentIndex());
  m_flat->setEnabled(kind == LocalPricing::Kind::Flat);
  m_power->setEnabled(kind == LocalPricing::Kind::Power);
  m_tariff->setEnabled(kind == LocalPricing::Kind::Power);
}

void SettingsPage::showPricing(const LocalPricing& p) {
  m_pricingKind->setCurrentIndex(static_cast<int>(p.kind));
  if (p.kind == LocalPricing::Kind::Flat) m_flat->setValue(p.usdPerHour);
  if (p.kind == LocalPricing::Kind::Power) {
    m_power->setValue(p.powerW);
    m_tariff->setValue(p.tariffUsdPerKwh);
  }
  m_pricingStatus->setText(tr("In the workspace now: %1").arg(p.describe()));
}

QString SettingsPage::pricingStatus() const { return m_pricingStatus->text(); }

void SettingsPage::loadPricing() {
  struct Result {
    std::optional<LocalPricing> pricing;
    QString error;
  };
  auto* watcher = new QFutureWatcher<Result>(this);
  connect(watcher, &QFutureWatcher<Result>::finished, this, [this, watcher] {
    const Result r = watcher->result();
    watcher->deleteLater();
    if (r.pricing)
      showPricing(*r.pricing);
    else
      m_pricingStatus->setText(tr("Could not read the price: %1").arg(r.error));
    emit pricingLoaded();
  });
  watcher->setFuture(QtConcurrent::run([path = m_databasePath]() -> Result {
    try {
      return {LocalPricing::load(path), {}};
    } catch (const std::exception& e) {
      return {std::nullopt, QString::fromStdString(e.what())};
    }
  }));
}

void SettingsPage::applyPricing() {
  LocalPricing p;
  p.kind = static_cast<LocalPricing::Kind>(m_pricingKind->currentIndex());
  p.usdPerHour = m_flat->value();
  p.powerW = m_power->value();
  p.tariffUsdPerKwh = m_tariff->value();
  m_pricingStatus->setText(tr("Saving…"));
  auto* watcher = new QFutureWatcher<QString>(this);
  connect(watcher, &QFutureWatcher<QString>::finished, this, [this, watcher, p] {
    const QString error = watcher->result();
    watcher->deleteLater();
    if (error.isEmpty())
      m_pricingStatus->setText(tr("In the workspace now: %1").arg(p.describe()));
    else
      m_pricingStatus->setText(tr("Not saved: %1").arg(error));
    emit pricingSaved(error.isEmpty());
  });
  watcher->setFuture(QtConcurrent::run([path = m_databasePath, p]() -> QString {
    try {
      p.save(path);
      return {};
    } catch (const std::exception& e) {
      return QString::fromStdString(e.what());
    }
  }));
}

QString SettingsPage::value(const QString& label) const {
  for (int row = 0; row < m_form->rowCount(); ++row) {
    QLayoutItem* nameItem = m_form->itemAt(row, QFormLayout::LabelRole);
    QLayoutItem* fieldItem = m_form->itemAt(row, QFormLayout::FieldRole);
    auto* name = nameItem ? qobject_cast<QLabel*>(nameItem->widget()) : nullptr;
    auto* field = fieldItem ? qobject_cast<QLabel*>(fieldItem->widget()) : nullptr;
    if (name && field && name->text() == label) return field->text();
  }
  return QString();
}

}  // namespace flotilla::ui
