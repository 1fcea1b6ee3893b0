// Work off the UI thread with its result delivered back on it.
#pragma once

#include <QFutureWatcher>
#include <QObject>
#include <QtConcurrent/QtConcurrentRun>

#include <type_traits>
#include <utility>

namespace flotilla::ui {

// Runs `work` on the thread pool, then `done(result)` on `context`'s thread; `done` is dropped
// when `context` is gone by then (the work holds copies of everything it reads).
template <typename Work, typename Done>
void runInBackground(QObject* context, Work work, Done done) {
  using Result = std::invoke_result_t<Work>;
  auto* watcher = new QFutureWatcher<Result>(context);
  QObject::connect(watcher, &QFutureWatcherBase::finished, context, [watcher, done] {
    done(watcher->result());
    watcher->deleteLater();
  });
  watcher->setFuture(QtConcurrent::run(std::move(work)));
}

}  // namespace flotilla::ui
