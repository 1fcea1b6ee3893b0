// Local machine pricing over db/costs.h (see localpricing.h).
#include "ui/settings/localpricing.h"

#include <QObject>

#include "db/costs.h"
#include "db/database.h"
#include "db/run_store.h"

namespace flotilla::ui {
namespace {

constexpr char kLocalNode[] = "local";

db::OpenOptions existingStore() {
  db::OpenOptions o;
  o.create = false;
  o.quick_check = false;  // the app checked the file when it opened the workspace
  return o;
}

}  // namespace

LocalPricing LocalPricing::load(const QString& databasePath) {
  const db::Database db(databasePath.toStdString(), existingStore());
  LocalPricing out;
  const auto node = db::find_node(db, kLocalNode);
  if (!node) return out;
  const auto np = db::node_pricing(db, node->id);
  if (!np) return out;
  if (np->power_w && np->tariff_usd_per_kwh) {
    out.kind = Kind::Power;
    out.powerW = *np->power_w;
    out.tariffUsdPerKwh = *np->tariff_usd_per_kwh;
  } else if (np->usd_per_hour) {
    out.kind = Kind::Flat;
    out.usdPerHour = *np->usd_per_hour;
  }
  return out;
}

void LocalPricing::save(const QString& databasePath) const {
  db::Database db(databasePath.toStdString(), existingStore());
  const int64_t node = db::ensure_node(db, kLocalNode, "local");
  db::NodePricing np;
  if (kind == Kind::Flat) np.usd_per_hour = usdPerHour;
  if (kind == Kind::Power) {
    np.power_w = powerW;
    np.tariff_usd_per_kwh = tariffUsdPerKwh;
  }
  db::set_node_pricing(db, node, np);
}

QString LocalPricing::describe() const {
  switch (kind) {
    case Kind::Flat:
      return QStringLiteral("$%1/h").arg(usdPerHour, 0, 'f', 2);
    case Kind::Power:
      return QStringLiteral("%1 W × $%2/kWh = $%3/h")
          .arg(powerW, 0, 'f', 0)
          .arg(tariffUsdPerKwh, 0, 'f', 2)
          .arg(powerW / 1000.0 * tariffUsdPerKwh, 0, 'f', 3);
    case Kind::None:
      break;
  }
  return QObject::tr("free (no price set)");
}

}  // namespace flotilla::ui
