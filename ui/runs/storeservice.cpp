// The app's run store service (see storeservice.h).
#include "ui/runs/storeservice.h"

#include <QDateTime>
#include <QMetaObject>

#include <algorithm>

#include "db/costs.h"
#include "db/errors.h"
#include "db/queries.h"
#include "db/writer.h"
#include "runs/stale_runs.h"

namespace flotilla::ui {
namespace {

std::string s(const QString& text) { return text.toStdString(); }

}  // namespace

StoreService::StoreService(const QString& databasePath, QObject* parent, int pollMs)
    : QObject(parent), m_path(databasePath) {
  qRegisterMetaType<flotilla::ui::RunRow>();
  qRegisterMetaType<QVector<flotilla::ui::RunRow>>();
  m_writer = std::make_unique<db::Writer>(s(databasePath));
  // The pricing catalogue, seeded as the CLI seeds it (db::ensure_pricing_seeded): a workspace the
  // app creates prices runs and resets to list prices like one `flotilla` made.
  m_writer->run([](db::Database& db) { db::ensure_pricing_seeded(db); });

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
  if (m_settle) {
    m_settle->wait();
    delete m_settle;
  }
  m_writer.reset();  // drains the queue, then joins
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

void StoreService::settleStaleRuns(const QString& origin) {
  if (m_settle && !m_settle->isFinished()) return;  // one settling at a time; it covers every run
  if (m_settle) {
    m_settle->wait();
    delete m_settle;
  }
  m_settle = QThread::create([this, who = s(origin)] {
    for (const runs::SettledRun& r : runs::settle_stale_local_runs(*m_writer, who)) {
      if (r.removed) {  // a start that never trained: its row is gone, there is no end to announce
        QMetaObject::invokeMethod(
            this, [this] { refresh(); }, Qt::QueuedConnection);
        continue;
      }
      const qint64 id = r.run_id;
      const QString status = QString::fromLatin1(db::to_string(r.status));
      QMetaObject::invokeMethod(
          this,
          [this, id, status] {
            emit runEnded(id, status);
            refresh();
          },
          Qt::QueuedConnection);
    }
  });
  m_settle->start();
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

bool StoreService::storeEval(qint64 id, qint64 step, const runs::EvalOutcome& outcome, QStringList* names,
                             QString* error) {
  std::vector<std::string> stored;
  try {
    m_writer->run([&](db::Database& db) { stored = runs::store_eval(db, id, step, outcome); });
  } catch (const std::exception& e) {  // DbError, or a step the evaluation cannot be stored at
    if (error) *error = QString::fromUtf8(e.what());
    return false;
  }
  if (names)
    for (const auto& n : stored) *names << QString::fromStdString(n);
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
      if (const std::string why = runs::live_worker_delete_refusal(r); !why.empty())
        throw db::DbError(db::DbErrorKind::kInvalid, why);
      db::delete_run(db, id);
    });
  } catch (const db::DbError& e) {
    if (error) *error = QString::fromUtf8(e.what());
    return false;
  }
  refresh();
  return true;
}

void StoreService::refresh() {
  QMetaObject::invokeMethod(m_poller, &StorePoller::refresh, Qt::QueuedConnection);
}

double StoreService::spendPerHour() const {
  double sum = 0;
  for (const RunRow& r : m_last) sum += r.usdPerHour;
  return sum;
}

}  // namespace flotilla::ui
