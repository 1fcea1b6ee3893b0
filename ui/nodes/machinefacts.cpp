// Probe formatting (see machinefacts.h). Missing facts read "unknown", never a guess.
#include "ui/nodes/machinefacts.h"

#include <QObject>
#include <QStringList>

namespace flotilla::ui {
namespace {

QString orUnknown(const std::string& s) {
  return s.empty() ? QObject::tr("unknown") : QString::fromStdString(s);
}

QString gpuLine(const flotilla::GpuInfo& gpu) {
  return QStringLiteral("%1: %2, %3, compute capability %4.%5")
      .arg(gpu.index)
      .arg(QString::fromStdString(gpu.name), formatBytes(gpu.memory_total_bytes))
      .arg(gpu.cc_major)
      .arg(gpu.cc_minor);
}

}  // namespace

QString formatBytes(quint64 bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  return unit == 0 ? QStringLiteral("%1 B").arg(bytes)
                   : QStringLiteral("%1 %2").arg(value, 0, 'f', 1).arg(QLatin1String(units[unit]));
}

QString noGpuText(const flotilla::ProbeResult& p) {
  std::string why = p.gpu_status;
  if (why.rfind("no GPU: ", 0) == 0) why = why.substr(8);
  // With no NVIDIA driver at all the CUDA runtime says "CUDA driver version is insufficient for CUDA
  // runtime version" and reads no driver version: that is a machine without an NVIDIA GPU, not a
  // driver to update. With a driver the words help: they say which one to update.
  const bool insufficient = why.find("insufficient") != std::string::npos;
  if (insufficient && p.cuda_driver.empty()) return QObject::tr("none (no NVIDIA driver)");
  if (insufficient)
    return QObject::tr("none: the NVIDIA driver (CUDA %1) is older than this build's CUDA runtime%2; update the "
                       "driver")
        .arg(QString::fromStdString(p.cuda_driver),
             p.cuda_runtime.empty() ? QString() : QStringLiteral(" (%1)").arg(QString::fromStdString(p.cuda_runtime)));
  if (why.empty() || why == "ok") return QObject::tr("none");
  return QObject::tr("none (%1)").arg(QString::fromStdString(why));
}

QString cudaStatus(const flotilla::ProbeResult& p) {
  if (p.gpus.empty()) return noGpuText(p);
  QStringList parts;
  if (!p.cuda_runtime.empty())
    parts << QObject::tr("CUDA %1 runtime").arg(QString::fromStdString(p.cuda_runtime));
  if (!p.cuda_driver.empty()) parts << QObject::tr("driver %1").arg(QString::fromStdString(p.cuda_driver));
  parts << (p.gpus.size() == 1 ? QObject::tr("1 GPU") : QObject::tr("%1 GPUs").arg(p.gpus.size()));
  return parts.join(QStringLiteral(", "));
}

QList<QPair<QString, QString>> machineFacts(const flotilla::ProbeResult& p) {
  QStringList simd;
  if (p.avx2) simd << QStringLiteral("AVX2");
  if (p.fma) simd << QStringLiteral("FMA");
  if (p.avx512f) simd << QStringLiteral("AVX-512F");
  if (p.avx512bf16) simd << QStringLiteral("AVX-512 BF16");
  if (p.amx_bf16) simd << QStringLiteral("AMX BF16");

  QStringList gpus;
  for (const auto& gpu : p.gpus) gpus << gpuLine(gpu);

  QList<QPair<QString, QString>> rows;
  rows.append({QObject::tr("Host"), orUnknown(p.hostname)});
  rows.append(
      {QObject::tr("System"),
       QStringLiteral("%1 (kernel %2, %3)").arg(orUnknown(p.os), orUnknown(p.kernel), orUnknown(p.arch))});
  rows.append({QObject::tr("CPU"), orUnknown(p.cpu_model)});
  rows.append({QObject::tr("Cores"),
               QObject::tr("%1 physical, %2 logical").arg(p.physical_cores).arg(p.logical_cpus)});
  rows.append({QObject::tr("Vector units"),
               simd.isEmpty() ? QObject::tr("none of AVX2, AVX-512, AMX") : simd.join(QStringLiteral(", "))});
  rows.append({QObject::tr("Memory"),
               QObject::tr("%1 total, %2 available")
                   .arg(formatBytes(p.memory_total_bytes), formatBytes(p.memory_available_bytes))});
  rows.append({QObject::tr("GPUs"), gpus.isEmpty() ? noGpuText(p) : gpus.join(QLatin1Char('\n'))});
  if (!p.gpus.empty()) rows.append({QObject::tr("CUDA"), cudaStatus(p)});
  QString blas = orUnknown(p.blas);
  if (!p.blas_core.empty()) blas += QObject::tr(" (kernel %1)").arg(QString::fromStdString(p.blas_core));
  rows.append({QObject::tr("BLAS"), blas});
  return rows;
}

}  // namespace flotilla::ui
