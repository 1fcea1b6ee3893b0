// Settings-file crash safety (docs/reliability.md D5), with the app's own writers: the preferences
// (QSettings) and a run template (TemplateStore, QSaveFile).
// - A child process (this binary with --save-loop) saves two alternating versions of both files as
//   fast as it can and is SIGKILLed at seeded times, 30 times: each file is always one whole version,
//   never torn or truncated or a mix of the two.
// - On a full disk (a real 64 KiB tmpfs; needs root, skipped otherwise) both saves fail with a
//   message naming the file, the Settings page shows it, and the old files are unchanged.
#include <signal.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <QApplication>
#include <QComboBox>
#include <QDir>
#include <QFile>
#include <QSettings>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QtTest>
#include <chrono>
#include <random>
#include <thread>

#include "db/run_store.h"
#include "engine/config/config_io.h"
#include "ui/settings/preferences.h"
#include "ui/settings/settingspage.h"
#include "ui/wizard/templates.h"

using namespace flotilla;
using namespace flotilla::ui;

namespace {

// Version v (0 or 1) of the preferences: long enough that a write takes more than one syscall.
Preferences preferencesVersion(int v) {
  Preferences p;
  p.workspaceDir = QStringLiteral("/data/") + QString(v == 0 ? 4000 : 6000, QLatin1Char(v == 0 ? 'a' : 'b'));
  p.theme = v == 0 ? Preferences::Theme::Dark : Preferences::Theme::Light;
  p.tokens = v == 0 ? Preferences::TokenUnit::Thousands : Preferences::TokenUnit::Millions;
  return p;
}

RunConfig templateVersion(int v) {
  RunConfig c = TemplateStore::demoConfig();
  c.run.name = v == 0 ? "version-a" : "version-b";
  c.train.steps = v == 0 ? 111 : 222;
  return c;
}

QString settingsFile(const QString& configDir) {
  return configDir + QStringLiteral("/Flotilla/Flotilla.conf");
}

void useSettingsDir(const QString& configDir) {
  QSettings::setPath(QSettings::NativeFormat, QSettings::UserScope, configDir);
}

QByteArray readAll(const QString& path) {
  QFile f(path);
  return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
}

// Which version the preferences file on disk holds (read raw: QSettings caches per process): 0, 1,
// or -1 when it is neither whole version (torn, truncated, a mix).
int preferencesOnDisk(const QString& path) {
  const QByteArray text = readAll(path);
  for (int v : {0, 1}) {
    const Preferences p = preferencesVersion(v);
    const QByteArray ws = "workspaceDir=" + p.workspaceDir.toUtf8() + "\n";
    const QByteArray theme = "theme=" + QByteArray::number(static_cast<int>(p.theme)) + "\n";
    const QByteArray tokens = "tokenUnit=" + QByteArray::number(static_cast<int>(p.tokens)) + "\n";
    if (text.contains(ws) && text.contains(theme) && text.contains(tokens)) return v;
  }
  return -1;
}

int templateOnDisk(const QString& path) {
  const std::string text = readAll(path).toStdString();
  for (int v : {0, 1})
    if (text == config_to_toml(templateVersion(v))) return v;
  return -1;
}

// The child: saves version 0, 1, 0, ... of both files until it is killed.
[[noreturn]] void saveLoop(const QString& dir) {
  useSettingsDir(dir + QStringLiteral("/config"));
  const TemplateStore store(dir + QStringLiteral("/templates"));
  for (long i = 0;; ++i) {
    const int v = static_cast<int>(i % 2);
    if (!preferencesVersion(v).save().isEmpty()) std::_Exit(3);
    QString error;
    if (!store.save(QStringLiteral("mine"), templateVersion(v), &error)) std::_Exit(4);
    if (i == 0) QFile(dir + QStringLiteral("/saving")).open(QIODevice::WriteOnly);  // the parent's cue
  }
}

}  // namespace

class TestSettingsCrash : public QObject {
  Q_OBJECT

 private slots:
  void killDuringSavesLeavesWholeFiles();
  void fullDiskKeepsTheOldFilesAndSaysSo();
};

void TestSettingsCrash::killDuringSavesLeavesWholeFiles() {
  QTemporaryDir tmp;
  const QString configDir = tmp.filePath(QStringLiteral("config"));
  const QString templatePath = tmp.filePath(QStringLiteral("templates/mine.toml"));
  useSettingsDir(configDir);
  QVERIFY(preferencesVersion(0).save().isEmpty());
  QString error;
  QVERIFY2(TemplateStore(tmp.filePath(QStringLiteral("templates")))
               .save(QStringLiteral("mine"), templateVersion(0), &error),
           qPrintable(error));
  const QByteArray self = QCoreApplication::applicationFilePath().toLocal8Bit();
  const QByteArray dirArg = tmp.path().toLocal8Bit();
  std::mt19937 rng(5);
  int seen[2][2] = {{0, 0}, {0, 0}};
  for (int round = 0; round < 30; ++round) {
    const pid_t pid = ::fork();
    QVERIFY(pid >= 0);
    if (pid == 0) {
      ::execl(self.constData(), self.constData(), "--save-loop", dirArg.constData(),
              static_cast<char*>(nullptr));
      std::_Exit(127);
    }
    // Kill at a seeded point after the loop is running (a Qt process's start takes a while).
    const QString cue = tmp.filePath(QStringLiteral("saving"));
    int early = 0;
    bool ended = false;
    for (int w = 0; w < 30000 && !QFile::exists(cue) && !ended; ++w) {
      ended = ::waitpid(pid, &early, WNOHANG) == pid;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    QVERIFY2(!ended, qPrintable(QStringLiteral("round %1: the save loop ended by itself (wait status %2)")
                                    .arg(round)
                                    .arg(early)));
    QVERIFY2(QFile::exists(cue), "the save loop did not start within 30 s");
    QFile::remove(cue);
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 20000));
    ::kill(pid, SIGKILL);
    int status = 0;
    QCOMPARE(::waitpid(pid, &status, 0), pid);
    QVERIFY2(WIFSIGNALED(status), "the save loop ended by itself: a save failed");
    const int prefs = preferencesOnDisk(settingsFile(configDir));
    const int tmpl = templateOnDisk(templatePath);
    QVERIFY2(prefs >= 0, qPrintable(QStringLiteral("round %1: the preferences file is torn").arg(round)));
    QVERIFY2(tmpl >= 0, qPrintable(QStringLiteral("round %1: the template file is torn").arg(round)));
    ++seen[0][prefs];
    ++seen[1][tmpl];
  }
  qInfo("after 30 kills: preferences version a %d, b %d; template a %d, b %d", seen[0][0], seen[0][1],
        seen[1][0], seen[1][1]);
  // Both versions seen: the kills landed at different points of the loop (else the test proves little).
  QVERIFY(seen[0][0] > 0 && seen[0][1] > 0);
  QVERIFY(seen[1][0] > 0 && seen[1][1] > 0);
}

void TestSettingsCrash::fullDiskKeepsTheOldFilesAndSaysSo() {
  QTemporaryDir tmp;
  const QString mnt = tmp.filePath(QStringLiteral("small"));
  QVERIFY(QDir().mkpath(mnt));
  if (::mount("tmpfs", mnt.toLocal8Bit().constData(), "tmpfs", 0, "size=64k,mode=0700") != 0)
    QSKIP("cannot mount a tmpfs (needs root): the full-disk half of D5 is not run here");
  struct Unmount {
    QByteArray path;
    ~Unmount() { ::umount2(path.constData(), MNT_DETACH); }
  } unmount{mnt.toLocal8Bit()};

  const QString configDir = mnt + QStringLiteral("/config");
  const QString templates = mnt + QStringLiteral("/templates");
  useSettingsDir(configDir);
  QVERIFY(preferencesVersion(0).save().isEmpty());
  QString error;
  QVERIFY2(TemplateStore(templates).save(QStringLiteral("mine"), templateVersion(0), &error),
           qPrintable(error));
  const QByteArray prefsBefore = readAll(settingsFile(configDir));
  const QByteArray templateBefore = readAll(templates + QStringLiteral("/mine.toml"));
  QVERIFY(!prefsBefore.isEmpty() && !templateBefore.isEmpty());

  {  // fill the disk to the last byte
    QFile filler(mnt + QStringLiteral("/filler"));
    QVERIFY(filler.open(QIODevice::WriteOnly));
    const QByteArray block(4096, 'x');
    while (filler.write(block) == block.size() && filler.flush()) {
    }
    while (filler.write("x", 1) == 1 && filler.flush()) {
    }
  }

  const QString prefsError = preferencesVersion(1).save();
  QVERIFY2(
      prefsError.contains(settingsFile(configDir)) && prefsError.contains(QStringLiteral("disk is full")),
      qPrintable(prefsError));
  // Qt 6.4's buffered QSaveFile said "saved" here and left a 0-byte template (ui/common/savefile.h).
  QVERIFY(!TemplateStore(templates).save(QStringLiteral("mine"), templateVersion(1), &error));
  QVERIFY2(error.contains(QStringLiteral("mine.toml")), qPrintable(error));
  QCOMPARE(readAll(settingsFile(configDir)), prefsBefore);
  QCOMPARE(readAll(templates + QStringLiteral("/mine.toml")), templateBefore);

  // The Settings page says so where the user changed the setting.
  WorkspaceInfo ws;
  ws.directory = tmp.path();
  ws.databasePath = tmp.filePath(QStringLiteral("flotilla.db"));
  ws.schemaVersion = db::Database(ws.databasePath.toStdString()).schema_version();
  SettingsPage page(ws, settingsFile(configDir));
  QVERIFY(page.preferencesError().isEmpty());
  page.tokenUnitBox()->setCurrentIndex(page.tokenUnitBox()->currentIndex() == 0 ? 1 : 0);
  QVERIFY2(page.preferencesError().contains(QStringLiteral("disk is full")),
           qPrintable(page.preferencesError()));
  QCOMPARE(readAll(settingsFile(configDir)), prefsBefore);
}

int main(int argc, char** argv) {
  if (argc == 3 && qstrcmp(argv[1], "--save-loop") == 0) {
    QCoreApplication app(argc, argv);
    QCoreApplication::setOrganizationName(QStringLiteral("Flotilla"));
    saveLoop(QString::fromLocal8Bit(argv[2]));
  }
  QApplication app(argc, argv);
  QStandardPaths::setTestModeEnabled(true);
  TestSettingsCrash test;
  return QTest::qExec(&test, argc, argv);
}

#include "test_settings_crash.moc"
