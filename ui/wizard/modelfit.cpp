// "What fits" (see modelfit.h).
#include "ui/wizard/modelfit.h"

#include <QCoreApplication>
#include <QStringList>

#include <optional>

#include "engine/config/config_validate.h"
#include "engine/plan/planner.h"
#include "ui/nodes/machinefacts.h"
#include "ui/wizard/layoutadvice.h"

namespace flotilla::ui {
namespace {

QString tr(const char* text, int n = -1) { return QCoreApplication::translate("ModelFit", text, nullptr, n); }

// The plan of `config` on `ranks` ranks of `target`; nullopt when validate() refuses the config.
std::optional<flotilla::Plan> planFor(const flotilla::RunConfig& config, const HardwareTarget& target,
                                      int ranks) {
  if (!flotilla::validate(config, ranks).empty()) return std::nullopt;
  return flotilla::make_plan(config, deviceProfileFor(target, config, ranks));
}

}  // namespace

FitCheck checkFit(const flotilla::RunConfig& config, const HardwareTarget& target, int ranks) {
  FitCheck out;
  const auto problems = flotilla::validate(config, ranks);
  if (!problems.empty()) {
    out.text = tr("— (the planner needs a valid config first: %1)")
                   .arg(QString::fromStdString(flotilla::to_string(problems.front())));
    return out;
  }
  const flotilla::Plan plan = flotilla::make_plan(config, deviceProfileFor(target, config, ranks));
  out.planned = true;
  out.fits = plan.fits;
  out.used = plan.peak().total();
  out.capacity = plan.device.mem_bytes;
  if (plan.fits) {
    out.text = tr("Fits: %1 of %2 per device (%3).")
                   .arg(formatBytes(out.used), formatBytes(out.capacity), layoutText(plan));
    return out;
  }

  // One knob at a time, each planned for real.
  struct Alternative {
    QString name;
    flotilla::RunConfig config;
    int ranks;
  };
  QList<Alternative> alternatives;
  const int64_t tokens = flotilla::tokens_per_step(config);
  if (!config.train.recompute) {
    flotilla::RunConfig c = config;
    c.train.recompute = true;
    alternatives.append({tr("recompute"), c, ranks});
  }
  if (config.train.micro_batch > 1) {
    flotilla::RunConfig c = config;
    c.train.micro_batch = 1;
    c.train.global_batch_tokens = tokens;  // the same batch, by accumulation
    alternatives.append({tr("micro-batch 1 with accumulation"), c, ranks});
  }
  if (config.parallel.dp > 1 && config.parallel.zero < 2) {
    flotilla::RunConfig c = config;
    c.parallel.zero = 2;
    alternatives.append({tr("ZeRO-2"), c, ranks});
  }
  const int split = std::max(1, config.parallel.tp) * std::max(1, config.parallel.pp);
  // More CPU ranks share one machine's memory: only separate devices add memory.
  if (target.kind != HardwareTarget::Kind::Cpu && target.maxRanks > ranks && target.maxRanks % split == 0) {
    flotilla::RunConfig c = config;
    c.parallel.dp = target.maxRanks / split;
    if (c.parallel.dp > 1) c.parallel.zero = 2;
    c.train.global_batch_tokens = tokens;
    if (tokens % (int64_t{c.train.micro_batch} * c.train.seq_len * c.parallel.dp) != 0)
      c.train.global_batch_tokens = 0;
    alternatives.append({c.parallel.dp > 1 ? tr("ZeRO-2 over all %n devices", target.maxRanks)
                                           : tr("all %n devices", target.maxRanks),
                         c, target.maxRanks});
  }
  if (target.kind != HardwareTarget::Kind::Cpu && config.train.dtype == "fp32") {
    flotilla::RunConfig c = config;
    c.train.dtype = "bf16";
    alternatives.append({tr("bf16"), c, ranks});
  }
  QStringList fixes, tried;
  for (const Alternative& a : alternatives) {
    tried << a.name;
    const auto p = planFor(a.config, target, a.ranks);
    if (p && p->fits) fixes << tr("%1 (%2)").arg(a.name, formatBytes(p->peak().total()));
  }
  out.text = tr("Does not fit: %1 of %2 per device. ").arg(formatBytes(out.used), formatBytes(out.capacity));
  if (!fixes.isEmpty())
    out.text += tr("The planner fits it with %1. The Hardware page's Recommend finds the fastest layout.")
                    .arg(fixes.join(tr(", or ")));
  else
    out.text +=
        tr("No single change fits%1: try a smaller model, more or larger devices; the Hardware page's "
           "Recommend searches every layout.")
            .arg(tried.isEmpty() ? QString() : tr(" (tried %1)").arg(tried.join(QStringLiteral(", "))));
  return out;
}

}  // namespace flotilla::ui
