#include "ui/common/savefile.h"

#include <QObject>
#include <QSaveFile>

namespace flotilla::ui {

bool saveFileAtomically(const QString& path, const QByteArray& data, QString* error) {
  QSaveFile file(path);
  const auto fail = [&](const QString& why) {
    file.cancelWriting();
    if (error) *error = QObject::tr("Cannot write %1: %2").arg(path, why);
    return false;
  };
  if (!file.open(QIODevice::WriteOnly | QIODevice::Unbuffered)) return fail(file.errorString());
  if (file.write(data) != data.size()) return fail(file.errorString());
  if (!file.commit()) {
    if (error) *error = QObject::tr("Cannot write %1: %2").arg(path, file.errorString());
    return false;
  }
  return true;
}

}  // namespace flotilla::ui
