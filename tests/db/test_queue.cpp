// The run queue's store: order by priority and position, names reserved (NAME-2), user actions
// refused in the wrong state, the scheduler's compare-and-set steps (a lost race changes nothing),
// a requeue to the head, and the one lease per workspace (a second refused, a gone or stale holder
// replaced).
#include <string>

#include "db/errors.h"
#include "db/queue.h"
#include "db/run_store.h"
#include "store_fixture.h"

using namespace flotilla::db;
using namespace store_test;

namespace {

NewQueueEntry entry(const std::string& name, int64_t priority = 0) {
  NewQueueEntry e;
  e.name = name;
  e.config_toml = "[run]\nname = \"" + name + "\"\n";
  e.priority = priority;
  e.places = {"local", "node:b"};
  return e;
}

template <typename F>
std::string refusal(F&& f) {
  try {
    f();
  } catch (const DbError& e) {
    return e.what();
  }
  return "";
}

void test_order_and_names(Database& db) {
  std::string name;
  const int64_t a = add_queue_entry(db, entry("a"), 100, &name);
  CHECK(name == "a");
  const int64_t b = add_queue_entry(db, entry("b"), 101);
  const int64_t urgent = add_queue_entry(db, entry("u", 5), 102);
  const int64_t a2 = add_queue_entry(db, entry("a"), 103, &name);
  CHECK_MSG(name == "a-2", "a taken name gets NAME-2, got %s", name.c_str());
  NewQueueEntry exp = entry("a");
  exp.explicit_name = true;
  CHECK(refusal([&] { add_queue_entry(db, exp, 104); }).find("taken") != std::string::npos);
  auto q = list_queue(db);
  CHECK(q.size() == 4 && q[0].id == urgent && q[1].id == a && q[2].id == b && q[3].id == a2);
  CHECK(q[1].places.size() == 2 && q[1].places[1] == "node:b");

  move_queue_entry(db, a2, MoveTo::kTop, 0, 105);
  q = list_queue(db);
  CHECK(q[1].id == a2);
  move_queue_entry(db, a2, MoveTo::kAfter, b, 106);
  q = list_queue(db);
  CHECK(q[1].id == a && q[2].id == b && q[3].id == a2);
  move_queue_entry(db, b, MoveTo::kBefore, urgent, 107);  // takes the urgent one's priority
  q = list_queue(db);
  CHECK(q[0].id == b && q[0].priority == 5 && q[1].id == urgent);

  pause_queue_entry(db, a, 108);
  CHECK(get_queue_entry(db, "a").state == EntryState::kPaused);
  CHECK(refusal([&] { pause_queue_entry(db, a, 109); }).empty());  // idempotent
  resume_queue_entry(db, a, 110);
  CHECK(get_queue_entry(db, std::to_string(a)).state == EntryState::kQueued);
  cancel_queue_entry(db, a, 111);
  CHECK(find_queue_entry(db, a)->state == EntryState::kCancelled);
  CHECK(list_queue(db).size() == 3 && list_queue(db, true).size() == 4);
  CHECK(refusal([&] { resume_queue_entry(db, a, 112); }).find("cancelled") != std::string::npos);
  // A cancelled entry frees its name.
  add_queue_entry(db, entry("a"), 113, &name);
  CHECK(name == "a");
  CHECK(refusal([&] { get_queue_entry(db, "nope"); }).find("flotilla queue") != std::string::npos);
}

void test_scheduler_steps(Database& db) {
  const int64_t id = add_queue_entry(db, entry("s"), 200);
  CHECK(claim_queue_entry(db, id, "tok1", "local", "on this machine: $0", "{\"chosen\":\"local\"}", 201));
  CHECK(!claim_queue_entry(db, id, "tok2", "local", "", "{}", 202));  // lost the race: nothing changes
  auto e = *find_queue_entry(db, id);
  CHECK(e.state == EntryState::kStarting && e.claimed_by == "tok1" && e.starts == 1 && e.place == "local");
  CHECK(refusal([&] { cancel_queue_entry(db, id, 203); }).find("runs stop") != std::string::npos);
  CHECK(refusal([&] { move_queue_entry(db, id, MoveTo::kTop, 0, 203); }).find("not started") !=
        std::string::npos);

  NewRun nr;
  nr.name = "s";
  nr.run_dir = "/tmp/s";
  const int64_t run = create_run(db, nr);
  CHECK(!set_queue_entry_run(db, id, "tok2", run, 204));  // not the claimer
  CHECK(set_queue_entry_run(db, id, "tok1", run, 204));
  CHECK(mark_queue_entry_running(db, id, "tok1", 205));
  CHECK(!mark_queue_entry_running(db, id, "tok1", 205));
  CHECK(queue_entry_of_run(db, run)->id == id);

  // Preempted: back to the head of its priority with the run kept, the lost work added.
  const int64_t other = add_queue_entry(db, entry("t"), 206);
  CHECK(requeue_queue_entry(db, id, "preempted on node b: resumes from step 40", 0.25, 12, 207));
  e = *find_queue_entry(db, id);
  CHECK(e.state == EntryState::kQueued && e.run_id == run && e.lost_usd == 0.25 && e.lost_steps == 12);
  CHECK(e.claimed_by.empty());
  auto q = list_queue(db);
  size_t pos_id = 99, pos_other = 99;
  for (size_t i = 0; i < q.size(); ++i) {
    if (q[i].id == id) pos_id = i;
    if (q[i].id == other) pos_other = i;
  }
  CHECK_MSG(pos_id < pos_other, "a requeued entry goes to the head of its priority");
  CHECK(claim_queue_entry(db, id, "tok3", "node:c", "", "{}", 208));
  CHECK(find_queue_entry(db, id)->starts == 2);
  CHECK(finish_queue_entry(db, id, EntryState::kDone, "completed", 209));
  CHECK(!finish_queue_entry(db, id, EntryState::kFailed, "late", 210));
  CHECK(find_queue_entry(db, id)->state == EntryState::kDone);

  // A claim whose run never came to be is undone without counting a start.
  CHECK(claim_queue_entry(db, other, "tok3", "local", "", "{}", 211));
  CHECK(unclaim_queue_entry(db, other, "the scheduler stopped before starting it", 212));
  e = *find_queue_entry(db, other);
  CHECK(e.state == EntryState::kQueued && e.starts == 0);
}

void test_lease(Database& db) {
  SchedulerLease one{"t1", 100, "host-a", "boot", "flotilla queue serve", 1000, 1000};
  SchedulerLease two{"t2", 200, "host-a", "boot", "flotilla app", 1001, 1001};
  const auto never_gone = [](const SchedulerLease&) { return false; };
  CHECK(acquire_scheduler_lease(db, one, 30, never_gone).acquired);
  const auto refused = acquire_scheduler_lease(db, two, 30, never_gone);
  CHECK(!refused.acquired && refused.holder && refused.holder->pid == 100 &&
        refused.holder->host == "host-a");
  CHECK(renew_scheduler_lease(db, "t1", 1020));
  two.heartbeat = 1040;  // 20 s after the last heartbeat: still fresh
  CHECK(!acquire_scheduler_lease(db, two, 30, never_gone).acquired);
  // The holder's process is gone (the caller's check): taken over at once.
  const auto taken =
      acquire_scheduler_lease(db, two, 30, [](const SchedulerLease& l) { return l.pid == 100; });
  CHECK(taken.acquired && taken.took_over && taken.holder->token == "t1");
  CHECK(!renew_scheduler_lease(db, "t1", 1050));  // the old holder learns it lost the lease
  CHECK(scheduler_lease(db)->token == "t2");
  // Stale by heartbeat (another host, whose process cannot be checked).
  SchedulerLease three{"t3", 300, "host-b", "boot2", "flotilla app", 1100, 1100};
  CHECK(acquire_scheduler_lease(db, three, 30, never_gone).acquired);
  release_scheduler_lease(db, "t2");  // not the holder: nothing happens
  CHECK(scheduler_lease(db)->token == "t3");
  release_scheduler_lease(db, "t3");
  CHECK(!scheduler_lease(db));
}

void test_sweeps(Database& db) {
  add_sweep(db, {"lr", "/tmp/c.toml", "{\"optim.lr\":[1e-4,3e-4]}", "{}", 0});
  CHECK(refusal([&] { add_sweep(db, {"lr", "", "{}", "{}", 0}); }).find("--name") != std::string::npos);
  CHECK(find_sweep(db, "lr")->config_path == "/tmp/c.toml" && list_sweeps(db).size() == 1);
  NewQueueEntry e = entry("lr-1");
  e.group = "lr";
  add_queue_entry(db, e, 300);
  CHECK(list_queue_group(db, "lr").size() == 1);
}

}  // namespace

int main() {
  const fs::path dir = scratch("db_queue", "all");
  Database db((dir / "queue.db").string());
  test_order_and_names(db);
  test_scheduler_steps(db);
  test_lease(db);
  test_sweeps(db);
  return flotilla_test::summary("test_queue");
}
