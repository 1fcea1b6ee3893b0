// Reads a worker's metrics.jsonl (docs/metrics-protocol.md) while the worker is still writing it.
//
// Decision: the file is tailed by byte offset and only complete lines are parsed. A line without
// its trailing newline is the writer's torn last line: its bytes are held until the newline
// arrives, never parsed early and never dropped. A complete line that is not a JSON object is
// skipped and counted, so one damaged record cannot stop the stream.
#pragma once

#include <QByteArray>
#include <QJsonObject>
#include <QList>
#include <QString>

namespace flotilla::ui {

class MetricsTail {
 public:
  explicit MetricsTail(QString path = QString()) : m_path(std::move(path)) {}

  // Reads whatever was appended to the file since the last call (at most maxBytes, so one call
  // never stalls the caller on a huge backlog) and returns the records completed by it. A file
  // that does not exist yet reads as empty.
  QList<QJsonObject> poll(qint64 maxBytes = 4 << 20);

  // The parser behind poll(): appends raw bytes and returns the records they complete.
  QList<QJsonObject> feed(const QByteArray& bytes);

  QString path() const { return m_path; }
  qint64 offset() const { return m_offset; }                   // bytes consumed from the file so far
  qsizetype pendingBytes() const { return m_partial.size(); }  // the torn line held back
  int skippedLines() const { return m_skipped; }               // complete lines that were not records
  int recordCount() const { return m_records; }

 private:
  QString m_path;
  qint64 m_offset = 0;
  QByteArray m_partial;
  int m_skipped = 0;
  int m_records = 0;
};

}  // namespace flotilla::ui
