// What a shard pattern holds, for the wizard's Data page: the files a path or glob matches and
// their token counts, read from the shard headers by the engine's own reader (engine/data).
// Plain functions, run on a worker thread by the page (a dataset can be hundreds of files).
#pragma once

#include <QString>
#include <QStringList>

namespace flotilla::ui {

struct ShardScan {
  QString pattern;
  QStringList files;
  qint64 tokens = 0;
  QString error;  // the engine's message when nothing matches or a shard is damaged
};

// Expands pattern (a file, a glob, or a folder: then <folder>/train_*.bin or val_*.bin by `role`)
// and reads each header. Never throws.
ShardScan scanShards(const QString& pattern);

// A folder becomes its shards' glob: <dir>/<role>_*.bin; anything else is returned as it is.
QString shardPattern(const QString& pathOrGlob, const QString& role);

// "3 shards, 12.4 M tokens" or the error.
QString describeScan(const ShardScan& scan);

}  // namespace flotilla::ui
