// Runs a blocking store call on the thread pool and hands its result (or its error message) back
// on the owner's thread: the Compare and Costs pages never touch SQLite on the UI thread.
//
// Decision: exceptions are caught on the worker and carried back as text in a variant, so a
// failed query can never escape into Qt's event loop from a pool thread.
#pragma once

#include <QFutureWatcher>
#include <QObject>
#include <QString>
#include <QtConcurrent/QtConcurrentRun>

#include <exception>
#include <functional>
#include <utility>
#include <variant>

namespace flotilla::ui {

template <typename T>
using Outcome = std::variant<T, QString>;

template <typename T, typename F>
void runAsync(QObject* owner, F work, std::function<void(Outcome<T>)> done) {
  auto* watcher = new QFutureWatcher<Outcome<T>>(owner);
  QObject::connect(watcher, &QFutureWatcher<Outcome<T>>::finished, owner, [watcher, done] {
    Outcome<T> r = watcher->result();
    watcher->deleteLater();
    done(std::move(r));
  });
  watcher->setFuture(QtConcurrent::run([work]() -> Outcome<T> {
    try {
      return work();
    } catch (const std::exception& e) {
      return QString::fromStdString(e.what());
    }
  }));
}

}  // namespace flotilla::ui
