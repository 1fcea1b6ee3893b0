// The New Run wizard's one piece of state: the RunConfig being edited, the hardware it targets and
// the ranks it will start, shared by every page (STYLE.md principles 9 and 10).
//
// Decision: pages never keep values of their own. Each edit goes through edit(), which changes the
// plain engine RunConfig and emits changed(); every page re-reads what it shows from here, and the
// Next button asks the engine's validate() (filtered to the page's field paths) whether the page
// is done. So the wizard's messages are the engine's, and what the wizard returns is exactly what
// the pages showed.
#pragma once

#include <QList>
#include <QObject>
#include <QString>
#include <QStringList>

#include <functional>
#include <optional>

#include "engine/config/config_validate.h"
#include "engine/config/run_config.h"
#include "engine/core/probe.h"
#include "engine/plan/planner.h"

namespace flotilla::ui {

// Where the run trains: this machine's CPU, or its GPUs (all of one kind, as the probe lists them).
struct HardwareTarget {
  enum class Kind { Cpu, Gpu };
  Kind kind = Kind::Cpu;
  QString label;          // "This machine's CPU (16 cores, 62.7 GiB)"
  QString deviceName;     // CPU model or GPU name
  int maxRanks = 1;       // physical cores (CPU) or GPUs
  quint64 memBytes = 0;   // per GPU, or the whole machine's memory for the CPU
};

// The targets a probe offers: the CPU first, then one entry for the GPUs when there are any.
QList<HardwareTarget> hardwareTargets(const flotilla::ProbeResult& probe);

// The planner's device for one rank of `target` when `ranks` ranks run: a GPU's data-sheet profile
// (memory from the probe), or the CPU's nominal profile with its cores and memory shared by the ranks.
flotilla::DeviceProfile deviceProfileFor(const HardwareTarget& target, const flotilla::RunConfig& config, int ranks);

// Tokens per step when train.global_batch_tokens is 0 (no accumulation) for this layout.
qint64 naturalBatchTokens(const flotilla::RunConfig& config);

class ConfigDraft : public QObject {
  Q_OBJECT

 public:
  explicit ConfigDraft(const flotilla::RunConfig& start, QObject* parent = nullptr);

  const flotilla::RunConfig& config() const { return m_config; }
  // Applies one change and emits changed() (pages call this from their widgets' edit signals).
  void edit(const std::function<void(flotilla::RunConfig&)>& change);
  // Replaces the whole config (a template, the Review page's TOML) and emits replaced() then changed().
  void replace(const flotilla::RunConfig& config);

  // The machine: targets come from the probe. Keeps the chosen kind when it is still offered.
  void setMachine(const flotilla::ProbeResult& probe);
  const QList<HardwareTarget>& targets() const { return m_targets; }
  int targetIndex() const { return m_target; }
  const HardwareTarget& target() const { return m_targets[m_target]; }
  void setTargetIndex(int index);  // also sets run.device
  // Ranks (processes) the run starts: dp x tp x pp must equal it (validate's world size).
  int ranks() const { return m_ranks; }
  void setRanks(int ranks);

  // Every problem validate() finds, with the ranks as world size.
  std::vector<flotilla::ConfigProblem> problems() const;
  // "path: message" lines of the problems whose path starts with one of the prefixes ("" = all).
  QStringList problemsUnder(const QStringList& prefixes) const;
  // The plan for the target; empty while the config is invalid.
  std::optional<flotilla::Plan> plan() const;
  flotilla::DeviceProfile device() const { return deviceProfileFor(target(), m_config, m_ranks); }

 signals:
  void changed();
  void replaced();

 private:
  flotilla::RunConfig m_config;
  QList<HardwareTarget> m_targets;
  int m_target = 0;
  int m_ranks = 1;
};

}  // namespace flotilla::ui
