// Ingesting the worker's metrics protocol (docs/metrics-protocol.md) into the run store.
//
// Decision: the two sources differ only in where the bytes come from. A stream (a local child's
// stdout) is fed in arbitrary chunks and never blocks: parsed rows go to the Writer, whose failures
// drop rows with a counter (the run's metrics.jsonl still holds them for a later file ingest). A
// file (a remote run's metrics.jsonl, or a local one after the fact) is read from the byte offset
// committed in ingest_offsets, and the new offset is written in the same transaction as the rows it
// covers, so a restart resumes exactly after the last committed line: nothing lost, nothing
// doubled. In both, a line is complete only with its '\n' (a torn last line waits or is dropped at
// end of stream), bad lines are counted and skipped, and re-ingested steps replace their values.
// Lines are parsed by the engine's typed reader (engine/train/metrics_reader.h), the protocol's
// only parser. Ingest records what the worker said (metrics, checkpoints, events, the summary,
// facts from run_start) and never changes a run's status: that is the runs layer's decision
// (runs/run_status.h), which has the exit code and knows who asked for a stop.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "db/writer.h"
#include "engine/train/metrics_reader.h"

namespace flotilla::db {

struct IngestStats {
  uint64_t lines = 0;       // complete lines seen
  uint64_t records = 0;     // protocol records applied
  uint64_t rows = 0;        // metric rows queued
  uint64_t bad_lines = 0;   // not JSON, not an object, or missing v/type
  uint64_t skipped = 0;     // another protocol version, or a type this build does not store
  uint64_t torn_bytes = 0;  // bytes of an incomplete last line dropped at end of stream
  std::string last_bad;     // the first 120 bytes of the most recent bad line
};

class Ingestor {
 public:
  Ingestor(Writer& writer, int64_t run_id);

  // Stream input: any chunking. Complete lines are parsed at once; rows are queued in batches.
  void feed(std::string_view bytes);
  // Queues what is parsed but not yet queued; returns its ticket (0 when nothing was pending).
  Ticket submit_pending();
  // End of stream: drops a torn last line (counted), queues the rest, returns the last ticket.
  Ticket finish();

  // Parses complete lines in `text` (which must end at a line boundary) into the pending batch.
  void parse_lines(std::string_view text);
  // Queues the pending batch plus `also` (same transaction); returns the ticket.
  Ticket submit_with(WriteJob also);

  const IngestStats& stats() const { return stats_; }
  // Called on the feeding thread for every record applied (parsed, queued, not yet committed).
  std::function<void(const MetricsRecord&)> on_record;
  size_t batch_rows = 5000;  // queue a batch once this many rows are pending

 private:
  void parse_line(std::string_view line);
  Writer& writer_;
  int64_t run_id_;
  LineSplitter split_;
  std::vector<MetricRow> rows_;
  std::vector<WriteJob> ops_;
  Ticket last_ticket_ = 0;
  IngestStats stats_;
};

// The committed byte offset of (run, source), 0 when none.
int64_t committed_offset(const Database& db, int64_t run_id, const std::string& source);
// Records `offset` as the committed position of (run, source); call it inside the transaction
// that stores the rows the offset covers (Ingestor::submit_with), so both commit or neither.
void set_committed_offset(Database& db, int64_t run_id, const std::string& source, int64_t offset);

class FileIngestor {
 public:
  // `source` names the offset row (default: the path).
  FileIngestor(Writer& writer, int64_t run_id, std::string path, std::string source = "");
  // Reads complete lines from the committed offset to the end of the file, commits their rows and
  // the new offset in one transaction, and waits for it. Returns the bytes consumed (0: nothing new
  // or the file is missing). Throws DbError when the commit fails (the offset stays where it was).
  int64_t poll();
  int64_t offset() const { return offset_; }
  const IngestStats& stats() const { return ingestor_.stats(); }
  Ingestor& ingestor() { return ingestor_; }

 private:
  Writer& writer_;
  int64_t run_id_;
  std::string path_, source_;
  int64_t offset_ = 0;
  Ingestor ingestor_;
};

}  // namespace flotilla::db
