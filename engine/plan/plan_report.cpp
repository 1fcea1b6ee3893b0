// The planner's two outputs: a readable table for people and a JSON document for the app
// (the wizard's estimate page) and scripts.
//
// Decision: the JSON carries raw numbers in base units (bytes, FLOPs, seconds) and no formatted
// strings, so consumers never parse "12.8 MiB"; all rounding happens in the text table only.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/plan/planner.h"

namespace flotilla {
namespace {

std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

std::string commas(uint64_t n) {
  std::string s = std::to_string(n), out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i && (s.size() - i) % 3 == 0) out += ',';
    out += s[i];
  }
  return out;
}

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  return u == 0 ? fmt("%.0f B", b) : fmt("%.1f ", b) + units[u];
}

std::string human_si(double v, const char* unit) {
  const char* prefixes[] = {"", "K", "M", "G", "T", "P", "E"};
  int p = 0;
  while (std::fabs(v) >= 1000 && p < 6) {
    v /= 1000;
    ++p;
  }
  return fmt(v < 10 ? "%.2f " : v < 100 ? "%.1f " : "%.0f ", v) + prefixes[p] + unit;
}

std::string human_time(double s) {
  if (s <= 0) return "0 s";
  if (s < 1) return fmt("%.1f ms", s * 1e3);
  if (s < 120) return fmt("%.2f s", s);
  if (s < 7200) return fmt("%.1f min", s / 60);
  if (s < 172800) return fmt("%.1f h", s / 3600);
  return fmt("%.1f days", s / 86400);
}

std::string row(const std::string& label, const std::string& value) {
  std::string l = "  " + label;
  if (l.size() < 18) l.append(18 - l.size(), ' ');
  return l + value + "\n";
}

nlohmann::ordered_json memory_json(const MemoryBreakdown& m) {
  return {{"frozen_weights", m.frozen_weights},
          {"weights", m.weights},
          {"master_weights", m.master_weights},
          {"gradients", m.gradients},
          {"adam_m", m.adam_m},
          {"adam_v", m.adam_v},
          {"activations", m.activations},
          {"workspace", m.workspace},
          {"runtime", m.runtime},
          {"loading", m.loading},
          {"total", m.total()},
          {"frozen_nf4", m.frozen_nf4},
          {"nf4_params", m.nf4_params},
          {"nf4_scratch", m.nf4_scratch}};
}

// "0.52%": the share of the parameters a LoRA run trains.
std::string percent_of(uint64_t part, uint64_t whole) {
  const double pct = whole > 0 ? 100.0 * static_cast<double>(part) / static_cast<double>(whole) : 0.0;
  return fmt(pct < 0.1 ? "%.3f%%" : "%.2f%%", pct);
}

}  // namespace

std::string plan_memory_text(const Plan& p) {
  std::string out;
  const MemoryBreakdown& m = p.peak();
  const bool lora = p.lora.enabled();
  out += "memory per device" +
         (p.pp > 1 ? " (stage " + std::to_string(p.peak_stage) + ", the largest)" : std::string()) +
         (lora ? std::string(p.lora.nf4 ? " (QLoRA" : " (LoRA") +
                     ": master weights, gradients and AdamW state are the adapters')"
               : std::string()) + "\n";
  const std::pair<const char*, uint64_t> parts[] = {{"frozen base", m.frozen_weights},
                                                    {lora ? "adapters" : "weights", m.weights},
                                                    {"master weights", m.master_weights},
                                                    {"gradients", m.gradients},
                                                    {"AdamW m", m.adam_m},
                                                    {"AdamW v", m.adam_v},
                                                    {"activations", m.activations},
                                                    {"workspace", m.workspace},
                                                    {"runtime", m.runtime},
                                                    {"loading", m.loading}};
  for (const auto& [name, bytes] : parts) {
    const std::string n = name;
    if (n == "frozen base" && m.frozen_nf4 > 0) {
      // QLoRA: the 4-bit projections and what stays in the compute dtype, each with its size.
      out += row(name, human_bytes(static_cast<double>(bytes)) + " = 4-bit NF4 base " +
                           human_bytes(static_cast<double>(m.frozen_nf4)) + " (" + commas(m.nf4_params) +
                           " parameters at " + fmt("%.3f", 8.0 * static_cast<double>(m.frozen_nf4) /
                                                               static_cast<double>(m.nf4_params)) +
                           " bits) + " + human_bytes(static_cast<double>(bytes - m.frozen_nf4)) +
                           " embedding, norms and head in " + (p.weight_bytes == 2 ? "bf16" : "fp32"));
    } else if (n == "workspace" && m.nf4_scratch > 0) {
      out += row(name, human_bytes(static_cast<double>(bytes)) + " (of it " +
                           human_bytes(static_cast<double>(m.nf4_scratch)) + " NF4 dequantisation tiles)");
    } else if (n == "loading") {
      if (bytes > 0)
        out += row(name, "+" + human_bytes(static_cast<double>(bytes)) +
                             " (loading the frozen base peaks above training: the loader's fp32 copy beside the model)");
    } else if (bytes > 0 || (n != "master weights" && n != "frozen base")) {
      out += row(name, human_bytes(static_cast<double>(bytes)));
    }
  }
  const std::string verdict = p.fits ? " (fits)" : " (DOES NOT FIT)";
  const uint64_t margin = p.margin_bytes();
  // Host memory keeps a margin above the estimate (planner.h, memory_margin); `fits` counts it.
  const std::string of = (margin > 0 ? " + margin " + human_bytes(static_cast<double>(margin)) : std::string()) +
                         " of " + human_bytes(static_cast<double>(p.device.mem_bytes));
  if (p.device.mem_shared_by_ranks && p.ranks > 1) {
    out += row("total", human_bytes(static_cast<double>(m.total())) + " per rank");
    out +=
        row("this host", std::to_string(p.ranks) + " ranks x " + human_bytes(static_cast<double>(m.total())) +
                             " = " + human_bytes(static_cast<double>(p.needed_bytes())) + of + verdict);
  } else {
    out += row("total", human_bytes(static_cast<double>(m.total())) + of + verdict);
  }
  if (!p.device.mem_note.empty()) out += row("memory limit", p.device.mem_note);
  return out;
}

std::string plan_to_text(const Plan& p) {
  const ModelDims& d = p.dims;
  std::string out;
  out += "model\n";
  if (d.llama())
    out += row("preset",
               p.preset + ": llama, " + std::to_string(d.n_layer) + " layers, " + std::to_string(d.n_head) +
                   " heads (" + std::to_string(d.kv_heads()) + " KV, head_dim " + std::to_string(d.hd()) +
                   "), width " + std::to_string(d.n_embd) + ", FFN " + std::to_string(d.ffn()) + ", vocab " +
                   commas(d.vocab_size) + " (padded " + commas(d.padded_vocab) + "), " +
                   (d.tied() ? "tied" : "untied") + " head, up to " + commas(d.max_seq_len) + " tokens");
  else
    out += row("preset", p.preset + ": " + std::to_string(d.n_layer) + " layers, " +
                             std::to_string(d.n_head) + " heads, width " + std::to_string(d.n_embd) +
                             ", vocab " + commas(d.vocab_size) + " (padded " + commas(d.padded_vocab) +
                             "), " + std::to_string(d.max_seq_len) + " positions");
  const bool lora = p.lora.enabled();
  if (!p.init_from.empty())
    out += row("weights from", p.init_from);
  else if (lora)
    out +=
        row("weights from", "none given (model.init_from): planned on the shape above; training needs them");
  out += row("parameters", commas(p.params.total) + " (non-embedding " + commas(p.params.non_embedding) +
                               ", embeddings " + commas(p.params.embedding) + "; allocated " +
                               commas(p.params.allocated) + ")");
  if (lora)
    out += row("LoRA", "trainable parameters: " + commas(p.params.trainable) + " (" +
                           percent_of(p.params.trainable, p.params.total) + " of " + commas(p.params.total) +
                           "); r " + std::to_string(p.lora.rank) + ", alpha " + fmt("%g", p.lora.alpha) +
                           (p.lora.rslora ? " (rsLoRA)" : "") + " on " + lora_targets_text(p.lora.targets));
  if (lora && p.lora.nf4)
    out += row("QLoRA", "4-bit NF4 base, " + fmt("%.3f", p.nf4_bits) + " bits per parameter (" +
                            (p.lora.double_quant ? "double quantisation: 4 + an 8-bit absmax per 64 + fp32 per 256 blocks"
                                                 : "4 + an fp32 absmax per 64") +
                            ") on q, k, v, o, gate, up, down; embedding, norms and head in " + (p.weight_bytes == 2 ? "bf16" : "fp32") +
                            "; FLOPs stay LoRA's (dequantising is not model work)");
  const std::string n_lora = lora ? ", N_lora = " + commas(p.params.trainable) : "";
  out += row("FLOPs/token",
             human_si(p.flops.palm, "FLOP") +
                 (lora ? "  PaLM 4N+6N_lora+12LCT, N = " : "  PaLM 6N+12LCT, N = ") + commas(p.flops.n_palm) +
                 (d.llama() ? (d.tied() ? " (every parameter)" : " (all but the token embedding)")
                            : " (all but the position table)") +
                 n_lora);
  out += row("", human_si(p.flops.llmc, "FLOP") +
                     (lora ? "  llm.c 4N+6N_lora+6LCT, N = " : "  llm.c 6N+6LCT, N = ") +
                     commas(p.flops.n_llmc) + " (every allocated parameter)" + n_lora);
  out += "\nbatch and layout\n";
  out += row("micro-batch", std::to_string(p.B) + " x " + std::to_string(p.T) + " tokens");
  out +=
      row("per step", commas(static_cast<uint64_t>(p.tokens_per_step)) + " tokens = " + std::to_string(p.B) +
                          " x " + std::to_string(p.T) + " x dp " + std::to_string(p.dp) + " x " +
                          std::to_string(p.grad_accum_steps) + " micro-batches per rank");
  out += row("ranks", std::to_string(p.ranks) + " = dp " + std::to_string(p.dp) + " x tp " +
                          std::to_string(p.tp) + " x pp " + std::to_string(p.pp) + "; ZeRO " +
                          std::to_string(p.zero) + ", " + p.dtype + ", recompute " +
                          (p.recompute ? "on" : "off"));
  {
    // The fused LM head (train.logits_chunk_mb): how many rows of logits one chunk holds.
    const long n = static_cast<long>(p.B) * p.T, r = p.logits_chunk_rows;
    if (r > 0 && r < n)
      out +=
          row("LM head", "logits in " + std::to_string((n + r - 1) / r) + " chunks of " + std::to_string(r) +
                             " rows (train.logits_chunk_mb); backward recomputes all but the last");
    else
      out += row("LM head", "logits of all " + std::to_string(n) + " rows at once");
  }
  if (p.pp > 1)
    out += row("pipeline", std::to_string(p.pipeline_micro_batches) + " micro-batches per flush, bubble " +
                               fmt("%.1f%%", p.bubble * 100) + " = (p-1)/(m+p-1)");

  out += '\n';
  out += plan_memory_text(p);
  if (p.pp > 1) {
    out += "\n  stage  layers  params        total       compute     comm\n";
    for (const auto& s : p.stages) {
      char buf[160];
      std::snprintf(
          buf, sizeof buf, "  %-6d %-7s %-13s %-11s %-11s %s\n", s.stage,
          (std::to_string(s.first_layer) + "-" + std::to_string(s.first_layer + s.n_layers - 1)).c_str(),
          commas(s.params).c_str(), human_bytes(static_cast<double>(s.memory.total())).c_str(),
          human_time(s.compute_s).c_str(), human_time(s.comm_s).c_str());
      out += buf;
    }
  }

  const StagePlan& worst = p.stages[static_cast<size_t>(p.peak_stage)];
  out += "\ncommunication per rank per step\n";
  out += row("data parallel", human_bytes(worst.comm_dp_bytes) +
                                  (p.zero ? " (reduce-scatter + all-gather)" : " (all-reduce 2(n-1)/n)") +
                                  (lora && p.dp > 1 ? " of the adapters" : ""));
  out += row("tensor par.", human_bytes(worst.comm_tp_bytes));
  out += row("pipeline", human_bytes(worst.comm_pp_bytes));

  out += "\npredicted step time\n";
  out += row("device", p.device.name);
  out += row("peak", human_si(p.device.flops_per_s, "FLOP/s") + " x efficiency " + fmt("%.2f", p.efficiency) +
                         "; link " + human_si(p.device.link_bytes_per_s, "B/s"));
  out += row("step", human_time(p.step_s) + " = compute " + human_time(p.compute_s) + " + bubble " +
                         human_time(p.bubble_s) + " + comm " + human_time(p.comm_s));
  {
    // A CPU step by kernel family (cpu_step_work), on the busiest stage's rank.
    const auto slower = [](const StagePlan& a, const StagePlan& b) { return a.compute_s < b.compute_s; };
    const StagePlan& busy = *std::max_element(p.stages.begin(), p.stages.end(), slower);
    const CpuWork& w = busy.work;
    if (w.total() > 0 && p.device.flops_per_s > 0) {
      const double rate = p.device.flops_per_s * p.efficiency;
      out += row("compute", "matmuls " + human_time(w.matmul / rate) + " + attention " +
                                human_time(w.attention / rate) + " + other kernels " +
                                human_time(w.elementwise / rate) + " + optimizer " +
                                human_time(w.optimizer / rate) + " (CPU kernel rates, docs/planner.md)");
    }
  }
  out += row("throughput", commas(static_cast<uint64_t>(std::llround(p.tokens_per_s))) + " tokens/s; " +
                               std::to_string(p.steps) + " steps in " + human_time(p.run_s));
  if (p.usd_per_hour > 0)
    out += row("cost", fmt("$%.2f", p.cost_usd) + " at " + fmt("$%.2f", p.usd_per_hour) +
                           " per hour (budget.usd_per_hour)");
  return out;
}

std::string plan_to_json(const Plan& p, int indent) {
  nlohmann::ordered_json j;
  j["model"] = {{"preset", p.preset},
                {"init_from", p.init_from},
                {"arch", arch_name(p.dims.arch)},
                {"n_layer", p.dims.n_layer},
                {"n_head", p.dims.n_head},
                {"n_embd", p.dims.n_embd},
                {"vocab_size", p.dims.vocab_size},
                {"padded_vocab", p.dims.padded_vocab},
                {"max_seq_len", p.dims.max_seq_len}};
  j["parameters"] = {{"total", p.params.total},
                     {"non_embedding", p.params.non_embedding},
                     {"embedding", p.params.embedding},
                     {"allocated", p.params.allocated},
                     {"trainable", p.params.trainable}};
  const bool lora = p.lora.enabled();
  if (lora)
    j["lora"] = {{"enabled", true},
                 {"rank", p.lora.rank},
                 {"alpha", p.lora.alpha},
                 {"dropout", p.lora.dropout},
                 {"use_rslora", p.lora.rslora},
                 {"targets", lora_targets_text(p.lora.targets)},
                 {"base_quant", p.lora.nf4 ? "nf4" : "none"},
                 {"base", p.lora.nf4 ? "4-bit NF4 base" : p.weight_bytes == 2 ? "bf16 base" : "fp32 base"},
                 {"double_quant", p.lora.nf4 && p.lora.double_quant},
                 {"base_bits_per_parameter", p.lora.nf4 ? p.nf4_bits : 8.0 * p.weight_bytes},
                 {"trainable_fraction", p.params.total > 0 ? static_cast<double>(p.params.trainable) /
                                                                 static_cast<double>(p.params.total)
                                                           : 0.0}};
  else
    j["lora"] = {{"enabled", false}};
  if (lora)
    j["flops_per_token"] = {{"palm",
                             {{"formula", "4N + 6N_lora + 12*L*C*T"},
                              {"n", p.flops.n_palm},
                              {"n_lora", p.params.trainable},
                              {"value", p.flops.palm}}},
                            {"llmc",
                             {{"formula", "4N + 6N_lora + 6*L*C*T"},
                              {"n", p.flops.n_llmc},
                              {"n_lora", p.params.trainable},
                              {"value", p.flops.llmc}}}};
  else
    j["flops_per_token"] = {
        {"palm", {{"formula", "6N + 12*L*C*T"}, {"n", p.flops.n_palm}, {"value", p.flops.palm}}},
        {"llmc", {{"formula", "6N + 6*L*C*T"}, {"n", p.flops.n_llmc}, {"value", p.flops.llmc}}}};
  j["batch"] = {{"micro_batch", p.B},
                {"seq_len", p.T},
                {"tokens_per_step", p.tokens_per_step},
                {"grad_accum_steps", p.grad_accum_steps},
                {"flops_per_step", p.flops_per_step}};
  j["layout"] = {{"dp", p.dp},
                 {"tp", p.tp},
                 {"pp", p.pp},
                 {"zero", p.zero},
                 {"ranks", p.ranks},
                 {"pipeline_micro_batches", p.pipeline_micro_batches},
                 {"dtype", p.dtype},
                 {"recompute", p.recompute},
                 {"bubble_fraction", p.bubble},
                 {"logits_chunk_rows", p.logits_chunk_rows}};
  j["memory_per_device"] = memory_json(p.peak());
  j["peak_stage"] = p.peak_stage;
  auto& stages = j["stages"] = nlohmann::ordered_json::array();
  for (const auto& s : p.stages) {
    stages.push_back(
        {{"stage", s.stage},
         {"first_layer", s.first_layer},
         {"n_layers", s.n_layers},
         {"embedding", s.embedding},
         {"head", s.head},
         {"params", s.params},
         {"trainable_params", s.trainable_params},
         {"in_flight", s.in_flight},
         {"memory", memory_json(s.memory)},
         {"flops", s.flops},
         {"comm_bytes", {{"dp", s.comm_dp_bytes}, {"tp", s.comm_tp_bytes}, {"pp", s.comm_pp_bytes}}},
         {"compute_s", s.compute_s},
         {"comm_s", s.comm_s},
         {"cpu_work",
          {{"matmul", s.work.matmul},
           {"attention", s.work.attention},
           {"elementwise", s.work.elementwise},
           {"optimizer", s.work.optimizer},
           {"total", s.work.total()}}}});
  }
  j["device"] = {{"name", p.device.name},
                 {"flops_per_s", p.device.flops_per_s},
                 {"mem_bytes", p.device.mem_bytes},
                 {"mem_note", p.device.mem_note},
                 {"mem_shared_by_ranks", p.device.mem_shared_by_ranks},
                 {"link_bytes_per_s", p.device.link_bytes_per_s},
                 {"efficiency", p.efficiency}};
  j["time"] = {{"compute_s", p.compute_s}, {"bubble_s", p.bubble_s},         {"comm_s", p.comm_s},
               {"step_s", p.step_s},       {"tokens_per_s", p.tokens_per_s}, {"steps", p.steps},
               {"run_s", p.run_s}};
  j["cost"] = {{"usd_per_hour", p.usd_per_hour}, {"usd", p.cost_usd}};
  j["fits"] = p.fits;
  j["needed_bytes"] = p.needed_bytes();
  j["margin_bytes"] = p.margin_bytes();
  return j.dump(indent);
}

}  // namespace flotilla
