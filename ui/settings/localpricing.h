// How this machine's runs are charged: the store's node_pricing row of the node named "local"
// (db/costs.h), read and written as a plain struct. These functions block on SQLite: the Settings
// page calls them from QtConcurrent tasks, each on its own connection, never on the UI thread.
#pragma once

#include <QString>

namespace flotilla::ui {

struct LocalPricing {
  enum class Kind { None, Flat, Power };
  Kind kind = Kind::None;
  double usdPerHour = 0;  // Flat: the whole machine
  double powerW = 0;      // Power: average draw
  double tariffUsdPerKwh = 0;

  // Reads the "local" node's pricing (None when the node or its pricing is missing). Throws DbError.
  static LocalPricing load(const QString& databasePath);
  // Writes it (creating the "local" node when missing). Runs started afterwards accrue at this rate.
  void save(const QString& databasePath) const;
  // "$1.20/h" or "350 W × $0.30/kWh = $0.105/h" or "free".
  QString describe() const;
};

}  // namespace flotilla::ui
