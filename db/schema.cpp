// The workspace schema as ordered migration steps (database.h explains how they are applied).
//
// Decision: schema v1 is deliberately only the meta table. The run store issue designs runs,
// metrics, system samples, nodes, pricing and costs and appends them as steps 2, 3, ...; a step
// is never edited once released, because old workspaces replay exactly the steps they lack.
#include <string>

#include "db/database.h"
#include "flotilla/build_info.h"

namespace flotilla::db {

const std::vector<Migration>& builtin_migrations() {
  static const std::string v1 =
      "CREATE TABLE meta (\n"
      "  key   TEXT PRIMARY KEY NOT NULL,\n"
      "  value TEXT NOT NULL\n"
      ") WITHOUT ROWID;\n"
      "INSERT INTO meta(key, value) VALUES ('created_by_version', '" FLOTILLA_VERSION_STRING
      "');\n"
      "INSERT INTO meta(key, value) VALUES ('created_at', strftime('%Y-%m-%dT%H:%M:%SZ', 'now'));\n";
  static const std::vector<Migration> steps = {
      {1, "meta table", v1.c_str()},
  };
  return steps;
}

int current_schema_version() { return builtin_migrations().back().version; }

}  // namespace flotilla::db
