// Shard scanning (see shardscan.h).
#include "ui/wizard/shardscan.h"

#include <QDir>
#include <QFileInfo>

#include <exception>

#include "engine/data/loader.h"
#include "ui/wizard/wizardformat.h"

namespace flotilla::ui {

QString shardPattern(const QString& pathOrGlob, const QString& role) {
  const QFileInfo info(pathOrGlob);
  if (!pathOrGlob.isEmpty() && info.isDir())
    return QDir(pathOrGlob).filePath(role + QStringLiteral("_*.bin"));
  return pathOrGlob;
}

ShardScan scanShards(const QString& pattern) {
  ShardScan scan;
  scan.pattern = pattern;
  if (pattern.isEmpty()) return scan;
  try {
    for (const std::string& path : flotilla::expand_shards(pattern.toStdString())) {
      scan.files << QString::fromStdString(path);
      scan.tokens += flotilla::inspect_shard(path).num_tokens;
    }
  } catch (const std::exception& e) {
    scan.error = QString::fromUtf8(e.what());
  }
  return scan;
}

QString describeScan(const ShardScan& scan) {
  if (!scan.error.isEmpty()) return scan.error;
  if (scan.pattern.isEmpty()) return QObject::tr("none");
  const QString tokens = formatCount(static_cast<double>(scan.tokens));
  return scan.files.size() == 1 ? QObject::tr("1 shard, %1 tokens").arg(tokens)
                                : QObject::tr("%1 shards, %2 tokens").arg(scan.files.size()).arg(tokens);
}

}  // namespace flotilla::ui
