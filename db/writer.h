// The run store's single writer: one thread, one connection, a job queue batched into transactions.
//
// Decision: producers never wait for the disk. append()/submit() queue work and return a ticket at
// once; the writer thread takes everything queued (up to max_batch_rows metric rows), runs it in
// one BEGIN IMMEDIATE transaction and marks the tickets done after COMMIT returns. A batch that
// fails is rolled back and its jobs retried one per transaction, so one bad job (or a full disk,
// docs/reliability.md D3) fails only itself: its ticket reports failure, stats() counts the dropped
// rows and keeps the last error, and the training that produced the rows is never blocked. When
// the queue already holds max_queued_rows, new rows are dropped and counted the same way.
//
// Durability: a ticket reported committed survives the app being killed (WAL, synchronous=NORMAL;
// docs/reliability.md D1). flush() additionally commits a marker with synchronous=FULL, which fsyncs
// the WAL, so everything acknowledged before it also survives an OS crash or power loss.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "db/database.h"
#include "db/errors.h"

namespace flotilla::db {

struct MetricRow {
  int64_t run_id = 0;
  std::string name;
  int64_t step = 0;
  double value = 0;
  double time = 0;  // Unix seconds
};

using Ticket = uint64_t;
using WriteJob = std::function<void(Database&)>;

struct WriterOptions {
  OpenOptions open;                  // how the writer's connection is opened (create, busy timeout)
  size_t max_batch_rows = 50000;     // metric rows per transaction
  size_t max_queued_rows = 4000000;  // rows waiting beyond this are dropped (never block a producer)
};

struct WriterStats {
  uint64_t committed_rows = 0;  // metric rows committed
  uint64_t transactions = 0;    // committed transactions
  uint64_t failed_jobs = 0;     // jobs rolled back (their rows are counted in dropped_rows)
  uint64_t dropped_rows = 0;    // metric rows not stored (failed job or full queue)
  size_t queued_rows = 0;       // rows waiting now
  std::string last_error;       // the most recent failure's message ("" if none)
  // Its kind (DbError's; kQuery for anything else): a full disk, a lock held by another program
  // and a vanished run are told apart from it, not from the message.
  DbErrorKind last_error_kind = DbErrorKind::kQuery;
};

class Writer {
 public:
  // Opens `path` (creating and migrating it as Database does) and starts the thread. Throws DbError.
  explicit Writer(const std::string& path, const WriterOptions& options = {});
  // Drains the queue, then stops the thread and closes the connection.
  ~Writer();
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  // Queues metric rows (replacing any stored value at the same run, name and step) and, when given,
  // `also` in the same transaction (e.g. an ingest offset). Thread-safe; never blocks on the disk.
  Ticket append(std::vector<MetricRow> rows, WriteJob also = {});
  // Queues any write. The job runs inside the batch transaction: use write_tx() for nested atomicity
  // and throw DbError to fail (the job's changes are then rolled back).
  Ticket submit(WriteJob job);
  // Queues a job and waits for it; rethrows the job's DbError (the synchronous form for commands).
  void run(const WriteJob& job);

  // Blocks until `ticket` is done; true when committed, false when it failed or was dropped.
  bool wait(Ticket ticket);
  // Everything queued before this call is committed or failed, and the committed part is fsynced.
  // Returns false when any job since the previous flush() failed (stats().last_error says why).
  bool flush();

  WriterStats stats() const;
  const std::string& path() const { return path_; }

 private:
  struct Job {
    Ticket ticket = 0;
    std::vector<MetricRow> rows;
    WriteJob work;
    bool flush_marker = false;
    std::exception_ptr* error_out = nullptr;  // run(): where to put the job's exception
  };
  void loop();
  void execute(std::vector<Job>& batch);
  void apply(Job& job);
  void finish(const std::vector<Job>& jobs, bool ok, const std::string& error,
              DbErrorKind kind = DbErrorKind::kQuery);

  std::string path_;
  WriterOptions options_;
  std::unique_ptr<Database> db_;
  struct Sink;
  std::unique_ptr<Sink> sink_;

  mutable std::mutex mutex_;
  std::condition_variable wake_;  // the writer: work arrived or stop
  std::condition_variable done_;  // waiters: tickets finished
  std::deque<Job> queue_;
  size_t queued_rows_ = 0;
  Ticket next_ticket_ = 1;
  Ticket finished_ = 0;  // every ticket <= finished_ is done
  std::unordered_set<Ticket> failed_;
  bool failed_since_flush_ = false;
  bool stop_ = false;
  WriterStats stats_;
  std::thread thread_;
};

}  // namespace flotilla::db
