// Budget page (see budgetpage.h).
#include "ui/wizard/budgetpage.h"

#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QLabel>
#include <QLineEdit>
#include <QSignalBlocker>

#include <cmath>

#include "ui/wizard/configdraft.h"
#include "ui/wizard/wizardformat.h"

namespace flotilla::ui {

BudgetPage::BudgetPage(ConfigDraft* configDraft, QWidget* parent)
    : WizardPageBase(configDraft, {QStringLiteral("budget")}, parent),
      m_source(new QComboBox(this)),
      m_price(new QDoubleSpinBox(this)),
      m_catalogue(new QComboBox(this)),
      m_maxUsd(new QDoubleSpinBox(this)),
      m_warn(new QDoubleSpinBox(this)),
      m_maxHours(new QDoubleSpinBox(this)),
      m_estimate(new QLabel(this)) {
  setTitle(tr("Budget"));
  setSubTitle(
      tr("What an hour of this hardware costs, and where the run must stop. The run checkpoints and "
         "stops itself at a limit."));
  m_source->setObjectName(QStringLiteral("priceSource"));
  m_price->setObjectName(QStringLiteral("usdPerHour"));
  m_catalogue->setObjectName(QStringLiteral("catalogueEntry"));
  m_maxUsd->setObjectName(QStringLiteral("maxUsd"));
  m_maxHours->setObjectName(QStringLiteral("maxHours"));
  m_estimate->setObjectName(QStringLiteral("estimate"));
  m_estimate->setWordWrap(true);
  m_source->addItem(tr("No price (hardware you already own)"));
  m_source->addItem(tr("A price per hour for the whole run's hardware"));
  m_source->addItem(tr("A pricing catalogue entry"));
  m_price->setRange(-1, 100000);
  m_price->setDecimals(2);
  m_price->setPrefix(QStringLiteral("$"));
  m_price->setSuffix(tr(" per hour"));
  m_catalogue->setToolTip(
      tr("An entry of the pricing catalogue (Costs page) or a priced node; its price per hour "
         "is shown"));
  m_maxUsd->setRange(-1, 10'000'000);
  m_maxUsd->setDecimals(2);
  m_maxUsd->setPrefix(QStringLiteral("$"));
  m_maxUsd->setSpecialValueText(tr("no limit"));
  m_warn->setRange(0, 1);
  m_warn->setDecimals(2);
  m_warn->setSingleStep(0.05);
  m_maxHours->setRange(0, 100000);
  m_maxHours->setDecimals(1);
  m_maxHours->setSuffix(tr(" h"));
  m_maxHours->setSpecialValueText(tr("no limit"));
  QFont bold = m_estimate->font();
  bold.setBold(true);
  m_estimate->setFont(bold);

  QFormLayout* form = addForm();
  form->addRow(tr("Price source"), m_source);
  form->addRow(tr("Price"), m_price);
  form->addRow(tr("Catalogue entry"), m_catalogue);
  form->addRow(tr("Stop at a spend of"), m_maxUsd);
  form->addRow(tr("Warn at (fraction of it)"), m_warn);
  form->addRow(tr("Stop after"), m_maxHours);
  form->addRow(tr("Estimate"), m_estimate);
  bindField(QStringLiteral("budget.usd_per_hour"), m_price);
  bindField(QStringLiteral("budget.price_source"), m_catalogue);
  bindField(QStringLiteral("budget.max_usd"), m_maxUsd);
  bindField(QStringLiteral("budget.warn_fraction"), m_warn);
  bindField(QStringLiteral("budget.max_hours"), m_maxHours);

  connect(m_source, &QComboBox::currentIndexChanged, this, &BudgetPage::editValues);
  for (QDoubleSpinBox* b : {m_price, m_maxUsd, m_warn, m_maxHours})
    connect(b, &QDoubleSpinBox::valueChanged, this, &BudgetPage::editValues);
  connect(m_catalogue, &QComboBox::activated, this, &BudgetPage::editValues);
}

void BudgetPage::editValues() {
  if (loading()) return;
  if (m_source->currentIndex() == Catalogue && m_catalogue->currentIndex() < 0 && m_catalogue->count() > 0)
    m_catalogue->setCurrentIndex(0);  // a catalogue price: the first entry until one is chosen
  draft()->edit([this](RunConfig& c) {
    const auto keep = [](double& field, const QDoubleSpinBox* box) {
      if (box->value() != QString::number(field, 'f', box->decimals()).toDouble()) field = box->value();
    };
    const int source = m_source->currentIndex();
    if (source == NoPrice) {
      c.budget.usd_per_hour = 0;
      c.budget.price_source.clear();
    } else if (source == Catalogue) {
      // The entry's price, not a typed one left from before (a config's usd_per_hour wins over its
      // price_source: runs/pricing.h).
      c.budget.usd_per_hour = 0;
      c.budget.price_source = m_catalogue->currentData().toString().toStdString();
    } else {
      keep(c.budget.usd_per_hour, m_price);
      c.budget.price_source.clear();
    }
    keep(c.budget.max_usd, m_maxUsd);
    keep(c.budget.warn_fraction, m_warn);
    keep(c.budget.max_hours, m_maxHours);
  });
  m_price->setEnabled(m_source->currentIndex() == HourlyPrice);
  m_catalogue->setEnabled(m_source->currentIndex() == Catalogue);
  showCataloguePrice();
}

void BudgetPage::showCataloguePrice() {
  // The disabled Price field shows what the chosen entry costs, not a price typed before.
  if (m_source->currentIndex() != Catalogue) return;
  const QString key = m_catalogue->currentData().toString();
  for (const PriceChoice& choice : std::as_const(m_choices))
    if (choice.key == key) {
      const QSignalBlocker block(m_price);
      m_price->setValue(choice.usdPerHour);
    }
}

void BudgetPage::load() {
  const RunConfig& c = draft()->config();
  m_source->setCurrentIndex(!c.budget.price_source.empty() ? Catalogue
                            : c.budget.usd_per_hour != 0   ? HourlyPrice
                                                           : NoPrice);
  m_price->setValue(c.budget.usd_per_hour);
  syncCatalogue();
  m_maxUsd->setValue(c.budget.max_usd);
  m_warn->setValue(c.budget.warn_fraction);
  m_maxHours->setValue(c.budget.max_hours);
  m_price->setEnabled(m_source->currentIndex() == HourlyPrice);
  m_catalogue->setEnabled(m_source->currentIndex() == Catalogue);
  showCataloguePrice();
}

QString BudgetPage::estimateText() const { return m_estimate->text(); }

void BudgetPage::setPriceChoices(const QList<PriceChoice>& choices) {
  m_choices = choices;
  m_choicesLoaded = true;
  reload();
}

void BudgetPage::syncCatalogue() {
  const QSignalBlocker block(m_catalogue);
  m_catalogue->clear();
  for (const PriceChoice& choice : std::as_const(m_choices)) m_catalogue->addItem(choice.label, choice.key);
  const QString source = QString::fromStdString(draft()->config().budget.price_source);
  int at = m_catalogue->findData(source);
  if (at < 0 && !source.isEmpty()) {  // a template's or a duplicated run's entry: shown, and checked
    m_catalogue->addItem(tr("%1 (not in this catalogue)").arg(source), source);
    at = m_catalogue->count() - 1;
  }
  m_catalogue->setCurrentIndex(at);
}

QStringList BudgetPage::extraProblems() const {
  const std::string& source = draft()->config().budget.price_source;
  if (source.empty() || !m_choicesLoaded) return {};
  for (const PriceChoice& choice : m_choices)
    if (choice.key.toStdString() == source) return {};
  return {tr("budget.price_source: \"%1\" is neither a pricing catalogue entry nor a priced node; choose one "
             "from the Catalogue entry list (the Costs page edits the catalogue)")
              .arg(QString::fromStdString(source))};
}

void BudgetPage::refreshDerived() {
  const std::optional<Plan> plan = draft()->plan();
  if (!plan) {
    m_estimate->setText(tr("— (the configuration has problems; see the Review page)"));
    return;
  }
  const RunConfig& c = draft()->config();
  const std::optional<CalibratedPlan> calibrated = draft()->calibratedPlan();
  // Start-up (the worker, its data and model, up to step 1) is billed like training: counted here.
  const double startup = calibrated ? calibrated->startup_s : kTypicalStartupS;
  const double total_s = plan->run_s + startup;
  QString text = tr("%1 steps × %2 s + %3 s start-up (%4) ≈ %5")
                     .arg(plan->steps)
                     .arg(plan->step_s, 0, 'g', 3)
                     .arg(startup, 0, 'f', 1)
                     .arg(calibrated ? QString::fromStdString(calibrated->startup_source) : tr("typical"))
                     .arg(formatDuration(total_s));
  // The price: typed, or the chosen catalogue entry's (or priced node's) as the list shows it; the
  // runs layer resolves the entry again when the run starts.
  double usdPerHour = c.budget.usd_per_hour;
  QString priceNote;
  if (!c.budget.price_source.empty()) {
    usdPerHour = 0;
    for (const PriceChoice& choice : std::as_const(m_choices))
      if (choice.key.toStdString() == c.budget.price_source) usdPerHour = choice.usdPerHour;
    priceNote = tr(" (catalogue entry \"%1\", read again when the run starts)")
                    .arg(QString::fromStdString(c.budget.price_source));
  }
  if (usdPerHour > 0) {
    const double cost = total_s / 3600.0 * usdPerHour;
    text += tr(", %1 at %2 per hour%3").arg(formatEstimateUsd(cost), formatUsd(usdPerHour), priceNote);
    if (c.budget.max_usd > 0 && cost > c.budget.max_usd) {
      const double steps = (c.budget.max_usd / usdPerHour * 3600.0 - startup) / plan->step_s;
      text += steps >= 1 ? tr(". The spend limit %1 stops it after about %2 steps")
                               .arg(formatUsd(c.budget.max_usd))
                               .arg(std::floor(steps))
                         : tr(". The spend limit %1 is spent by the start-up, before step 1: raise it")
                               .arg(formatUsd(c.budget.max_usd));
    }
  } else if (!c.budget.price_source.empty()) {
    text += tr(", priced from the catalogue entry \"%1\" when the run starts (no price for it here yet)")
                .arg(QString::fromStdString(c.budget.price_source));
  } else {
    text += tr(", no cost (no price set)");
  }
  if (c.budget.max_hours > 0 && total_s > c.budget.max_hours * 3600)
    text += tr(". The time limit stops it after about %1 steps")
                .arg(std::max(0.0, std::floor((c.budget.max_hours * 3600 - startup) / plan->step_s)));
  // The same words as the Hardware page and `flotilla plan` (calibration.h: basis_words).
  if (calibrated) {
    text += tr(". Step time: %1, efficiency %2%")
                .arg(QString::fromStdString(basis_words(*calibrated)))
                .arg(plan->efficiency * 100, 0, 'f', 1);
    if (calibrated->last) text += QStringLiteral("; ") + QString::fromStdString(last_run_line(*calibrated));
  }
  m_estimate->setText(text + QLatin1Char('.'));
}

}  // namespace flotilla::ui
