// What the app knows about the open workspace, handed from app/ to the window as a plain struct
// (STYLE.md principle 10). The run store issue replaces the bare facts with its services.
#pragma once

#include <QString>

namespace flotilla::ui {

struct WorkspaceInfo {
  QString directory;      // absolute workspace folder
  QString databasePath;   // <directory>/flotilla.db
  int schemaVersion = 0;  // PRAGMA user_version after migration
  bool created = false;   // this start created the database
};

}  // namespace flotilla::ui
