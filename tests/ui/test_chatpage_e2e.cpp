// The Chat page with the real worker (`flotilla-worker chat`) on two tiny chat models trained here
// (tests/tools/chat_fixture.h: the same model at step 160, which answers its questions, and at step
// 20), both recorded in a real workspace store:
// - the page lists the store's runs and each run's checkpoints, newest first;
// - a message streams in (several deltas, the buttons say an answer is coming) and ends as the
//   model's greedy answer, with tokens/s in the status; the conversation keeps both turns;
// - Stop ends a 100000-token answer within seconds, and the page can send again;
// - the worker killed mid-answer: the pane says so, and the next message starts a fresh worker
//   that answers; a folder that is no checkpoint: the pane says the model could not be loaded and
//   why (the worker's last stderr line);
// - side by side: both checkpoints answer the same message, each in its pane (a screenshot of
//   the two panes is saved for the docs).
#include <signal.h>

#include <QCheckBox>
#include <QComboBox>
#include <QDir>
#include <QDoubleSpinBox>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSignalSpy>
#include <QSpinBox>
#include <QTemporaryDir>
#include <QtTest>

#include "chat_fixture.h"
#include "db/database.h"
#include "db/run_store.h"
#include "ui/chat/chatpage.h"
#include "ui/chat/chatpane.h"
#include "ui/chat/chatworker.h"

using flotilla::ui::ChatPage;
using flotilla::ui::ChatPane;
using flotilla::ui::ChatWorker;

class TestChatPage : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase();
  void listsTheStoresRunsAndCheckpoints();
  void streamsAnAnswer();
  void stopEndsALongAnswer();
  void survivesTheWorkerDying();
  void twoCheckpointsSideBySide();

 private:
  // A page on the workspace store, shown, its runs listed.
  std::unique_ptr<ChatPage> makePage();
  void choose(ChatPane* pane, const QString& run);
  void ask(ChatPage& page, const QString& text);
  void startLongAnswer(ChatPage& page, QSignalSpy& deltas);

  QTemporaryDir m_tmp;
  QString m_db, m_late, m_early;
};

void TestChatPage::initTestCase() {
  QVERIFY(m_tmp.isValid());
  const std::string root = m_tmp.path().toStdString();
  std::string log;
  m_late = QString::fromStdString(flotilla_test::make_chat_run(root, 160, &log, "late"));
  QVERIFY2(!m_late.isEmpty(), log.c_str());
  m_early = QString::fromStdString(flotilla_test::make_chat_run(root, 20, &log, "early"));
  QVERIFY2(!m_early.isEmpty(), log.c_str());
  m_db = m_tmp.filePath(QStringLiteral("flotilla.db"));
  flotilla::db::Database db(m_db.toStdString());
  for (const auto& [name, dir] : {std::pair{"chat-early", m_early}, std::pair{"chat-late", m_late}}) {
    flotilla::db::NewRun run;
    run.name = name;
    run.run_dir = dir.toStdString();
    flotilla::db::create_run(db, run);
  }
}

std::unique_ptr<ChatPage> TestChatPage::makePage() {
  auto page = std::make_unique<ChatPage>(m_db, QStringLiteral(FLOTILLA_WORKER_PATH));
  page->resize(1400, 850);
  page->show();
  // The store's two runs, then the two folder entries.
  for (int i = 0; i < 2; ++i) {
    QComboBox* runs = page->pane(i)->runBox();
    if (!QTest::qWaitFor([runs] { return runs->count() == 4; }, 10000)) return page;
  }
  return page;
}

void TestChatPage::choose(ChatPane* pane, const QString& run) {
  const int at = pane->runBox()->findText(run);
  QVERIFY2(at >= 0, qPrintable(run));
  pane->runBox()->setCurrentIndex(at);
}

void TestChatPage::ask(ChatPage& page, const QString& text) {
  page.promptEdit()->setPlainText(text);
  QVERIFY(page.sendButton()->isEnabled());
  page.sendButton()->click();
}

void TestChatPage::listsTheStoresRunsAndCheckpoints() {
  auto page = makePage();
  ChatPane* pane = page->pane(0);
  QCOMPARE(pane->runBox()->count(), 4);
  QCOMPARE(pane->runBox()->itemText(0), QStringLiteral("chat-late"));  // newest first
  choose(pane, QStringLiteral("chat-late"));
  QCOMPARE(pane->checkpointBox()->count(), 1);
  QCOMPARE(pane->checkpointBox()->itemText(0), QStringLiteral("step 160 (newest)"));
  QCOMPARE(QDir(pane->sourceCheckpoint()).dirName(), QStringLiteral("step-00000160"));
  QVERIFY(pane->sourceHfModel().isEmpty());
  pane->setHfModel(QStringLiteral("org/model"));
  QVERIFY(pane->sourceCheckpoint().isEmpty());
  QCOMPARE(pane->sourceHfModel(), QStringLiteral("org/model"));
  QVERIFY(pane->pathEdit()->isVisibleTo(page.get()) && !pane->checkpointBox()->isVisibleTo(page.get()));
}

void TestChatPage::streamsAnAnswer() {
  auto page = makePage();
  ChatPane* pane = page->pane(0);
  choose(pane, QStringLiteral("chat-late"));
  page->temperatureBox()->setValue(0);
  QSignalSpy deltas(pane->worker(), &ChatWorker::delta);
  ask(*page, QString::fromUtf8(flotilla_test::chat_fixture_france()));
  QVERIFY(!page->sendButton()->isEnabled() && page->stopButton()->isEnabled());
  QVERIFY(page->promptEdit()->toPlainText().isEmpty());
  QTRY_VERIFY_WITH_TIMEOUT(!pane->isGenerating(), 60000);
  QCOMPARE(pane->lastStop(), QStringLiteral("end token"));
  QCOMPARE(pane->lastAnswer(), QStringLiteral("The capital of France is Paris."));
  QVERIFY2(deltas.count() > 1, qPrintable(QString::number(deltas.count())));
  QVERIFY2(pane->statusText().contains(QStringLiteral("tokens/s")) &&
               pane->statusText().contains(QStringLiteral("step 160")),
           qPrintable(pane->statusText()));
  QVERIFY(pane->transcript().contains(QStringLiteral("You: What is the capital of France?")));
  QVERIFY(pane->transcript().contains(QStringLiteral("Model: The capital of France is Paris.")));
  QCOMPARE(pane->turns(), 2);
  QVERIFY(page->sendButton()->isEnabled() && !page->stopButton()->isEnabled());
}

void TestChatPage::startLongAnswer(ChatPage& page, QSignalSpy& deltas) {
  page.temperatureBox()->setValue(1.0);
  page.maxTokensBox()->setValue(100000);
  page.ignoreEndBox()->setChecked(true);
  page.findChild<QCheckBox*>(QStringLiteral("chatSpecial"))->setChecked(true);  // every token shows
  ask(page, QStringLiteral("Tell me everything."));
  QTRY_VERIFY_WITH_TIMEOUT(deltas.count() > 0, 30000);
  QVERIFY(page.pane(0)->isGenerating());
}

void TestChatPage::stopEndsALongAnswer() {
  auto page = makePage();
  ChatPane* pane = page->pane(0);
  choose(pane, QStringLiteral("chat-late"));
  QSignalSpy deltas(pane->worker(), &ChatWorker::delta);
  startLongAnswer(*page, deltas);
  QElapsedTimer clock;
  clock.start();
  page->stopButton()->click();
  QTRY_VERIFY_WITH_TIMEOUT(!pane->isGenerating(), 20000);
  QCOMPARE(pane->lastStop(), QStringLiteral("cancelled"));
  QVERIFY(clock.elapsed() < 15000);
  QVERIFY2(pane->statusText().contains(QStringLiteral("stopped, as asked")), qPrintable(pane->statusText()));
  QVERIFY(page->sendButton()->isEnabled());
  QVERIFY(pane->worker()->isRunning());  // the model stays loaded
}

void TestChatPage::survivesTheWorkerDying() {
  auto page = makePage();
  ChatPane* pane = page->pane(0);
  choose(pane, QStringLiteral("chat-late"));
  QSignalSpy deltas(pane->worker(), &ChatWorker::delta);
  startLongAnswer(*page, deltas);
  const qint64 pid = pane->worker()->processId();
  QVERIFY(pid > 0);
  QCOMPARE(::kill(static_cast<pid_t>(pid), SIGKILL), 0);
  QTRY_VERIFY_WITH_TIMEOUT(!pane->isGenerating(), 20000);
  QCOMPARE(pane->lastStop(), QStringLiteral("died"));
  QVERIFY2(pane->statusText().contains(QStringLiteral("stopped mid-answer")) &&
               pane->statusText().contains(QStringLiteral("killed")),
           qPrintable(pane->statusText()));
  QCOMPARE(pane->turns(), 0);  // the unanswered turn is not part of the conversation
  QVERIFY(page->sendButton()->isEnabled());
  // The next message: a fresh worker, a whole answer.
  page->ignoreEndBox()->setChecked(false);
  page->findChild<QCheckBox*>(QStringLiteral("chatSpecial"))->setChecked(false);
  page->temperatureBox()->setValue(0);
  page->maxTokensBox()->setValue(64);
  ask(*page, QString::fromUtf8(flotilla_test::chat_fixture_japan()));
  QTRY_VERIFY_WITH_TIMEOUT(!pane->isGenerating(), 60000);
  QCOMPARE(pane->lastStop(), QStringLiteral("end token"));
  QCOMPARE(pane->lastAnswer(), QStringLiteral("The capital of Japan is Tokyo."));
  QVERIFY(pane->worker()->processId() != pid);

  // A folder that is no checkpoint: the worker exits at load, and the pane says why.
  pane->setCheckpoint(m_tmp.filePath(QStringLiteral("no-such-run")));
  ask(*page, QStringLiteral("Hello?"));
  QTRY_VERIFY_WITH_TIMEOUT(!pane->isGenerating(), 30000);
  QCOMPARE(pane->lastStop(), QStringLiteral("died"));
  QVERIFY2(pane->statusText().startsWith(
               QStringLiteral("The model could not be loaded (the worker exited with code")) &&
               pane->statusText().contains(QStringLiteral("no-such-run")),
           qPrintable(pane->statusText()));
}

void TestChatPage::twoCheckpointsSideBySide() {
  auto page = makePage();
  page->compareBox()->setChecked(true);
  QVERIFY(page->pane(1)->isVisibleTo(page.get()));
  choose(page->pane(0), QStringLiteral("chat-late"));
  choose(page->pane(1), QStringLiteral("chat-early"));
  page->temperatureBox()->setValue(0);
  page->maxTokensBox()->setValue(24);
  ask(*page, QString::fromUtf8(flotilla_test::chat_fixture_japan()));
  QVERIFY(page->pane(0)->isGenerating() && page->pane(1)->isGenerating());
  QTRY_VERIFY_WITH_TIMEOUT(!page->pane(0)->isGenerating() && !page->pane(1)->isGenerating(), 60000);
  QCOMPARE(page->pane(0)->lastAnswer(), QStringLiteral("The capital of Japan is Tokyo."));
  QCOMPARE(page->pane(0)->worker()->readyInfo().step, 160);
  QCOMPARE(page->pane(1)->worker()->readyInfo().step, 20);
  for (int i = 0; i < 2; ++i) {
    const QString stop = page->pane(i)->lastStop();
    QVERIFY2(stop == QStringLiteral("end token") || stop == QStringLiteral("length"), qPrintable(stop));
    QVERIFY(page->pane(i)->transcript().contains(QStringLiteral("You: What is the capital of Japan?")));
  }
  // A second message continues each pane's own conversation.
  ask(*page, QString::fromUtf8(flotilla_test::chat_fixture_france()));
  QTRY_VERIFY_WITH_TIMEOUT(!page->pane(0)->isGenerating() && !page->pane(1)->isGenerating(), 60000);
  QCOMPARE(page->pane(0)->turns(), 4);
  QCOMPARE(page->pane(1)->turns(), 4);
  // Pane A's conversation (two questions and an answer) is longer than the model's 64 tokens.
  QVERIFY2(page->pane(0)->statusText().contains(
               QStringLiteral("longer than the model's context: it sees the last 64")),
           qPrintable(page->pane(0)->statusText()));
  // The two panes, for the docs (build/screenshots/chat-side-by-side.png).
  QTest::qWait(50);
  const QString dir = QStringLiteral(FLOTILLA_SCREENSHOT_DIR);
  QVERIFY(QDir().mkpath(dir));
  QVERIFY(page->grab().save(dir + QStringLiteral("/chat-side-by-side.png")));
}

QTEST_MAIN(TestChatPage)
#include "test_chatpage_e2e.moc"
