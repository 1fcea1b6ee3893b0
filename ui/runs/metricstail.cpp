// Metrics file tail (see metricstail.h).
#include "ui/runs/metricstail.h"

#include <QFile>
#include <QJsonDocument>
#include <QJsonParseError>

namespace flotilla::ui {

QList<QJsonObject> MetricsTail::poll(qint64 maxBytes) {
  QFile file(m_path);
  if (!file.open(QIODevice::ReadOnly)) return {};
  // A file shorter than what we consumed was replaced or truncated: start it again.
  if (file.size() < m_offset) {
    m_offset = 0;
    m_partial.clear();
  }
  if (file.size() == m_offset || !file.seek(m_offset)) return {};
  const QByteArray bytes = file.read(maxBytes);
  m_offset += bytes.size();
  return feed(bytes);
}

QList<QJsonObject> MetricsTail::feed(const QByteArray& bytes) {
  QList<QJsonObject> records;
  qsizetype start = 0;
  while (true) {
    const qsizetype newline = bytes.indexOf('\n', start);
    if (newline < 0) break;
    QByteArray line = m_partial.isEmpty() ? bytes.mid(start, newline - start)
                                          : m_partial + bytes.mid(start, newline - start);
    m_partial.clear();
    start = newline + 1;
    if (line.endsWith('\r')) line.chop(1);
    if (line.trimmed().isEmpty()) continue;
    QJsonParseError error;
    const QJsonDocument doc = QJsonDocument::fromJson(line, &error);
    if (error.error != QJsonParseError::NoError || !doc.isObject()) {
      ++m_skipped;
      continue;
    }
    records.append(doc.object());
    ++m_records;
  }
  m_partial += bytes.mid(start);
  return records;
}

}  // namespace flotilla::ui
