// Costs page (see costspage.h).
#include "ui/costs/costspage.h"

#include <QDate>
#include <QDoubleSpinBox>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QItemSelectionModel>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QDateTime>
#include <QListView>
#include <QScrollArea>
#include <QStringListModel>
#include <QTabWidget>
#include <QTableView>
#include <QVBoxLayout>

#include <algorithm>

#include "ui/common/pageheader.h"
#include "ui/compare/asyncquery.h"
#include "ui/costs/costmodels.h"
#include "ui/costs/savingsview.h"
#include "ui/plot/costplot.h"

namespace flotilla::ui {
namespace {

QTableView* newTable(QAbstractItemModel* model, const QString& name) {
  auto* view = new QTableView;
  view->setObjectName(name);
  view->setModel(model);
  view->setAlternatingRowColors(true);
  view->setSelectionBehavior(QAbstractItemView::SelectRows);
  view->setSelectionMode(QAbstractItemView::SingleSelection);
  view->verticalHeader()->hide();
  view->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  view->horizontalHeader()->setStretchLastSection(true);
  view->setWordWrap(false);
  return view;
}

QWidget* titled(const QString& title, QWidget* body) {
  auto* w = new QWidget;
  auto* l = new QVBoxLayout(w);
  l->setContentsMargins(0, 0, 0, 0);
  l->setSpacing(4);
  auto* label = new QLabel(title);
  QFont f = label->font();
  f.setBold(true);
  label->setFont(f);
  l->addWidget(label);
  l->addWidget(body, 1);
  return w;
}

}  // namespace

CostsPage::CostsPage(QWidget* parent) : CostsPage(QString(), parent) {}

CostsPage::CostsPage(const QString& databasePath, QWidget* parent)
    : QWidget(parent),
      m_databasePath(databasePath),
      m_prefs(Preferences::load()),
      m_byRun(new CostLinesModel(tr("Run"), this)),
      m_byNode(new CostLinesModel(tr("Node"), this)),
      m_byDay(new CostLinesModel(tr("Day (UTC)"), this)),
      m_idle(new CostLinesModel(tr("Node"), this)),
      m_autostop(new QStringListModel(this)),
      m_pricing(new PricingModel(this)),
      m_budgets(new BudgetModel(this)) {
  m_budgets->setPreferences(m_prefs);
  build();
}

void CostsPage::build() {
  auto* header = new PageHeader(
      tr("Costs"),
      tr("What training costs: spend per run, per node and per day, priced from an editable catalogue of "
         "on-demand and spot rates per instance or GPU type, with each run's budget and its projected "
         "total."),
      this);
  m_total = new QLabel;
  m_total->setObjectName(QStringLiteral("costsTotal"));
  QFont big = m_total->font();
  big.setPointSizeF(big.pointSizeF() * 1.25);
  big.setBold(true);
  m_total->setFont(big);

  // Spend.
  m_chart = new CostBarChart(tr("spend ($)"));
  auto* spend = new QWidget;
  auto* grid = new QGridLayout(spend);
  grid->setContentsMargins(0, 8, 0, 0);
  grid->setSpacing(12);
  grid->addWidget(titled(tr("Spend per day"), m_chart), 0, 0, 1, 2);
  grid->addWidget(titled(tr("By run"), newTable(m_byRun, QStringLiteral("costsByRun"))), 1, 0, 2, 1);
  grid->addWidget(titled(tr("By node"), newTable(m_byNode, QStringLiteral("costsByNode"))), 1, 1);
  grid->addWidget(titled(tr("By day"), newTable(m_byDay, QStringLiteral("costsByDay"))), 2, 1);
  grid->setRowStretch(0, 3);
  grid->setRowStretch(1, 2);
  grid->setRowStretch(2, 2);

  // Pricing catalogue.
  m_pricingView = newTable(m_pricing, QStringLiteral("pricingTable"));
  m_pricingView->setEditTriggers(QAbstractItemView::DoubleClicked | QAbstractItemView::EditKeyPressed |
                                 QAbstractItemView::AnyKeyPressed);
  m_newProvider = new QLineEdit;
  m_newProvider->setPlaceholderText(tr("provider"));
  m_newItem = new QLineEdit;
  m_newItem->setPlaceholderText(tr("instance or GPU"));
  m_newRate = new QDoubleSpinBox;
  m_newRate->setRange(0, 100000);
  m_newRate->setDecimals(3);
  m_newRate->setPrefix(QStringLiteral("$"));
  m_newRate->setSuffix(tr(" /h"));
  auto* add = new QPushButton(tr("Add"));
  auto* del = new QPushButton(tr("Delete entry"));
  del->setObjectName(QStringLiteral("deletePriceButton"));
  auto* reset = new QPushButton(tr("Reset to list prices"));
  reset->setObjectName(QStringLiteral("resetPricesButton"));
  connect(add, &QPushButton::clicked, this,
          [this] { addPrice(m_newProvider->text(), m_newItem->text(), m_newRate->value()); });
  connect(del, &QPushButton::clicked, this, &CostsPage::deleteSelectedPrice);
  connect(reset, &QPushButton::clicked, this, &CostsPage::resetPrices);
  auto* addRow = new QHBoxLayout;
  addRow->addWidget(m_newProvider);
  addRow->addWidget(m_newItem);
  addRow->addWidget(m_newRate);
  addRow->addWidget(add);
  addRow->addStretch(1);
  addRow->addWidget(del);
  addRow->addWidget(reset);
  auto* pricingHint =
      new QLabel(tr("Double-click a rate to edit it. Edited entries are kept when the built-in "
                    "list is updated; only entries you added or edited can be deleted."));
  pricingHint->setWordWrap(true);
  m_pricingAge = new QLabel;
  m_pricingAge->setObjectName(QStringLiteral("pricingAge"));
  m_pricingAge->setWordWrap(true);
  m_pricingAge->setTextInteractionFlags(Qt::TextSelectableByMouse);
  auto* pricing = new QWidget;
  auto* pl = new QVBoxLayout(pricing);
  pl->setContentsMargins(0, 8, 0, 0);
  pl->addWidget(m_pricingAge);
  pl->addWidget(pricingHint);
  pl->addWidget(m_pricingView, 1);
  pl->addLayout(addRow);

  // Budgets.
  auto* budgetView = newTable(m_budgets, QStringLiteral("budgetTable"));
  budgetView->setEditTriggers(QAbstractItemView::DoubleClicked | QAbstractItemView::EditKeyPressed |
                              QAbstractItemView::AnyKeyPressed);
  auto* budgetHint =
      new QLabel(tr("Double-click Max spend or Warn at to edit. A run warns once its spend "
                    "passes the threshold and stops with a checkpoint at the cap. The "
                    "projection scales a running run's spend to its planned steps."));
  budgetHint->setWordWrap(true);
  auto* budgets = new QWidget;
  auto* bl = new QVBoxLayout(budgets);
  bl->setContentsMargins(0, 8, 0, 0);
  bl->addWidget(budgetHint);
  bl->addWidget(budgetView, 1);

  auto* tabs = new QTabWidget;
  tabs->setObjectName(QStringLiteral("costsTabs"));
  tabs->addTab(spend, tr("Spend"));
  tabs->addTab(pricing, tr("Pricing catalogue"));
  tabs->addTab(budgets, tr("Budgets"));
  // Idle autostop: what nodes cost while powered with no run, and what autostop did.
  auto* idleTable = newTable(m_idle, QStringLiteral("costsIdle"));
  idleTable->hideColumn(CostLinesModel::GpuHours);
  auto* autostopList = new QListView;
  autostopList->setObjectName(QStringLiteral("costsAutostop"));
  autostopList->setModel(m_autostop);
  autostopList->setEditTriggers(QAbstractItemView::NoEditTriggers);
  auto* idle = new QWidget;
  auto* il = new QVBoxLayout(idle);
  il->setContentsMargins(0, 8, 0, 0);
  il->addWidget(titled(tr("Idle by node (powered, no run; the time column is idle time)"), idleTable), 1);
  il->addWidget(titled(tr("Autostop"), autostopList), 1);
  tabs->addTab(idle, tr("Idle"));
  m_savings = new SavingsView;
  tabs->addTab(m_savings, tr("Scheduler savings"));

  tabs->setMinimumSize(700, 460);  // fits a 1024x640 window beside the sidebar (test_small_window)
  auto* scroll = new QScrollArea;
  scroll->setWidget(tabs);
  scroll->setWidgetResizable(true);
  scroll->setFrameShape(QFrame::NoFrame);
  m_status = new QLabel;
  m_status->setObjectName(QStringLiteral("costsStatus"));
  m_status->setWordWrap(true);
  m_status->setForegroundRole(QPalette::PlaceholderText);
  auto* refresh = new QPushButton(tr("Refresh"));
  connect(refresh, &QPushButton::clicked, this, &CostsPage::reload);
  auto* top = new QHBoxLayout;
  top->addWidget(m_total, 1);
  top->addWidget(refresh);

  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(28, 24, 28, 16);
  layout->setSpacing(12);
  layout->addWidget(header);
  layout->addLayout(top);
  layout->addWidget(scroll, 1);
  layout->addWidget(m_status);

  connect(m_pricing, &PricingModel::priceEdited, this, [this](const db::PriceEntry& entry) {
    write([path = m_databasePath, entry] {
      savePrice(path, entry);
      return tr("Saved %1/%2")
          .arg(QString::fromStdString(entry.provider), QString::fromStdString(entry.item));
    });
  });
  connect(m_budgets, &BudgetModel::budgetEdited, this,
          [this](qint64 runId, std::optional<double> cap, double warn) {
            write([path = m_databasePath, runId, cap, warn] {
              saveBudget(path, runId, cap, warn);
              return tr("Budget saved");
            });
          });
  m_total->setText(m_databasePath.isEmpty() ? tr("No workspace database") : tr("Reading…"));
}

void CostsPage::setDatabasePath(const QString& path) {
  m_databasePath = path;
  reload();
}

void CostsPage::setPreferences(const Preferences& prefs) {
  m_prefs = prefs;
  m_budgets->setPreferences(prefs);
  reload();
}

void CostsPage::showEvent(QShowEvent* event) {
  QWidget::showEvent(event);
  reload();
}

QString CostsPage::totalText() const { return m_total->text(); }
QString CostsPage::pricingAgeText() const { return m_pricingAge->text(); }

void CostsPage::reload() {
  if (m_databasePath.isEmpty()) return;
  m_savings->reload(m_databasePath);
  const quint64 generation = ++m_generation;
  m_loading = true;
  runAsync<CostsResult>(
      this, [path = m_databasePath] { return loadCosts(path); },
      [this, generation](Outcome<CostsResult> r) {
        if (generation != m_generation) return;
        m_loading = false;
        if (auto* error = std::get_if<QString>(&r)) {
          m_status->setText(tr("Could not read the workspace: %1").arg(*error));
          return;
        }
        apply(std::move(std::get<0>(r)));
      });
}

QString CostsPage::pricingAgeText(const std::vector<db::PriceEntry>& prices, const QDate& today) {
  // The oldest list price not edited by the user: how stale the built-in catalogue is.
  QDate oldest;
  QString oldestText;
  for (const auto& p : prices) {
    if (p.user_edited || p.as_of.empty()) continue;
    const QString text = QString::fromStdString(p.as_of);
    QDate d = QDate::fromString(text, QStringLiteral("yyyy-MM"));
    if (!d.isValid()) d = QDate::fromString(text, QStringLiteral("yyyy-MM-dd"));
    if (d.isValid() && (!oldest.isValid() || d < oldest)) {
      oldest = d;
      oldestText = text;
    }
  }
  if (!oldest.isValid()) return {};
  const int months = std::max(0, (today.year() - oldest.year()) * 12 + today.month() - oldest.month());
  const QString age = months >= 24   ? tr("about %1 years old").arg(months / 12)
                      : months >= 2  ? tr("%1 months old").arg(months)
                      : months == 1  ? tr("a month old")
                                     : tr("from this month");
  return tr("List prices as of %1 (%2). Cloud prices change: check your provider's price page and edit a rate "
            "here (double-click it) or with `flotilla pricing set PROVIDER ITEM --on-demand USD`. The built-in "
            "list is resources/pricing.toml; a newer Flotilla refreshes it and keeps your edits.")
      .arg(oldestText, age);
}

void CostsPage::apply(CostsResult result) {
  int unpriced = 0;
  for (const auto& l : result.byRun) unpriced += l.priced ? 0 : 1;
  const int runs = static_cast<int>(result.byRun.size());
  QString total = runs == 1 ? tr("Total spend %1 on 1 run").arg(m_prefs.formatMoney(result.totalUsd))
                            : tr("Total spend %1 on %2 runs").arg(m_prefs.formatMoney(result.totalUsd)).arg(runs);
  if (unpriced == 1)
    total += tr(" (1 unpriced)");
  else if (unpriced > 1)
    total += tr(" (%1 unpriced)").arg(unpriced);
  if (!result.idleByNode.empty()) total += tr(" · idle nodes %1").arg(m_prefs.formatMoney(result.idleUsd));
  m_total->setText(total);
  QStringList autostop;
  for (const auto& e : result.autostop)
    autostop << QDateTime::fromSecsSinceEpoch(static_cast<qint64>(e.time)).toString(QStringLiteral("yyyy-MM-dd HH:mm")) +
                    QStringLiteral("  ") + QString::fromStdString(e.message);
  m_autostop->setStringList(autostop);
  m_idle->setLines(std::move(result.idleByNode));
  m_pricingAge->setText(pricingAgeText(result.prices, QDate::currentDate()));
  QStringList days;
  QVector<double> usd;
  for (const auto& l : result.byDay) {
    days << QString::fromStdString(l.key).mid(5);  // MM-DD: the year is in the table
    usd << l.usd;
  }
  m_chart->setBars(days, usd);
  m_byRun->setLines(std::move(result.byRun));
  m_byNode->setLines(std::move(result.byNode));
  m_byDay->setLines(std::move(result.byDay));
  m_pricing->setPrices(std::move(result.prices));
  m_budgets->setBudgets(std::move(result.budgets));
  emit loaded();
}

void CostsPage::write(std::function<QString()> work) {
  if (m_databasePath.isEmpty()) return;
  struct Done {
    QString message;
  };
  ++m_writes;
  runAsync<Done>(
      this, [work = std::move(work)] { return Done{work()}; },
      [this](Outcome<Done> r) {
        --m_writes;
        const bool ok = r.index() == 0;
        const QString message = ok ? std::get<0>(r).message : std::get<1>(r);
        m_status->setText(ok ? message : tr("Not saved: %1").arg(message));
        reload();
        emit writeFinished(ok, message);
      });
}

void CostsPage::addPrice(const QString& provider, const QString& item, double onDemandUsdPerHour) {
  if (provider.trimmed().isEmpty() || item.trimmed().isEmpty()) {
    m_status->setText(tr("A new price needs a provider and an instance or GPU name."));
    return;
  }
  db::PriceEntry p;
  p.provider = provider.trimmed().toStdString();
  p.item = item.trimmed().toStdString();
  p.on_demand_usd_per_hour = onDemandUsdPerHour;
  p.source = "user";
  p.user_edited = true;
  write([path = m_databasePath, p] {
    savePrice(path, p);
    return tr("Added %1/%2").arg(QString::fromStdString(p.provider), QString::fromStdString(p.item));
  });
}

void CostsPage::deleteSelectedPrice() {
  const QModelIndexList rows = m_pricingView->selectionModel()->selectedRows();
  if (rows.isEmpty()) {
    m_status->setText(tr("Select an entry to delete."));
    return;
  }
  const db::PriceEntry p = m_pricing->entry(rows.front().row());
  write([path = m_databasePath, p] {
    deletePrice(path, p.id);
    return tr("Deleted %1/%2").arg(QString::fromStdString(p.provider), QString::fromStdString(p.item));
  });
}

void CostsPage::resetPrices() {
  write([path = m_databasePath] {
    const int n = flotilla::ui::resetPrices(path);
    if (n == 0) return tr("No entry was edited: every price is already the list price.");
    return n == 1 ? tr("Reset 1 edited entry to its list price.")
                  : tr("Reset %1 edited entries to their list prices.").arg(n);
  });
}

}  // namespace flotilla::ui
