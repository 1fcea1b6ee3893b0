// Writing a user's file (a template, an export) so that a crash or a full disk never leaves it torn
// (docs/reliability.md D5).
//
// Decision: QSaveFile (a temporary file renamed over the old one by commit()), opened Unbuffered and
// with every write's return checked. Qt 6.4's QSaveFile::commit() reports success when the failure
// happened in QFileDevice's write buffer (found by tests/ui/test_settings_crash.cpp: on a full tmpfs a
// buffered save "succeeded" and left a 0-byte file in place of the old one); unbuffered, the failing
// write() is QSaveFile's own and commit() discards the temporary file.
#pragma once

#include <QByteArray>
#include <QString>

namespace flotilla::ui {

// Replaces `path` with `data`; false with *error ("Cannot write PATH: why") and the old file intact.
bool saveFileAtomically(const QString& path, const QByteArray& data, QString* error);

}  // namespace flotilla::ui
