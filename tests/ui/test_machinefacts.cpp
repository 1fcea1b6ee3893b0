// The words the Nodes page and the About box build from a machine probe: units, GPU lines, the
// no-GPU reason passed through verbatim, and version HTML that escapes what it shows.
#include <QtTest>

#include "engine/core/probe.h"
#include "ui/main/aboutdialog.h"
#include "ui/main/versions.h"
#include "ui/nodes/machinefacts.h"

using namespace flotilla::ui;

namespace {

QString factValue(const QList<QPair<QString, QString>>& rows, const QString& label) {
  for (const auto& [name, value] : rows)
    if (name == label) return value;
  return QStringLiteral("<missing>");
}

flotilla::ProbeResult twoGpuMachine() {
  flotilla::ProbeResult p;
  p.hostname = "gpu-box";
  p.os = "Debian GNU/Linux 12 (bookworm)";
  p.kernel = "6.1.0";
  p.arch = "x86_64";
  p.cpu_model = "AMD EPYC 9654";
  p.logical_cpus = 192;
  p.physical_cores = 96;
  p.avx2 = p.fma = p.avx512f = p.avx512bf16 = true;
  p.memory_total_bytes = 768ull << 30;
  p.memory_available_bytes = 700ull << 30;
  p.gpu_status = "ok";
  p.cuda_driver = "13.0";
  p.cuda_runtime = "13.0";
  for (int i = 0; i < 2; ++i) {
    flotilla::GpuInfo g;
    g.index = i;
    g.name = "NVIDIA H200";
    g.memory_total_bytes = 150ull * 1000 * 1000 * 1000;  // 139.7 GiB
    g.cc_major = 9;
    g.cc_minor = 0;
    p.gpus.push_back(g);
  }
  p.blas = "OpenBLAS 0.3.21";
  p.blas_core = "Haswell";
  return p;
}

}  // namespace

class TestMachineFacts : public QObject {
  Q_OBJECT

 private slots:
  void formatsBinaryUnits() {
    QCOMPARE(formatBytes(0), QStringLiteral("0 B"));
    QCOMPARE(formatBytes(1023), QStringLiteral("1023 B"));
    QCOMPARE(formatBytes(1536), QStringLiteral("1.5 KiB"));
    QCOMPARE(formatBytes(24ull << 30), QStringLiteral("24.0 GiB"));
    QCOMPARE(formatBytes(150ull * 1000 * 1000 * 1000), QStringLiteral("139.7 GiB"));
    QCOMPARE(formatBytes(3ull << 40), QStringLiteral("3.0 TiB"));
  }

  void describesAGpuMachine() {
    const auto rows = machineFacts(twoGpuMachine());
    QCOMPARE(factValue(rows, QStringLiteral("Cores")), QStringLiteral("96 physical, 192 logical"));
    QCOMPARE(factValue(rows, QStringLiteral("Vector units")),
             QStringLiteral("AVX2, FMA, AVX-512F, AVX-512 BF16"));
    QCOMPARE(factValue(rows, QStringLiteral("Memory")),
             QStringLiteral("768.0 GiB total, 700.0 GiB available"));
    QCOMPARE(factValue(rows, QStringLiteral("GPUs")),
             QStringLiteral("0: NVIDIA H200, 139.7 GiB, compute capability 9.0\n"
                            "1: NVIDIA H200, 139.7 GiB, compute capability 9.0"));
    QCOMPARE(factValue(rows, QStringLiteral("CUDA")),
             QStringLiteral("CUDA 13.0 runtime, driver 13.0, 2 GPUs"));
    QCOMPARE(factValue(rows, QStringLiteral("BLAS")), QStringLiteral("OpenBLAS 0.3.21 (kernel Haswell)"));
  }

  void explainsWhyThereIsNoGpu() {
    flotilla::ProbeResult p;
    p.gpu_status = "no GPU: the CUDA driver reports no devices";
    const auto rows = machineFacts(p);
    QCOMPARE(factValue(rows, QStringLiteral("GPUs")), QStringLiteral("none (the CUDA driver reports no devices)"));
    QCOMPARE(factValue(rows, QStringLiteral("CUDA")), QStringLiteral("<missing>"));
    QCOMPARE(factValue(rows, QStringLiteral("Vector units")), QStringLiteral("none of AVX2, AVX-512, AMX"));
    QCOMPARE(factValue(rows, QStringLiteral("CPU")), QStringLiteral("unknown"));
    QCOMPARE(cudaStatus(p), QStringLiteral("none (the CUDA driver reports no devices)"));
  }

  // Issue 34 #20: a machine with no NVIDIA driver is told plainly, not as a driver to update; an old
  // driver keeps the versions that say what to update.
  void noDriverReadsPlainly() {
    flotilla::ProbeResult p;
    p.gpu_status = "no GPU: CUDA driver version is insufficient for CUDA runtime version";
    p.cuda_runtime = "12.4";
    QCOMPARE(factValue(machineFacts(p), QStringLiteral("GPUs")), QStringLiteral("none (no NVIDIA driver)"));
    p.cuda_driver = "11.8";
    const QString old = factValue(machineFacts(p), QStringLiteral("GPUs"));
    QVERIFY2(old.contains(QStringLiteral("CUDA 11.8")) && old.contains(QStringLiteral("12.4")) &&
                 old.contains(QStringLiteral("update the driver")),
             qPrintable(old));
  }

  void aboutHtmlEscapesAndWaitsForTheProbe() {
    VersionInfo v = collectVersions();
    QVERIFY(!v.sqlite.isEmpty() && !v.libssh.isEmpty() && !v.qcustomplot.isEmpty());
    v.libssh = QStringLiteral("0.10<script>");
    const QString html = AboutDialog::versionsHtml(v, nullptr);
    QVERIFY2(html.contains(QStringLiteral("0.10&lt;script&gt;")), qPrintable(html));
    QVERIFY(!html.contains(QStringLiteral("<script>")));
    QVERIFY2(html.contains(QStringLiteral("probing…")), qPrintable(html));
  }
};

QTEST_MAIN(TestMachineFacts)
#include "test_machinefacts.moc"
