// Human-readable lines from a machine probe, shared by the Nodes page and the About box.
#pragma once

#include <QList>
#include <QPair>
#include <QString>

#include "engine/core/probe.h"

namespace flotilla::ui {

// "23.4 GiB" (binary units, one decimal).
QString formatBytes(quint64 bytes);

// (label, value) rows: Host, System, CPU, Cores, Vector units, Memory, GPUs, CUDA, BLAS.
QList<QPair<QString, QString>> machineFacts(const flotilla::ProbeResult& probe);

// Why a machine has no GPU, in plain words: "none (no NVIDIA driver)" on a machine without one,
// the driver and runtime versions when an old driver is the cause, else the probe's reason.
QString noGpuText(const flotilla::ProbeResult& probe);

// "CUDA 13.0 runtime, driver 13.0, 4 GPUs" or noGpuText().
QString cudaStatus(const flotilla::ProbeResult& probe);

}  // namespace flotilla::ui
