// The dialog shown when the workspace database is refused at start (docs/reliability.md D4).
//
// Decision: a damaged file is never recreated silently. The dialog explains the refusal in the
// database layer's own words and, for a damaged file only, offers one explicit way on: move the
// file (and its WAL) aside under a dated name, nothing deleted, and start a new workspace database.
// A file from a newer Flotilla is never moved: the right answer there is the newer Flotilla.
#pragma once

#include <QString>

#include "db/errors.h"

class QWidget;

namespace flotilla::ui {

// Shows the refusal modally. Returns true when the user chose "Move Aside and Start Fresh" and the
// move succeeded (`movedTo` then holds the new name); false when the user closed the dialog or
// the move failed (`moveError` then says why).
bool offerToMoveAside(const db::DbError& error, const QString& databasePath, QString* movedTo,
                      QString* moveError, QWidget* parent = nullptr);

}  // namespace flotilla::ui
