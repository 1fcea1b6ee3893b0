// Refused-workspace dialog (see refusedworkspace.h).
#include "ui/main/refusedworkspace.h"

#include <QMessageBox>
#include <QPushButton>

#include "db/workspace.h"

namespace flotilla::ui {

bool offerToMoveAside(const db::DbError& error, const QString& databasePath, QString* movedTo,
                      QString* moveError, QWidget* parent) {
  QMessageBox box(QMessageBox::Critical, QObject::tr("Flotilla"),
                  QObject::tr("Flotilla cannot open its workspace."), QMessageBox::NoButton, parent);
  box.setObjectName(QStringLiteral("refusedWorkspaceBox"));
  box.setInformativeText(QString::fromStdString(error.what()));
  QPushButton* moveAside = nullptr;
  if (error.kind() == db::DbErrorKind::kDamaged) {
    moveAside = box.addButton(QObject::tr("Move Aside and Start Fresh"), QMessageBox::AcceptRole);
    moveAside->setObjectName(QStringLiteral("moveAsideButton"));
    moveAside->setToolTip(
        QObject::tr("Renames the file (nothing is deleted) and creates a new, empty workspace "
                    "database in its place"));
  }
  box.setDefaultButton(box.addButton(QMessageBox::Close));  // the safe choice is the default
  box.exec();
  if (!moveAside || box.clickedButton() != moveAside) return false;
  try {
    const std::string moved = db::move_aside(databasePath.toStdString());
    if (movedTo) *movedTo = QString::fromStdString(moved);
    return true;
  } catch (const db::DbError& e) {
    if (moveError) *moveError = QString::fromStdString(e.what());
    QMessageBox::critical(parent, QObject::tr("Flotilla"), QString::fromStdString(e.what()));
    return false;
  }
}

}  // namespace flotilla::ui
