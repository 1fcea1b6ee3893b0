// D4 in the GUI: a damaged workspace database is explained, offered to be moved aside (never
// recreated silently), and moved only when the user says so; a newer-version file is never offered
// the move. The modal box is driven the way a user would, by clicking its buttons.
#include <QAbstractButton>
#include <QApplication>
#include <QMessageBox>
#include <QPushButton>
#include <QTemporaryDir>
#include <QTimer>
#include <QtTest>

#include <sqlite3.h>

#include <optional>

#include "db/database.h"
#include "db/errors.h"
#include "ui/main/refusedworkspace.h"

using flotilla::db::DbError;

namespace {

QByteArray readAll(const QString& path) {
  QFile f(path);
  return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray("<unreadable>");
}

// Opens `path` and returns the refusal (the test fails if it opens).
std::optional<DbError> refusal(const QString& path) {
  try {
    flotilla::db::Database db(path.toStdString());
  } catch (const DbError& e) {
    return e;
  }
  return std::nullopt;
}

// When the modal box appears, records its buttons and clicks the one named `click`.
void clickWhenShown(const QString& click, QStringList* seenButtons, QString* seenText) {
  QTimer::singleShot(50, [=] {
    auto* box = qobject_cast<QMessageBox*>(QApplication::activeModalWidget());
    if (!box) return clickWhenShown(click, seenButtons, seenText);  // not up yet: look again
    *seenText = box->informativeText();
    QAbstractButton* target = nullptr;
    for (QAbstractButton* b : box->buttons()) {
      seenButtons->append(b->text());
      if (b->text() == click) target = b;
    }
    if (target)
      target->click();
    else
      box->reject();
  });
}

}  // namespace

class TestRefusedWorkspace : public QObject {
  Q_OBJECT

 private slots:
  void damagedFileIsMovedAsideOnlyOnRequest() {
    QTemporaryDir dir;
    const QString path = dir.filePath(QStringLiteral("flotilla.db"));
    const QByteArray garbage(8192, 'x');
    {
      QFile f(path);
      QVERIFY(f.open(QIODevice::WriteOnly));
      f.write(garbage);
    }
    auto refused = refusal(path);
    QVERIFY(refused);
    QCOMPARE(refused->kind(), flotilla::db::DbErrorKind::kDamaged);

    // 1. The user closes the box: nothing moves, nothing changes.
    QStringList buttons;
    QString text, movedTo, moveError;
    clickWhenShown(QStringLiteral("Close"), &buttons, &text);
    QVERIFY(!flotilla::ui::offerToMoveAside(*refused, path, &movedTo, &moveError));
    QVERIFY2(buttons.contains(QStringLiteral("Move Aside and Start Fresh")), qPrintable(buttons.join(u',')));
    QVERIFY2(text.contains(QStringLiteral("is damaged")) && text.contains(path), qPrintable(text));
    QCOMPARE(readAll(path), garbage);
    QVERIFY(movedTo.isEmpty());

    // 2. The user moves it aside: the bytes survive under the new name and a fresh database opens.
    buttons.clear();
    clickWhenShown(QStringLiteral("Move Aside and Start Fresh"), &buttons, &text);
    QVERIFY(flotilla::ui::offerToMoveAside(*refused, path, &movedTo, &moveError));
    QVERIFY2(movedTo.startsWith(path + QStringLiteral(".damaged-")), qPrintable(movedTo));
    QCOMPARE(readAll(movedTo), garbage);
    QVERIFY(!QFile::exists(path));
    flotilla::db::Database fresh(path.toStdString());
    QVERIFY(fresh.created());
    QCOMPARE(fresh.schema_version(), flotilla::db::current_schema_version());
  }

  void newerFileIsNeverOfferedTheMove() {
    QTemporaryDir dir;
    const QString path = dir.filePath(QStringLiteral("flotilla.db"));
    sqlite3* raw = nullptr;
    QCOMPARE(sqlite3_open(path.toUtf8().constData(), &raw), SQLITE_OK);
    // One step newer than this build knows (a file written by a later Flotilla).
    const QByteArray sql = "CREATE TABLE meta(k); PRAGMA user_version = " +
                           QByteArray::number(flotilla::db::current_schema_version() + 1) + ";";
    QCOMPARE(sqlite3_exec(raw, sql.constData(), nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(raw);
    const QByteArray before = readAll(path);
    auto refused = refusal(path);
    QVERIFY(refused);
    QCOMPARE(refused->kind(), flotilla::db::DbErrorKind::kTooNew);

    QStringList buttons;
    QString text, movedTo, moveError;
    clickWhenShown(QStringLiteral("Move Aside and Start Fresh"), &buttons, &text);
    QVERIFY(!flotilla::ui::offerToMoveAside(*refused, path, &movedTo, &moveError));
    QCOMPARE(buttons, QStringList{QStringLiteral("Close")});
    QVERIFY2(text.contains(QStringLiteral("newer Flotilla")), qPrintable(text));
    QCOMPARE(readAll(path), before);
  }
};

QTEST_MAIN(TestRefusedWorkspace)
#include "test_refused_workspace.moc"
