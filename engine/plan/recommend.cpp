// Layout search for plan --recommend (see recommend.h).
#include "engine/plan/recommend.h"

#include <algorithm>
#include <cstdio>
#include <optional>

#include <nlohmann/json.hpp>

#include "engine/config/config_validate.h"
#include "engine/interop/model_source.h"
#include "engine/train/device_model.h"

namespace flotilla {
namespace {

std::vector<int> divisors(int n) {
  std::vector<int> d;
  for (int i = 1; i <= n; ++i)
    if (n % i == 0) d.push_back(i);
  return d;
}

std::string gib(uint64_t b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(b) / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

// "6.1 GiB" (below 1 GiB: "512.0 MiB"), for the notes.
std::string gib1(uint64_t b) {
  char buf[32];
  const double x = static_cast<double>(b);
  if (x < 1024.0 * 1024.0 * 1024.0)
    std::snprintf(buf, sizeof buf, "%.1f MiB", x / (1024.0 * 1024.0));
  else
    std::snprintf(buf, sizeof buf, "%.1f GiB", x / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

// One method's search: the layouts that fit, fastest first, and the valid layout needing the least
// memory (fitting or not), which says how far from fitting a method is.
struct Search {
  std::vector<LayoutCandidate> fits;
  std::optional<Plan> least;
};

Search search_layouts(const RunConfig& base, int world, const DeviceProfile& device,
                      const PlanOptions& options) {
  Search out;
  const int64_t global_tokens = tokens_per_step(base);
  const int T = base.train.seq_len;
  for (int dp : divisors(world)) {
    for (int tp : divisors(world / dp)) {
      const int pp = world / (dp * tp);
      for (int zero : {0, 1, 2}) {
        if (zero > 0 && dp == 1) continue;  // nothing to shard over
        for (int b = 1; b <= 64; b *= 2) {
          const int64_t per_micro = static_cast<int64_t>(b) * T * dp;
          if (global_tokens % per_micro != 0) continue;
          RunConfig c = base;
          c.parallel.dp = dp;
          c.parallel.tp = tp;
          c.parallel.pp = pp;
          c.parallel.zero = zero;
          c.train.micro_batch = b;
          c.train.global_batch_tokens = global_tokens;
          const int64_t accum = global_tokens / per_micro;
          c.parallel.micro_batches = pp > 1 ? static_cast<int>(accum) : 1;
          if (pp > 1 && accum < pp) continue;  // a pipeline needs at least one micro-batch per stage
          if (!validate(c, world, ValidateFor::kPlan).empty()) continue;
          LayoutCandidate cand;
          cand.config = c;
          cand.plan = make_plan(c, device, options);
          if (!out.least || cand.plan.needed_bytes() < out.least->needed_bytes()) out.least = cand.plan;
          if (!cand.plan.fits) continue;
          // What `train` itself refuses on this device (on CUDA: pp > 1, ZeRO-2, odd head sizes).
          if (const auto problems = device_training_problems(c); !problems.empty()) {
            cand.runnable = false;
            cand.note = problems.front().message;
          }
          out.fits.push_back(std::move(cand));
        }
      }
    }
  }
  std::stable_sort(out.fits.begin(), out.fits.end(), [](const LayoutCandidate& a, const LayoutCandidate& b) {
    if (a.plan.step_s != b.plan.step_s) return a.plan.step_s < b.plan.step_s;
    return a.plan.peak().total() < b.plan.peak().total();
  });
  return out;
}

// The config as a full fine-tune / as a LoRA fine-tune (the config's [lora] when it asks for LoRA
// or QLoRA, else rank 16 on every projection) over a base in the compute dtype / over a 4-bit one.
RunConfig as_full(RunConfig c) {
  c.lora.enabled = false;
  c.lora.init_from.clear();          // an adapter to continue: LoRA only
  c.checkpoint.export_peft.clear();  // a PEFT adapter folder: LoRA only
  c.lora.base_quant = "none";        // a quantised base: LoRA only
  return c;
}
RunConfig as_lora(RunConfig c) {
  if (!c.lora.enabled) {
    c.lora = LoraSection{};
    c.lora.enabled = true;
    c.lora.rank = 16;
    c.lora.targets = "all-linear";
  }
  c.lora.base_quant = "none";
  return c;
}
RunConfig as_qlora(RunConfig c) {
  const bool asked = c.lora.enabled && c.lora.base_quant == "nf4";
  c = as_lora(std::move(c));
  c.lora.base_quant = "nf4";
  if (!asked) c.lora.double_quant = true;  // QLoRA's own choice: 4.127 bits, not 4.5
  return c;
}

std::string layout_words(const Plan& p) {
  std::string s = "dp " + std::to_string(p.dp);
  if (p.tp > 1) s += ", tp " + std::to_string(p.tp);
  if (p.pp > 1) s += ", pp " + std::to_string(p.pp);
  if (p.dp > 1) s += ", ZeRO " + std::to_string(p.zero);
  return s + ", micro-batch " + std::to_string(p.B);
}

uint64_t optimizer_state(const MemoryBreakdown& m) { return m.master_weights + m.adam_m + m.adam_v; }

FineTuneMethod plan_method(const Plan& p) {
  if (!p.lora.enabled()) return FineTuneMethod::kFull;
  return p.lora.nf4 ? FineTuneMethod::kQlora : FineTuneMethod::kLora;
}

std::string bits_text(double bits) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", bits);
  return buf;
}

std::string method_words(const Plan& p) {
  if (!p.lora.enabled()) return "full fine-tuning";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s (r %d, alpha %g", p.lora.nf4 ? "QLoRA" : "LoRA", p.lora.rank,
                p.lora.alpha);
  const bool all = p.lora.targets == (1u << kNumLoraTargets) - 1;
  std::string out =
      std::string(buf) + " on " + (all ? std::string("all-linear") : lora_targets_text(p.lora.targets));
  if (p.lora.nf4) out += ", 4-bit NF4 base at " + bits_text(p.nf4_bits) + " bits";
  return out + ")";
}

std::string trained_share(const Plan& p) {
  const double pct = p.params.total > 0 ? 100.0 * static_cast<double>(p.params.trainable) /
                                              static_cast<double>(p.params.total)
                                        : 0.0;
  char buf[64];
  std::snprintf(buf, sizeof buf, pct < 0.1 ? "%.3f%%" : "%.2f%%", pct);
  return buf;
}

// One method's verdict: "full fine-tuning does not fit: at least 52.3 GiB per GPU (dp 4, ZeRO 2,
// micro-batch 1), 18.2 GiB of it optimizer state, of 24.0 GiB".
std::string verdict(const Search& s, FineTuneMethod method, const RunConfig& config, int world,
                    const DeviceProfile& device) {
  const std::string per = config.run.device == "cuda" ? " per GPU" : " per device";
  const bool lora = method != FineTuneMethod::kFull;
  if (!s.least) {
    const std::string what = method == FineTuneMethod::kFull ? "full fine-tuning" : method_name(method);
    return what + ": no valid layout for " + std::to_string(world) + " rank(s)";
  }
  const Plan& p = *s.least;
  const MemoryBreakdown& m = p.peak();
  std::string out = method_words(p);
  if (lora) out += " trains " + trained_share(p) + " of the parameters";
  if (!s.fits.empty()) {
    const Plan& best = s.fits.front().plan;
    return out + (lora ? " and fits: " : " fits: ") + gib1(best.needed_bytes()) + per +
           " in its fastest layout (" + layout_words(best) + ")";
  }
  out += (lora ? " but does not fit: at least " : " does not fit: at least ") + gib1(p.needed_bytes()) + per +
         " (" + layout_words(p) + "), ";
  out += !lora ? gib1(optimizer_state(m)) + " of it optimizer state (fp32 master weights, AdamW m and v)"
         : method == FineTuneMethod::kQlora
             ? gib1(m.frozen_weights) + " of it the frozen base (" + gib1(m.frozen_nf4) + " in 4-bit NF4)"
             : gib1(m.frozen_weights) + " of it the frozen base";
  return out + ", of " + gib1(device.mem_bytes);
}

// The note of one candidate: why this method, with the others' verdicts where they matter.
std::string method_note(const LayoutCandidate& c, const Search& full, const Search& lora, const Search& qlora,
                        const DeviceProfile& device) {
  const Plan& p = c.plan;
  const uint64_t free = device.mem_bytes > p.needed_bytes() ? device.mem_bytes - p.needed_bytes() : 0;
  const std::string per = c.config.run.device == "cuda" ? " per GPU" : " per device";
  const std::string full_out =
      full.fits.empty() && full.least
          ? "full fine-tuning does not fit: " + gib1(optimizer_state(full.least->peak())) +
                " of optimizer state" + per + "; "
          : std::string();
  switch (plan_method(p)) {
    case FineTuneMethod::kLora: {
      std::string s = full_out + "LoRA trains " + trained_share(p) + " of the parameters and fits with " +
                      gib1(free) + " free";
      if (!full.fits.empty()) s += "; full fine-tuning also fits";
      return s;
    }
    case FineTuneMethod::kQlora: {
      std::string s = full_out;
      if (lora.fits.empty() && lora.least)
        s += "LoRA does not fit: at least " + gib1(lora.least->needed_bytes()) + per + ", " +
             gib1(lora.least->peak().frozen_weights) + " of it the frozen base; ";
      s += "QLoRA trains " + trained_share(p) + " of the parameters and fits with " + gib1(free) +
           " free (4-bit NF4 base, " + bits_text(p.nf4_bits) +
           " bits per parameter; slower matmuls, which dequantise the base)";
      if (!full.fits.empty()) s += "; full fine-tuning also fits";
      if (!lora.fits.empty()) s += "; LoRA also fits";
      return s;
    }
    case FineTuneMethod::kFull:
      break;
  }
  std::string s = "full fine-tuning trains every parameter and fits with " + gib1(free) + " free";
  if (lora.fits.empty() && lora.least)
    s = "LoRA does not fit (" + gib1(lora.least->needed_bytes()) + per + "); " + s;
  (void)qlora;
  return s;
}

// "24 GB": a card's memory as its data sheet names it (binary sizes in GiB, the rest in GB).
std::string card_size(uint64_t bytes) {
  const uint64_t gib_bytes = 1ull << 30;
  char buf[32];
  if (bytes % gib_bytes == 0)
    std::snprintf(buf, sizeof buf, "%llu GB", static_cast<unsigned long long>(bytes / gib_bytes));
  else
    std::snprintf(buf, sizeof buf, "%.0f GB", static_cast<double>(bytes) / 1e9);
  return buf;
}

// The name the needs line gives the model: the Hugging Face folder's, else the preset's.
std::string model_name(const RunConfig& c) {
  std::string from = c.model.init_from;
  if (interop::is_hub_name(from)) from = from.substr(0, from.find('@'));  // org/name@<commit>: name
  while (!from.empty() && from.back() == '/') from.pop_back();
  if (!from.empty()) return from.substr(from.find_last_of('/') + 1);
  return c.model.preset.empty() ? std::string("this model") : c.model.preset;
}

}  // namespace

FineTuneMethod method_of(const LoraSection& lora) {
  if (!lora.enabled) return FineTuneMethod::kFull;
  return lora.base_quant == "nf4" ? FineTuneMethod::kQlora : FineTuneMethod::kLora;
}

const char* method_name(FineTuneMethod m) {
  switch (m) {
    case FineTuneMethod::kFull:
      return "full fine-tune";
    case FineTuneMethod::kLora:
      return "LoRA";
    case FineTuneMethod::kQlora:
      return "QLoRA";
  }
  return "";
}

FineTuneNeeds fine_tune_needs(const RunConfig& base, const PlanOptions& options) {
  // A GPU run in bf16 with the config's model, micro-batch, sequence length and recompute; the global
  // batch a multiple of eight micro-batches, so every data-parallel degree up to 8 is a layout.
  RunConfig gpu = base;
  gpu.run.device = "cuda";
  gpu.train.dtype = "bf16";
  gpu.parallel = ParallelSection{};
  gpu.train.global_batch_tokens = static_cast<int64_t>(base.train.micro_batch) * base.train.seq_len * 8;
  std::vector<std::pair<std::string, DeviceProfile>> cards;
  for (const std::string& name : gpu_profile_names()) {
    DeviceProfile d;
    if (find_gpu_profile(name, "bf16", &d)) cards.emplace_back(name, d);
  }
  // Smallest card first; of equal sizes the faster.
  std::stable_sort(cards.begin(), cards.end(), [](const auto& a, const auto& b) {
    if (a.second.mem_bytes != b.second.mem_bytes) return a.second.mem_bytes < b.second.mem_bytes;
    return a.second.flops_per_s > b.second.flops_per_s;
  });
  FineTuneNeeds out;
  const std::pair<FineTuneMethod, RunConfig> methods[] = {{FineTuneMethod::kFull, as_full(gpu)},
                                                          {FineTuneMethod::kLora, as_lora(gpu)},
                                                          {FineTuneMethod::kQlora, as_qlora(gpu)}};
  std::string parts;
  for (const auto& [method, config] : methods) {
    MethodNeed need;
    need.method = method;
    for (int world : {1, 2, 4, 8}) {
      for (const auto& [name, card] : cards) {
        const Search s = search_layouts(config, world, card, options);
        if (s.fits.empty()) continue;
        need.count = world;
        need.profile = name;
        need.mem_bytes = card.mem_bytes;
        need.needed_bytes = s.least->needed_bytes();
        break;
      }
      if (need.count > 0) break;
    }
    need.text = need.count > 0 ? std::to_string(need.count) + " \u00d7 " + card_size(need.mem_bytes)
                               : "more than 8 \u00d7 " + card_size(cards.back().second.mem_bytes);
    if (!parts.empty()) parts += "; ";
    parts +=
        std::string(method_name(method)) + (method == FineTuneMethod::kFull ? " needs " : " ") + need.text;
    out.needs.push_back(need);
  }
  char cond[160];
  std::snprintf(cond, sizeof cond,
                " (on the GPUs the planner knows, bf16, micro-batch %d x %d tokens, recompute %s)",
                base.train.micro_batch, base.train.seq_len, base.train.recompute ? "on" : "off");
  out.text = model_name(base) + ": " + parts + cond;
  return out;
}

std::vector<LayoutCandidate> recommend_layouts(const RunConfig& base, int world, const DeviceProfile& device,
                                               const PlanOptions& options, FineTuneAdvice* advice) {
  if (advice) *advice = FineTuneAdvice{};
  if (world < 1) return {};
  const bool fine_tune = !base.model.init_from.empty() || base.lora.enabled;
  if (!fine_tune) return search_layouts(base, world, device, options).fits;

  const Search full = search_layouts(as_full(base), world, device, options);
  const Search lora = search_layouts(as_lora(base), world, device, options);
  const Search qlora = search_layouts(as_qlora(base), world, device, options);
  const FineTuneMethod prefer = method_of(base.lora);
  if (advice) {
    advice->fine_tune = true;
    advice->prefer_lora = prefer != FineTuneMethod::kFull;
    advice->prefer_qlora = prefer == FineTuneMethod::kQlora;
    advice->full_fits = !full.fits.empty();
    advice->lora_fits = !lora.fits.empty();
    advice->qlora_fits = !qlora.fits.empty();
    advice->full = verdict(full, FineTuneMethod::kFull, base, world, device);
    advice->lora = verdict(lora, FineTuneMethod::kLora, base, world, device);
    advice->qlora = verdict(qlora, FineTuneMethod::kQlora, base, world, device);
    advice->needs = fine_tune_needs(base, options).text;
  }
  // The config's method first, then full fine-tuning, LoRA, QLoRA.
  std::vector<const Search*> order = {prefer == FineTuneMethod::kFull   ? &full
                                      : prefer == FineTuneMethod::kLora ? &lora
                                                                        : &qlora};
  for (const Search* s : {&full, &lora, &qlora})
    if (s != order.front()) order.push_back(s);
  std::vector<LayoutCandidate> out;
  for (const Search* s : order) {
    for (LayoutCandidate c : s->fits) {
      const std::string why = method_note(c, full, lora, qlora, device);
      c.note = c.note.empty() ? why : c.note + "; " + why;
      out.push_back(std::move(c));
    }
  }
  return out;
}

std::string recommendations_to_text(const std::vector<LayoutCandidate>& c, int world,
                                    const DeviceProfile& device, size_t top, const FineTuneAdvice& advice) {
  std::string s;
  char line[1024];
  std::snprintf(
      line, sizeof line, "Layouts for %d rank(s) of %s (%s each), %s:\n\n", world, device.name.c_str(),
      gib(device.mem_bytes).c_str(),
      advice.fine_tune
          ? (advice.prefer_qlora  ? "QLoRA first, then full fine-tuning and LoRA, each fastest first"
             : advice.prefer_lora ? "LoRA first, then full fine-tuning and QLoRA, each fastest first"
                                  : "full fine-tuning first, then LoRA and QLoRA, each fastest first")
          : "fastest first");
  s += line;
  if (advice.fine_tune) {
    if (!advice.needs.empty()) s += "  " + advice.needs + "\n";
    s += "  " + advice.full + "\n  " + advice.lora + "\n  " + advice.qlora + "\n\n";
  }
  if (c.empty()) {
    s += "  no layout fits: reduce train.micro_batch or the model, enable train.recompute, add devices,\n"
         "  or use devices with more memory.\n";
    return s;
  }
  if (advice.fine_tune)
    std::snprintf(line, sizeof line, "  %-4s %-10s %-4s %-4s %-4s %-5s %-6s %-6s %12s %10s %12s  %s\n", "#",
                  "method", "dp", "tp", "pp", "zero", "micro", "accum", "mem/device", "step", "tokens/s", "");
  else
    std::snprintf(line, sizeof line, "  %-4s %-4s %-4s %-4s %-5s %-6s %-6s %12s %10s %12s  %s\n", "#", "dp",
                  "tp", "pp", "zero", "micro", "accum", "mem/device", "step", "tokens/s", "");
  s += line;
  for (size_t i = 0; i < c.size() && i < top; ++i) {
    const Plan& p = c[i].plan;
    // A fine-tune's notes say why its method (shown for every row); otherwise only why not runnable.
    const std::string note = advice.fine_tune
                                 ? (c[i].runnable ? c[i].note : "(not runnable: " + c[i].note + ")")
                                 : (c[i].runnable ? "" : "(" + c[i].note + ")");
    if (advice.fine_tune) {
      const std::string method =
          p.lora.enabled() ? (p.lora.nf4 ? "QLoRA r" : "LoRA r") + std::to_string(p.lora.rank) : "full";
      std::snprintf(line, sizeof line,
                    "  %-4zu %-10s %-4d %-4d %-4d %-5d %-6d %-6lld %12s %8.3f s %12.0f  %s\n", i + 1,
                    method.c_str(), p.dp, p.tp, p.pp, p.zero, p.B, static_cast<long long>(p.grad_accum_steps),
                    gib(p.peak().total()).c_str(), p.step_s, p.tokens_per_s, note.c_str());
    } else {
      std::snprintf(line, sizeof line, "  %-4zu %-4d %-4d %-4d %-5d %-6d %-6lld %12s %8.3f s %12.0f  %s\n",
                    i + 1, p.dp, p.tp, p.pp, p.zero, p.B, static_cast<long long>(p.grad_accum_steps),
                    gib(p.peak().total()).c_str(), p.step_s, p.tokens_per_s, note.c_str());
    }
    s += line;
  }
  if (c.size() > top) {
    std::snprintf(line, sizeof line, "  ... %zu more (--top N)\n", c.size() - top);
    s += line;
  }
  const auto best = std::find_if(c.begin(), c.end(), [](const LayoutCandidate& x) { return x.runnable; });
  if (best != c.end()) {
    const Plan& p = best->plan;
    std::snprintf(line, sizeof line, "--set parallel.dp=%d --set parallel.zero=%d --set train.micro_batch=%d",
                  p.dp, p.zero, p.B);
    std::string flags = line;
    if (advice.fine_tune && p.lora.enabled() && !advice.prefer_lora)
      flags += " --set lora.enabled=true --set lora.rank=" + std::to_string(p.lora.rank) +
               " --set lora.targets=" + best->config.lora.targets;
    if (advice.fine_tune && p.lora.nf4 && !advice.prefer_qlora) flags += " --set lora.base_quant=nf4";
    if (advice.fine_tune && p.lora.enabled() && !p.lora.nf4 && advice.prefer_qlora)
      flags += " --set lora.base_quant=none";
    if (advice.fine_tune && !p.lora.enabled() && advice.prefer_lora) flags += " --set lora.enabled=false";
    s += std::string(advice.fine_tune ? "\nRecommended layout this build runs: "
                                      : "\nFastest layout this build runs: ") +
         flags + "\n";
  }
  return s;
}

std::string recommendations_to_json(const std::vector<LayoutCandidate>& c, size_t top,
                                    const FineTuneAdvice& advice) {
  nlohmann::json arr = nlohmann::json::array();
  for (size_t i = 0; i < c.size() && i < top; ++i) {
    const Plan& p = c[i].plan;
    nlohmann::json row = {{"dp", p.dp},
                          {"tp", p.tp},
                          {"pp", p.pp},
                          {"zero", p.zero},
                          {"micro_batch", p.B},
                          {"grad_accum_steps", p.grad_accum_steps},
                          {"memory_per_device_bytes", p.peak().total()},
                          {"step_s", p.step_s},
                          {"tokens_per_s", p.tokens_per_s},
                          {"bubble", p.bubble},
                          {"runnable", c[i].runnable},
                          {"note", c[i].note}};
    if (advice.fine_tune) {
      row["method"] = p.lora.enabled() ? (p.lora.nf4 ? "qlora" : "lora") : "full";
      row["lora"] = {{"enabled", p.lora.enabled()},
                     {"rank", c[i].config.lora.rank},
                     {"alpha", c[i].config.lora.alpha},
                     {"targets", c[i].config.lora.targets},
                     {"base_quant", p.lora.enabled() ? c[i].config.lora.base_quant : std::string("none")},
                     {"double_quant", p.lora.nf4 && c[i].config.lora.double_quant}};
      row["trainable_parameters"] = p.params.trainable;
    }
    arr.push_back(std::move(row));
  }
  nlohmann::json out = {{"layouts", arr}, {"count", c.size()}};
  if (advice.fine_tune)
    out["fine_tune"] = {{"prefer", advice.prefer_qlora  ? "qlora"
                                   : advice.prefer_lora ? "lora"
                                                        : "full"},
                        {"full_fits", advice.full_fits},
                        {"lora_fits", advice.lora_fits},
                        {"qlora_fits", advice.qlora_fits},
                        {"full", advice.full},
                        {"lora", advice.lora},
                        {"qlora", advice.qlora},
                        {"needs", advice.needs}};
  return out.dump(2);
}

}  // namespace flotilla
