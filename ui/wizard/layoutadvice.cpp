// Layout advice (see layoutadvice.h).
#include "ui/wizard/layoutadvice.h"

#include <QCoreApplication>
#include <QLocale>
#include <QStringList>

#include <algorithm>

#include "engine/config/config_validate.h"
#include "engine/plan/recommend.h"
#include "ui/nodes/machinefacts.h"

namespace flotilla::ui {
namespace {
QString tr(const char* text, int n = -1) {
  return QCoreApplication::translate("LayoutAdvice", text, nullptr, n);
}

// Both train the same way (the [lora] values of two full fine-tunes do not matter).
bool sameLora(const flotilla::LoraSection& a, const flotilla::LoraSection& b) {
  if (!a.enabled && !b.enabled) return true;
  return a.enabled == b.enabled && a.rank == b.rank && a.alpha == b.alpha && a.dropout == b.dropout &&
         a.use_rslora == b.use_rslora && a.targets == b.targets && a.init_from == b.init_from &&
         a.base_quant == b.base_quant && (a.base_quant != "nf4" || a.double_quant == b.double_quant);
}

// The planner's note as a sentence of the paragraph: its words, capitalised, with a full stop.
QString sentence(QString note) {
  note = note.trimmed();
  if (note.isEmpty()) return note;
  note[0] = note[0].toUpper();
  if (!note.endsWith(QLatin1Char('.')) && !note.endsWith(QLatin1Char(')'))) note += QLatin1Char('.');
  return note;
}

// "full fine-tune", "LoRA r 16, alpha 32, all-linear" or "QLoRA r 16, ...".
QString trainingText(const flotilla::LoraSection& l) {
  if (!l.enabled) return tr("full fine-tune");
  return tr("%5 r %1, alpha %2%3, %4")
      .arg(l.rank)
      .arg(l.alpha, 0, 'g', 6)
      .arg(l.use_rslora ? tr(" (rsLoRA)") : QString(), QString::fromStdString(l.targets),
           l.base_quant == "nf4" ? tr("QLoRA") : tr("LoRA"));
}
}  // namespace

QString layoutText(const flotilla::Plan& p) {
  QStringList parts;
  parts << QStringLiteral("dp %1").arg(p.dp);
  if (p.tp > 1) parts << QStringLiteral("tp %1").arg(p.tp);
  if (p.pp > 1) parts << QStringLiteral("pp %1").arg(p.pp);
  if (p.zero > 0) parts << QStringLiteral("ZeRO %1").arg(p.zero);
  QString text = parts.join(QStringLiteral(" × ")) + tr(", micro-batch %1").arg(p.B);
  if (p.grad_accum_steps > 1) text += tr(" (accumulation %1)").arg(p.grad_accum_steps);
  return text;
}

QString describeLayoutChange(const flotilla::RunConfig& before, int ranksBefore,
                             const std::optional<flotilla::Plan>& planBefore, const flotilla::RunConfig& after,
                             int ranksAfter, const std::optional<flotilla::Plan>& planAfter) {
  QStringList changed;
  const auto field = [&changed](const QString& name, long long was, long long now) {
    if (was != now) changed << QStringLiteral("%1 %2 → %3").arg(name).arg(was).arg(now);
  };
  if (!sameLora(before.lora, after.lora))
    changed << tr("training %1 → %2").arg(trainingText(before.lora), trainingText(after.lora));
  field(tr("ranks"), ranksBefore, ranksAfter);
  field(tr("data"), before.parallel.dp, after.parallel.dp);
  field(tr("tensor"), before.parallel.tp, after.parallel.tp);
  field(tr("pipeline"), before.parallel.pp, after.parallel.pp);
  field(tr("ZeRO"), before.parallel.zero, after.parallel.zero);
  if (after.parallel.pp > 1 || before.parallel.pp > 1)
    field(tr("pipeline micro-batches"), before.parallel.micro_batches, after.parallel.micro_batches);
  field(tr("micro-batch"), before.train.micro_batch, after.train.micro_batch);
  field(tr("accumulation"), flotilla::grad_accum_steps(before), flotilla::grad_accum_steps(after));
  const QLocale locale;
  QString text;
  if (changed.isEmpty()) {
    text = tr("Nothing to change: this layout already is the fastest the planner finds that fits.");
  } else {
    text = tr("Recommend changed %1.").arg(changed.join(QStringLiteral(", ")));
    const qint64 tokens = flotilla::tokens_per_step(after);
    // A change of method (full fine-tuning, LoRA) trains something else, whatever the batch.
    if (tokens == flotilla::tokens_per_step(before))
      text += sameLora(before.lora, after.lora)
                  ? tr(" The global batch stays %1 tokens, so the training is the same.")
                        .arg(locale.toString(tokens))
                  : tr(" The global batch stays %1 tokens.").arg(locale.toString(tokens));
  }
  if (planBefore && planAfter) {
    text += tr(" Memory per device %1 → %2 (of %3); step %4 s → %5 s.")
                .arg(formatBytes(planBefore->peak().total()), formatBytes(planAfter->peak().total()),
                     formatBytes(planAfter->device.mem_bytes))
                .arg(planBefore->step_s, 0, 'g', 3)
                .arg(planAfter->step_s, 0, 'g', 3);
    if (!planBefore->fits && planAfter->fits) text += tr(" It did not fit before; it fits now.");
  } else if (planAfter) {
    text += tr(" Memory per device %1 (of %2); step %3 s.")
                .arg(formatBytes(planAfter->peak().total()), formatBytes(planAfter->device.mem_bytes))
                .arg(planAfter->step_s, 0, 'g', 3);
  }
  return text;
}

void applyLayout(const flotilla::RunConfig& layout, flotilla::RunConfig& config) {
  const int64_t tokens = flotilla::tokens_per_step(config);
  config.parallel.dp = layout.parallel.dp;
  config.parallel.tp = layout.parallel.tp;
  config.parallel.pp = layout.parallel.pp;
  config.parallel.zero = layout.parallel.zero;
  config.parallel.micro_batches = layout.parallel.micro_batches;
  config.train.micro_batch = layout.train.micro_batch;
  if (!sameLora(config.lora, layout.lora)) config.lora = layout.lora;
  config.train.global_batch_tokens = tokens;
  if (naturalBatchTokens(config) == tokens) config.train.global_batch_tokens = 0;
}

LayoutAdvice adviseLayout(const flotilla::RunConfig& base, const HardwareTarget& target, int ranks) {
  LayoutAdvice advice;
  std::vector<int> worlds = {std::max(1, ranks)};
  if (target.maxRanks > ranks) worlds.push_back(target.maxRanks);
  // The fastest runnable layout over the rank counts tried (the chosen one, and every device).
  for (int world : worlds) {
    const flotilla::DeviceProfile device = deviceProfileFor(target, base, world);
    const auto layouts = flotilla::recommend_layouts(base, world, device);
    const auto best = std::find_if(layouts.begin(), layouts.end(), [](const auto& c) { return c.runnable; });
    if (best == layouts.end()) continue;
    if (advice.plan && advice.plan->step_s <= best->plan.step_s) continue;
    advice.ranks = world;
    advice.config = best->config;
    advice.plan = best->plan;
    advice.note = sentence(QString::fromStdString(best->note));
    const flotilla::Plan& p = best->plan;
    advice.text = tr("Fastest layout that fits on %n rank(s): %1, %2 per device, %3 s per step.", world)
                      .arg(layoutText(p), formatBytes(p.peak().total()))
                      .arg(p.step_s, 0, 'g', 3);
    if (!sameLora(best->config.lora, base.lora))
      advice.text += tr(" It trains with %1.").arg(trainingText(best->config.lora));
    if (!advice.note.isEmpty()) advice.text += QLatin1Char(' ') + advice.note;
    if (!layouts.front().runnable)
      advice.text += tr(" (%1 would be faster, %2 s per step, but %3.)")
                         .arg(layoutText(layouts.front().plan))
                         .arg(layouts.front().plan.step_s, 0, 'g', 3)
                         .arg(QString::fromStdString(layouts.front().note));
  }
  if (advice.config) return advice;
  advice.text =
      tr("No layout of %n rank(s) fits this device's memory: choose a smaller model, "
         "micro-batch or sequence length, turn on recomputation or bf16, or use devices "
         "with more memory.",
         worlds.back());
  return advice;
}

}  // namespace flotilla::ui
