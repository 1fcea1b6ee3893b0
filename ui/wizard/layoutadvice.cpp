// Layout advice (see layoutadvice.h).
#include "ui/wizard/layoutadvice.h"

#include <QCoreApplication>
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

void applyLayout(const flotilla::RunConfig& layout, flotilla::RunConfig& config) {
  const int64_t tokens = flotilla::tokens_per_step(config);
  config.parallel.dp = layout.parallel.dp;
  config.parallel.tp = layout.parallel.tp;
  config.parallel.pp = layout.parallel.pp;
  config.parallel.zero = layout.parallel.zero;
  config.parallel.micro_batches = layout.parallel.micro_batches;
  config.train.micro_batch = layout.train.micro_batch;
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
    const flotilla::Plan& p = best->plan;
    advice.text = tr("Fastest layout that fits on %n rank(s): %1, %2 per device, %3 s per step.", world)
                      .arg(layoutText(p), formatBytes(p.peak().total()))
                      .arg(p.step_s, 0, 'g', 3);
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
