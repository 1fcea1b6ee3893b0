// Runs table snapshots (see runsnapshot.h).
#include "ui/runs/runsnapshot.h"

#include <QDateTime>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTimer>

#include "db/costs.h"
#include "db/database.h"
#include "db/errors.h"
#include "db/queries.h"
#include "runs/run_speed.h"

namespace flotilla::ui {
namespace {

QString q(const std::string& s) { return QString::fromStdString(s); }

void configFacts(const std::string& json, RunRow& row) {
  const QJsonObject config = QJsonDocument::fromJson(QByteArray::fromStdString(json)).object();
  const QJsonObject parallel = config.value(QLatin1String("parallel")).toObject();
  const QJsonObject train = config.value(QLatin1String("train")).toObject();
  row.plannedSteps = train.value(QLatin1String("steps")).toInteger();
  if (!parallel.isEmpty()) {
    row.layout = QStringLiteral("dp%1 × tp%2 × pp%3")
                     .arg(parallel.value(QLatin1String("dp")).toInt(1))
                     .arg(parallel.value(QLatin1String("tp")).toInt(1))
                     .arg(parallel.value(QLatin1String("pp")).toInt(1));
  }
}

}  // namespace

QVector<RunRow> readRunRows(const db::Database& db, double now) {
  // Costs and running time at 0 ("the present") are measured by the monotonic clock (db/costs.h),
  // as every other page and `flotilla` read them; `now` stays a wall time for readAt.
  const double costs_at = now;
  if (now <= 0) now = db::now_seconds();
  QVector<RunRow> rows;
  for (const db::RunListItem& item : db::list_runs(db)) {
    const db::Run& r = item.run;
    RunRow row;
    row.id = r.id;
    row.name = q(r.name);
    row.status = QString::fromLatin1(db::to_string(r.status));
    row.statusNote = q(r.status_note);
    row.priceUsdPerHour = r.usd_per_hour.value_or(0);
    row.priceSource = q(r.price_source);
    row.budgetUsd = r.budget_usd.value_or(0);
    row.target = q(r.target);
    row.runDir = q(r.run_dir);
    for (const std::string& tag : r.tags) row.tags << q(tag);
    row.notes = q(r.notes);
    row.parameters = r.parameters.value_or(0);
    configFacts(r.config_json, row);
    if (row.layout.isEmpty() && r.world_size) row.layout = QStringLiteral("%1 ranks").arg(*r.world_size);
    row.lastStep = item.last_step;
    row.checkpoints = item.checkpoints;
    row.hasLoss = item.last_loss.has_value();
    row.loss = item.last_loss.value_or(0);
    // The run's figures over the whole run (runs/run_speed.h), never the last step's.
    const runs::RunSpeed speed = runs::run_speed(db, r);
    row.tokensPerSec = speed.tokens_per_s;
    row.mfu = speed.mfu;
    if (r.status == db::RunStatus::kRunning) row.secondsPerStep = runs::measured_seconds_per_step(db, r.id);
    row.createdAt = r.created_at;
    row.startedAt = r.started_at.value_or(0);
    row.endedAt = r.ended_at.value_or(0);
    row.parentId = r.parent_id.value_or(0);
    row.parentKind = q(r.parent_kind);
    const std::vector<db::Accrual> accruals = db::run_accruals(db, r.id);
    for (const db::Accrual& a : accruals) {
      row.costUsd += a.usd(costs_at);
      if (!a.end) row.usdPerHour += a.usd_per_hour;
    }
    row.runningSeconds = db::run_time_running(db, r, costs_at);
    row.readAt = now;
    rows.append(row);
  }
  return rows;
}

StorePoller::StorePoller(const QString& databasePath, int intervalMs)
    : m_path(databasePath), m_interval(intervalMs) {}

StorePoller::~StorePoller() = default;

void StorePoller::start() {
  if (!m_timer) {
    m_timer = new QTimer(this);
    m_timer->setInterval(m_interval);
    connect(m_timer, &QTimer::timeout, this, &StorePoller::refresh);
  }
  m_timer->start();
  refresh();
}

void StorePoller::stopPolling() {
  if (m_timer) m_timer->stop();
  m_db.reset();
}

void StorePoller::refresh() {
  try {
    if (!m_db) {
      db::OpenOptions options;
      options.create = false;
      options.quick_check = false;  // the app checked it at start; the writer owns the file
      m_db = std::make_unique<db::Database>(m_path.toStdString(), options);
    }
    emit snapshot(readRunRows(*m_db, 0));  // the present
  } catch (const db::DbError& e) {
    m_db.reset();
    emit failed(QString::fromUtf8(e.what()));
  }
}

}  // namespace flotilla::ui
