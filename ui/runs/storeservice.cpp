// The app's run store service (see storeservice.h).
#include "ui/runs/storeservice.h"

#include <QDateTime>
#include <QMetaObject>

#include <algorithm>

#include "db/errors.h"
#include "db/queries.h"
#include "db/sql.h"
#include "db/writer.h"

namespace flotilla::ui {
namespace {

std::string s(const QString& text) { return text.toStdString(); }

}  // namespace

StoreService::StoreService(const QString& databasePath, QObject* parent, int pollMs)
    : QObject(parent), m_path(databasePath) {
  qRegisterMetaType<flotilla::ui::RunRow>();
  qRegisterMetaType<QVector<flotilla::ui::RunRow>>();
  m_writer = std::make_unique<db::Writer>(s(databasePath));
  m_ingest = std::make_unique<IngestThread>(*m_writer);
  // Callbacks run on the ingest thread: hop to this object's thread.
  m_ingest->on_ingested = [this](int64_t id, int64_t offset) {
    QMetaObject::invokeMethod(this, [this, id, offset] { emit ingested(id, offset); }, Qt::QueuedConnection);
  };
  m_ingest->on_finished = [this](int64_t id, db::RunStatus status) {
    const QString name = QString::fromLatin1(db::to_string(status));
    QMetaObject::invokeMethod(this, [this, id, name] {
      emit runEnded(id, name);
      refresh();
    }, Qt::QueuedConnection);
  };
  m_ingest->on_error = [this](int64_t id, const std::string& message) {
    const QString text = tr("Storing the metrics of run %1 failed: %2").arg(id).arg(QString::fromStdString(message));
    QMetaObject::invokeMethod(this, [this, text] { emit storeError(text); }, Qt::QueuedConnection);
  };

  m_poller = new StorePoller(databasePath, pollMs);
  m_poller->moveToThread(&m_pollThread);
  connect(&m_pollThread, &QThread::finished, m_poller, &QObject::deleteLater);
  connect(m_poller, &StorePoller::snapshot, this, [this](const QVector<RunRow>& rows) {
    m_last = rows;
    emit snapshotReady(rows);
  });
  connect(m_poller, &StorePoller::failed, this, &StoreService::storeError);
  m_pollThread.setObjectName(QStringLiteral("store-poller"));
  m_pollThread.start();
  QMetaObject::invokeMethod(m_poller, &StorePoller::start, Qt::QueuedConnection);
}

StoreService::~StoreService() {
  QMetaObject::invokeMethod(m_poller, &StorePoller::stopPolling, Qt::BlockingQueuedConnection);
  m_pollThread.quit();
  m_pollThread.wait();
  m_ingest.reset();  // drains tracked runs once, then joins
  m_writer.reset();  // drains the queue, then joins
}

qint64 StoreService::createRun(const db::NewRun& run, int devices, QString* error) {
  int64_t id = 0;
  try {
    m_writer->run([&](db::Database& db) {
      db::write_tx(db, [&] {
        id = db::create_run(db, run);
        const int64_t node = db::ensure_node(db, "local", "local");
        db::attach_node(db, id, node, std::max(1, devices));
      });
    });
  } catch (const db::DbError& e) {
    if (error) *error = QString::fromUtf8(e.what());
    return 0;
  }
  refresh();
  return id;
}

qint64 StoreService::createFork(qint64 parentId, const QString& name, const std::string& configToml,
                                const std::string& configJson, const QString& runDir, int devices,
                                QString* error) {
  int64_t id = 0;
  try {
    m_writer->run([&](db::Database& db) {
      db::write_tx(db, [&] {
        id = db::fork_run(db, parentId, db::unique_run_name(db, s(name)));
        db::Stmt update(db, "UPDATE runs SET config_toml = ?2, config_json = ?3 WHERE id = ?1");
        update.bind(1, id).bind(2, configToml).bind(3, configJson).run();
        db::set_run_dir(db, id, s(runDir));
        db::attach_node(db, id, db::ensure_node(db, "local", "local"), std::max(1, devices));
      });
    });
  } catch (const db::DbError& e) {
    if (error) *error = QString::fromUtf8(e.what());
    return 0;
  }
  refresh();
  return id;
}

QString StoreService::uniqueName(const QString& base) {
  std::string name = s(base);
  try {
    m_writer->run([&](db::Database& db) { name = db::unique_run_name(db, name); });
  } catch (const db::DbError&) {
  }
  return QString::fromStdString(name);
}

std::optional<db::Run> StoreService::run(qint64 id) {
  std::optional<db::Run> out;
  try {
    m_writer->run([&](db::Database& db) { out = db::get_run(db, id); });
  } catch (const db::DbError&) {
  }
  return out;
}

QVector<db::Run> StoreService::runningLocalRuns() {
  QVector<db::Run> out;
  try {
    m_writer->run([&](db::Database& db) {
      db::RunFilter filter;
      filter.statuses = {db::RunStatus::kRunning};
      for (const db::RunListItem& item : db::list_runs(db, filter))
        if (item.run.target == "local") out.append(item.run);
    });
  } catch (const db::DbError& e) {
    emit storeError(QString::fromUtf8(e.what()));
  }
  return out;
}

void StoreService::setStatus(qint64 id, db::RunStatus to, const QString& reason, std::optional<int> exitCode) {
  const std::string why = s(reason);
  const std::optional<int64_t> code = exitCode ? std::optional<int64_t>(*exitCode) : std::nullopt;
  m_writer->submit([id, to, why, code](db::Database& db) {
    const db::Run now = db::get_run(db, id);
    if (now.status != to && db::transition_allowed(now.status, to)) db::set_status(db, id, to, 0, why, code);
  });
}

void StoreService::addEvent(qint64 id, const QString& level, const QString& message) {
  const std::string l = s(level), m = s(message);
  const double now = static_cast<double>(QDateTime::currentMSecsSinceEpoch()) / 1000.0;
  m_writer->submit([id, l, m, now](db::Database& db) { db::add_event(db, id, now, "event", l, m); });
}

bool StoreService::setTags(qint64 id, const QStringList& tags, QString* error) {
  std::vector<std::string> list;
  for (const QString& t : tags)
    if (!t.trimmed().isEmpty()) list.push_back(s(t.trimmed()));
  try {
    m_writer->run([&](db::Database& db) { db::set_tags(db, id, list); });
  } catch (const db::DbError& e) {
    if (error) *error = QString::fromUtf8(e.what());
    return false;
  }
  refresh();
  return true;
}

bool StoreService::setNotes(qint64 id, const QString& notes, QString* error) {
  try {
    m_writer->run([&](db::Database& db) { db::set_notes(db, id, s(notes)); });
  } catch (const db::DbError& e) {
    if (error) *error = QString::fromUtf8(e.what());
    return false;
  }
  refresh();
  return true;
}

bool StoreService::deleteRun(qint64 id, QString* error) {
  try {
    m_writer->run([&](db::Database& db) {
      const db::Run r = db::get_run(db, id);
      if (r.status == db::RunStatus::kRunning)
        throw db::DbError(db::DbErrorKind::kInvalid,
                          "run " + r.name + " is running: stop it before deleting it");
      db::delete_run(db, id);
    });
  } catch (const db::DbError& e) {
    if (error) *error = QString::fromUtf8(e.what());
    return false;
  }
  refresh();
  return true;
}

void StoreService::track(qint64 id, const QString& metricsPath) { m_ingest->track(id, s(metricsPath)); }
void StoreService::untrack(qint64 id) { m_ingest->untrack(id); }
void StoreService::finish(qint64 id, const QString& metricsPath, RunEnd end) {
  m_ingest->finish(id, s(metricsPath), std::move(end));
}

void StoreService::refresh() { QMetaObject::invokeMethod(m_poller, &StorePoller::refresh, Qt::QueuedConnection); }

double StoreService::spendPerHour() const {
  double sum = 0;
  for (const RunRow& r : m_last) sum += r.usdPerHour;
  return sum;
}

}  // namespace flotilla::ui
