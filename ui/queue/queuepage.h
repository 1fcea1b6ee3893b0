// The Queue page (issue 37 item 1): the runs waiting to start and the ones the scheduler started,
// each with its state, place, priority, deadline, money limit and why it waits; the selected
// entry's decision in full (every place weighed, DecisionView); the user's actions (Cancel, Pause,
// Resume, Move up, Move down, To top, Add config…); and who serves the queue: this window, `flotilla
// queue serve` elsewhere (pid and host from the store's lease), or nobody, with the toggle "Serve the
// queue from this window".
//
// Decision: the page polls the store once a second while it is shown (as the Runs page's store
// feed does) on a read connection of its own off the GUI thread; actions write through the app's
// writer and refresh at once. An action the store refuses shows the store's own sentence on the
// page's message line in the error colour, as the Runs page shows a refused start. Each action is a
// public slot acting on the selected entry, so tests drive exactly what a click does; the Add
// dialog's answers go through a replaceable hook.
#pragma once

#include <QPointer>
#include <QWidget>

#include <functional>
#include <optional>

#include "db/queue.h"
#include "ui/queue/queuestore.h"

class QCheckBox;
class QLabel;
class QPushButton;
class QTableView;
class QTimer;

namespace flotilla::ui {

class AddQueueDialog;
class AppScheduler;
class DecisionView;
class QueueModel;
class StoreService;

class QueuePage : public QWidget {
  Q_OBJECT

 public:
  // store: the app's run store (nullptr: no workspace database, nothing to show or change).
  explicit QueuePage(StoreService* store, QWidget* parent = nullptr);

  // The window's scheduler: its status shows here and the toggle switches it.
  void setScheduler(AppScheduler* scheduler);

  QueueModel* model() const { return m_model; }
  QTableView* table() const { return m_table; }
  DecisionView* decision() const { return m_decision; }
  QCheckBox* serveToggle() const { return m_serve; }
  QPushButton* button(QueueAction action) const;
  QPushButton* addButton() const { return m_add; }
  QString messageText() const;
  QString schedulerText() const;
  qint64 selectedId() const;
  // Selects the entry (when listed now; else once a refresh lists it).
  void selectEntry(qint64 id);
  bool busy() const { return m_loading; }

  // Answers the Add dialog instead of showing it (tests set its widgets); true: accepted.
  std::function<bool(AddQueueDialog& dialog)> answerAdd;

 public slots:
  void refresh();
  // The user's action on the selected entry; false (and the reason shown) when refused.
  bool act(flotilla::ui::QueueAction action);
  // "Add config…": the dialog, then the entry; its id (0: cancelled or refused, the reason shown).
  qint64 addConfig();

 signals:
  void loaded();

 protected:
  void showEvent(QShowEvent* event) override;
  void hideEvent(QHideEvent* event) override;

 private:
  void apply(QueueSnapshot snapshot);
  void showMessage(const QString& text, bool error);
  void updateActions();
  void updateSchedulerLine();
  void showSelected();

  StoreService* m_store;
  QPointer<AppScheduler> m_scheduler;
  QueueModel* m_model;
  QTableView* m_table;
  DecisionView* m_decision;
  QLabel* m_schedulerLine;
  QCheckBox* m_serve;
  QLabel* m_message;
  QPushButton* m_add;
  QList<QPushButton*> m_actions;  // in QueueAction order
  QTimer* m_poll;
  std::optional<db::SchedulerLease> m_lease;
  qint64 m_wantSelected = 0;
  quint64 m_generation = 0;
  bool m_loading = false;
};

}  // namespace flotilla::ui
