// The cached models as the user reads them (hub_list.h).
#include "engine/cli/hub_list.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "engine/cli/args.h"

namespace flotilla::cli {
namespace hub = interop::hub;

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string scaled(double v, const char* const units[], int n_units, double step) {
  int u = 0;
  while (v >= step && u + 1 < n_units) {
    v /= step;
    ++u;
  }
  char buf[32];
  if (u == 0)
    std::snprintf(buf, sizeof buf, "%.0f%s", v, units[0]);
  else
    std::snprintf(buf, sizeof buf, v < 10 ? "%.2f%s" : v < 100 ? "%.1f%s" : "%.0f%s", v, units[u]);
  return buf;
}

std::string pad(const std::string& s, size_t width) {
  return s.size() >= width ? s : s + std::string(width - s.size(), ' ');
}

}  // namespace

std::string hub_count_text(uint64_t n) {
  static const char* const units[] = {"", "k", "M", "B", "T"};
  return scaled(static_cast<double>(n), units, 5, 1000.0);
}

std::vector<hub::CachedModel> filter_cached_models(const std::vector<hub::CachedModel>& rows,
                                                   const std::string& text) {
  if (text.empty()) return rows;
  const std::string want = lower(text);
  std::vector<hub::CachedModel> out;
  for (const hub::CachedModel& m : rows)
    if (lower(m.repo_id).find(want) != std::string::npos ||
        lower(m.model_type).find(want) != std::string::npos ||
        lower(m.architecture).find(want) != std::string::npos)
      out.push_back(m);
  return out;
}

namespace {

nlohmann::json row_json(const hub::CachedModel& m) {
  return {{"repo_id", m.repo_id},
          {"commit", m.commit},
          {"refs", m.refs},
          {"folder", m.folder},
          {"model_type", m.model_type},
          {"architecture", m.architecture},
          {"trainable", m.trainable},
          {"why_not", m.why_not},
          {"bytes_on_disk", m.bytes_on_disk},
          {"parameters", m.parameters},
          {"modified_unix", m.modified_unix}};
}

}  // namespace

std::string cached_model_json(const hub::CachedModel& m) { return row_json(m).dump(); }

std::string cached_models_json(const std::vector<hub::CachedModel>& rows, const hub::CacheDir& dir) {
  nlohmann::json models = nlohmann::json::array();
  for (const hub::CachedModel& m : rows) models.push_back(row_json(m));
  const nlohmann::json doc = {{"cache", dir.path}, {"source", dir.source}, {"models", models}};
  return doc.dump(2) + "\n";
}

std::string cached_models_table(const std::vector<hub::CachedModel>& rows, const hub::CacheDir& dir) {
  std::string out = "Hugging Face cache: " + dir.path + " (from " + dir.source + ")\n";
  if (rows.empty()) return out + "no models in it\n";
  size_t w_name = 4, w_refs = 4, w_arch = 12;
  for (const hub::CachedModel& m : rows) {
    std::string refs;
    for (const std::string& r : m.refs) refs += (refs.empty() ? "" : ",") + r;
    w_name = std::max(w_name, m.repo_id.size());
    w_refs = std::max(w_refs, refs.size());
    w_arch = std::max(w_arch, (m.architecture.empty() ? m.model_type : m.architecture).size());
  }
  out += pad("NAME", w_name) + "  COMMIT   " + pad("REFS", w_refs) + "  " + pad("ARCHITECTURE", w_arch) +
         "  PARAMS    SIZE  TRAINABLE\n";
  std::string reasons;
  for (const hub::CachedModel& m : rows) {
    std::string refs;
    for (const std::string& r : m.refs) refs += (refs.empty() ? "" : ",") + r;
    const std::string arch =
        m.architecture.empty() ? (m.model_type.empty() ? "-" : m.model_type) : m.architecture;
    const std::string params = m.parameters ? hub_count_text(m.parameters) : "-";
    const std::string size = hub::bytes_text(m.bytes_on_disk);
    out += pad(m.repo_id, w_name) + "  " + pad(m.commit.empty() ? "-" : m.commit.substr(0, 7), 7) + "  " +
           pad(refs.empty() ? "-" : refs, w_refs) + "  " + pad(arch, w_arch) + "  " +
           std::string(params.size() < 6 ? 6 - params.size() : 0, ' ') + params + "  " +
           std::string(size.size() < 8 ? 8 - size.size() : 0, ' ') + size + "  " +
           (m.trainable ? "yes" : "no") + "\n";
    if (!m.trainable) reasons += "  " + m.repo_id + ": " + m.why_not + "\n";
  }
  if (!reasons.empty()) out += "\nNot trainable:\n" + reasons;
  return out;
}

int hub_list(const CommandArgs& argv) {
  Args args(argv);
  if (args.flag("--help")) {
    std::printf(
        "Usage: flotilla-worker hub list [--json] [--search TEXT]\n\n"
        "The models in this machine's Hugging Face cache (HF_HUB_CACHE, else HF_HOME/hub, else\n"
        "~/.cache/huggingface/hub): each repo's newest complete snapshot, its refs, architecture,\n"
        "parameters, size on disk and whether Flotilla can fine-tune it (and why not).\n"
        "  --json         one JSON document: {\"cache\", \"source\", \"models\": [...]}\n"
        "  --search TEXT  only models whose name, model_type or architecture contains TEXT\n");
    return 0;
  }
  const bool json = args.flag("--json");
  const std::string search = args.value_or("--search", "");
  args.finish("hub list");
  const hub::CacheDir dir = hub::cache_dir();
  const std::vector<hub::CachedModel> rows = filter_cached_models(hub::list_cached_models(dir.path), search);
  const std::string text = json ? cached_models_json(rows, dir) : cached_models_table(rows, dir);
  std::fputs(text.c_str(), stdout);
  return 0;
}

}  // namespace flotilla::cli
