// Helpers for the New Run wizard tests that drive pages by their widgets' objectNames: machine
// descriptions, child lookup, the shown problems, and copying golden folders into a temporary one.
#pragma once

#include <QDir>
#include <QFile>
#include <QLabel>
#include <QWizardPage>

#include "engine/core/probe.h"

namespace wizard_helpers {

inline flotilla::ProbeResult cpuMachine() {
  flotilla::ProbeResult p;
  p.cpu_model = "Test CPU";
  p.physical_cores = 8;
  p.logical_cpus = 16;
  p.memory_total_bytes = 32ull << 30;
  return p;
}

inline flotilla::ProbeResult gpuMachine(int gpus, const char* name, quint64 memBytes) {
  flotilla::ProbeResult p = cpuMachine();
  for (int i = 0; i < gpus; ++i) {
    flotilla::GpuInfo g;
    g.index = i;
    g.name = name;
    g.memory_total_bytes = memBytes;
    p.gpus.push_back(g);
  }
  return p;
}

template <typename T>
T* child(QWidget* page, const char* name) {
  T* w = page->findChild<T*>(QLatin1String(name));
  if (!w) qFatal("no child %s", name);
  return w;
}

// Every problem the page shows now: beside its fields (fieldProblem-*) and in its list ("problems").
inline QString shownProblems(QWizardPage* page) {
  QStringList out;
  for (QLabel* l : page->findChildren<QLabel*>())
    if ((l->objectName() == QLatin1String("problems") || l->objectName().startsWith(QLatin1String("fieldProblem-"))) &&
        !l->isHidden() && !l->text().isEmpty())
      out << l->text();
  return out.join(QLatin1Char('\n'));
}

// Copies the named files of `from` into a new folder `to`; false when one does not copy.
inline bool copyFiles(const QString& from, const QString& to, const QStringList& names) {
  if (!QDir().mkpath(to)) return false;
  for (const QString& n : names)
    if (!QFile::copy(QDir(from).filePath(n), QDir(to).filePath(n))) return false;
  return true;
}

inline bool writeFile(const QString& path, const QByteArray& bytes) {
  QFile f(path);
  if (!f.open(QIODevice::WriteOnly | QIODevice::Truncate)) return false;
  return f.write(bytes) == bytes.size();
}

}  // namespace wizard_helpers
