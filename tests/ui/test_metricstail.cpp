// The metrics tail parser (ui/runs/metricstail): a torn last line is held until its newline
// arrives, records split across reads come out whole and in order, garbage lines are skipped and
// counted, and the file is followed by byte offset as a worker appends to it.
#include <QFile>
#include <QTemporaryDir>
#include <QtTest>

#include "ui/runs/metricstail.h"

using flotilla::ui::MetricsTail;

namespace {

QByteArray stepLine(int step, double loss) {
  return QStringLiteral("{\"v\":1,\"type\":\"step\",\"step\":%1,\"loss\":%2}\n")
      .arg(step)
      .arg(loss, 0, 'g', 17)
      .toUtf8();
}

bool append(const QString& path, const QByteArray& bytes) {
  QFile f(path);
  if (!f.open(QIODevice::WriteOnly | QIODevice::Append)) return false;
  return f.write(bytes) == bytes.size();
}

}  // namespace

class TestMetricsTail : public QObject {
  Q_OBJECT

 private slots:
  void tornLastLineIsHeldUntilItsNewline();
  void recordsSplitAcrossReadsComeOutWhole();
  void garbageLinesAreSkippedAndCounted();
  void crlfAndBlankLinesAreTolerated();
  void followsAFileByByteOffset();
  void aLargeBacklogDrainsInBoundedReads();
  void aTruncatedFileIsReadFromTheStart();
};

void TestMetricsTail::tornLastLineIsHeldUntilItsNewline() {
  MetricsTail tail;
  const QByteArray two = stepLine(1, 6.25) + stepLine(2, 5.5);
  const QByteArray torn = two.left(two.size() - 7);  // step 2 without its last 7 bytes
  QList<QJsonObject> got = tail.feed(torn);
  QCOMPARE(got.size(), 1);
  QCOMPARE(got[0].value(QStringLiteral("step")).toInt(), 1);
  QCOMPARE(tail.pendingBytes(), qsizetype(stepLine(2, 5.5).size() - 7));
  QCOMPARE(tail.skippedLines(), 0);  // a torn line is not garbage
  got = tail.feed(two.right(7));
  QCOMPARE(got.size(), 1);
  QCOMPARE(got[0].value(QStringLiteral("step")).toInt(), 2);
  QCOMPARE(got[0].value(QStringLiteral("loss")).toDouble(), 5.5);
  QCOMPARE(tail.pendingBytes(), qsizetype(0));
}

void TestMetricsTail::recordsSplitAcrossReadsComeOutWhole() {
  QByteArray all;
  for (int i = 1; i <= 50; ++i) all += stepLine(i, 10.0 / i);
  // Byte by byte, and in chunks of every size from 2 to 97: always the same 50 records in order.
  for (int chunk = 1; chunk <= 97; chunk += (chunk < 3 ? 1 : 7)) {
    MetricsTail tail;
    QList<QJsonObject> got;
    for (qsizetype at = 0; at < all.size(); at += chunk) got += tail.feed(all.mid(at, chunk));
    QCOMPARE(got.size(), 50);
    for (int i = 0; i < 50; ++i) {
      QCOMPARE(got[i].value(QStringLiteral("step")).toInt(), i + 1);
      QCOMPARE(got[i].value(QStringLiteral("loss")).toDouble(), 10.0 / (i + 1));  // round-trips exactly
    }
    QCOMPARE(tail.skippedLines(), 0);
    QCOMPARE(tail.pendingBytes(), qsizetype(0));
  }
}

void TestMetricsTail::garbageLinesAreSkippedAndCounted() {
  MetricsTail tail;
  const QByteArray bytes =
      stepLine(1, 3.0) + QByteArray("not json at all\n") + QByteArray("[1,2,3]\n") +
      QByteArray("{\"type\":\"step\",\"step\":2,\"loss\":\n") +  // torn mid-record, then a newline
      QByteArray("\"a string\"\n") + stepLine(3, 2.0);
  const QList<QJsonObject> got = tail.feed(bytes);
  QCOMPARE(got.size(), 2);
  QCOMPARE(got[0].value(QStringLiteral("step")).toInt(), 1);
  QCOMPARE(got[1].value(QStringLiteral("step")).toInt(), 3);
  QCOMPARE(tail.skippedLines(), 4);
  QCOMPARE(tail.recordCount(), 2);
}

void TestMetricsTail::crlfAndBlankLinesAreTolerated() {
  MetricsTail tail;
  const QList<QJsonObject> got = tail.feed(QByteArray("\n\n{\"type\":\"event\",\"message\":\"a\"}\r\n  \n"));
  QCOMPARE(got.size(), 1);
  QCOMPARE(got[0].value(QStringLiteral("message")).toString(), QStringLiteral("a"));
  QCOMPARE(tail.skippedLines(), 0);
}

void TestMetricsTail::followsAFileByByteOffset() {
  QTemporaryDir dir;
  QVERIFY(dir.isValid());
  const QString path = dir.filePath(QStringLiteral("metrics.jsonl"));
  MetricsTail tail(path);
  QVERIFY(tail.poll().isEmpty());  // no file yet: nothing, no error
  QCOMPARE(tail.offset(), qint64(0));

  const QByteArray first = stepLine(1, 4.0);
  QVERIFY(append(path, first + QByteArray("{\"type\":\"step\",\"st")));
  QList<QJsonObject> got = tail.poll();
  QCOMPARE(got.size(), 1);
  QCOMPARE(tail.offset(), QFileInfo(path).size());
  QVERIFY(tail.poll().isEmpty());  // nothing new, the torn line still held
  QVERIFY(append(path, QByteArray("ep\":2,\"loss\":3.5}\n")));
  got = tail.poll();
  QCOMPARE(got.size(), 1);
  QCOMPARE(got[0].value(QStringLiteral("loss")).toDouble(), 3.5);
  QCOMPARE(tail.offset(), QFileInfo(path).size());
  QCOMPARE(tail.recordCount(), 2);
}

void TestMetricsTail::aLargeBacklogDrainsInBoundedReads() {
  QTemporaryDir dir;
  const QString path = dir.filePath(QStringLiteral("metrics.jsonl"));
  QByteArray all;
  for (int i = 1; i <= 1000; ++i) all += stepLine(i, 1.0 + i);
  QVERIFY(append(path, all));
  MetricsTail tail(path);
  int polls = 0, records = 0;
  for (QList<QJsonObject> got; polls < 1000 && (polls == 0 || !got.isEmpty()); ++polls) {
    got = tail.poll(4096);
    records += got.size();
  }
  QCOMPARE(records, 1000);
  QVERIFY2(polls > all.size() / 4096, qPrintable(QString::number(polls)));  // never more than 4 KiB a poll
  QCOMPARE(tail.offset(), qint64(all.size()));
}

void TestMetricsTail::aTruncatedFileIsReadFromTheStart() {
  QTemporaryDir dir;
  const QString path = dir.filePath(QStringLiteral("metrics.jsonl"));
  QVERIFY(append(path, stepLine(1, 2.0) + stepLine(2, 1.0)));
  MetricsTail tail(path);
  QCOMPARE(tail.poll().size(), 2);
  QFile f(path);
  QVERIFY(f.open(QIODevice::WriteOnly | QIODevice::Truncate));
  f.write(stepLine(7, 0.5));
  f.close();
  const QList<QJsonObject> got = tail.poll();
  QCOMPARE(got.size(), 1);
  QCOMPARE(got[0].value(QStringLiteral("step")).toInt(), 7);
}

QTEST_GUILESS_MAIN(TestMetricsTail)
#include "test_metricstail.moc"
