// TOML <-> RunConfig through the schema table (config_schema.h), plus JSON and the config hash.
//
// Decision: the reader walks the parsed TOML tree rather than looking keys up, so every key the
// user wrote is either consumed by a schema row or reported (with file:line and a suggestion);
// nothing the user typed can be silently ignored.
#include "engine/config/config_io.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include <toml++/toml.h>
#include <nlohmann/json.hpp>

#include "engine/config/config_schema.h"
#include "engine/config/config_validate.h"
#include "engine/config/presets.h"
#include "engine/core/error.h"

namespace flotilla {
namespace {

std::string node_type_name(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::string:
      return "string";
    case toml::node_type::integer:
      return "integer";
    case toml::node_type::floating_point:
      return "float";
    case toml::node_type::boolean:
      return "boolean";
    case toml::node_type::table:
      return "table";
    case toml::node_type::array:
      return "array";
    case toml::node_type::date:
      return "date";
    case toml::node_type::time:
      return "time";
    case toml::node_type::date_time:
      return "date-time";
    default:
      return "nothing";
  }
}

// " (<value>)" for scalars, "" for tables and arrays.
std::string shown_value(const toml::node& node) {
  if (auto s = node.as_string()) return " (" + toml_quote(s->get()) + ")";
  if (auto i = node.as_integer()) return " (" + std::to_string(i->get()) + ")";
  if (auto f = node.as_floating_point()) return " (" + format_toml_float(f->get()) + ")";
  if (auto b = node.as_boolean()) return b->get() ? " (true)" : " (false)";
  return "";
}

std::string join(const std::vector<std::string>& items, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? sep : "") + items[i];
  return out;
}

// "unknown value 'cosin' (did you mean 'cosine'?); one of constant, cosine, linear, wsd", or "".
std::string check_choice(const ConfigKey& key, const std::string& value) {
  if (key.choices.empty()) return "";
  if (std::find(key.choices.begin(), key.choices.end(), value) != key.choices.end()) return "";
  std::string msg = key.path() + ": unknown value " + toml_quote(value);
  if (auto m = closest_match(value, key.choices)) msg += " (did you mean " + toml_quote(*m) + "?)";
  return msg + "; one of " + join(key.choices, ", ");
}

// Stores `node` into the field of `key`; returns "" or the problem (starting with the key path).
std::string assign(const ConfigKey& key, RunConfig& config, const toml::node& node) {
  void* p = field_ptr(key, config);
  const std::string got = node_type_name(node) + shown_value(node);
  switch (key.storage) {
    case FieldStorage::kString: {
      auto s = node.as_string();
      if (!s) return key.path() + ": expected a string, got " + got;
      if (auto bad = check_choice(key, s->get()); !bad.empty()) return bad;
      *static_cast<std::string*>(p) = s->get();
      return "";
    }
    case FieldStorage::kBool: {
      auto b = node.as_boolean();
      if (!b) return key.path() + ": expected a boolean (true or false), got " + got;
      *static_cast<bool*>(p) = b->get();
      return "";
    }
    case FieldStorage::kDouble: {
      if (auto f = node.as_floating_point())
        *static_cast<double*>(p) = f->get();
      else if (auto i = node.as_integer())
        *static_cast<double*>(p) = static_cast<double>(i->get());
      else
        return key.path() + ": expected a float, got " + got;
      return "";
    }
    case FieldStorage::kInt32:
    case FieldStorage::kInt64:
    case FieldStorage::kUint64: {
      auto i = node.as_integer();
      if (!key.word.empty() && key.storage == FieldStorage::kInt64) {  // checkpoint.every = "auto"
        if (auto w = node.as_string(); w && w->get() == key.word) {
          *static_cast<int64_t*>(p) = kCheckpointEveryAuto;
          return "";
        }
        if (!i) return key.path() + ": expected an integer or " + toml_quote(key.word) + ", got " + got;
      }
      if (!i) return key.path() + ": expected an integer, got " + got;
      const int64_t v = i->get();
      if (key.storage == FieldStorage::kInt32) {
        if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max())
          return key.path() + ": " + std::to_string(v) + " does not fit a 32-bit integer";
        *static_cast<int*>(p) = static_cast<int>(v);
      } else if (key.storage == FieldStorage::kUint64) {
        if (v < 0) return key.path() + ": expected a non-negative integer, got " + std::to_string(v);
        *static_cast<uint64_t*>(p) = static_cast<uint64_t>(v);
      } else {
        *static_cast<int64_t*>(p) = v;
      }
      return "";
    }
  }
  return key.path() + ": unsupported field";
}

// Copies the value of `key` from one config to another (same field, any storage).
void copy_field(const ConfigKey& key, const RunConfig& from, RunConfig& to) {
  const void* src = field_ptr(key, from);
  void* dst = field_ptr(key, to);
  switch (key.storage) {
    case FieldStorage::kString:
      *static_cast<std::string*>(dst) = *static_cast<const std::string*>(src);
      break;
    case FieldStorage::kInt32:
      *static_cast<int*>(dst) = *static_cast<const int*>(src);
      break;
    case FieldStorage::kInt64:
      *static_cast<int64_t*>(dst) = *static_cast<const int64_t*>(src);
      break;
    case FieldStorage::kUint64:
      *static_cast<uint64_t*>(dst) = *static_cast<const uint64_t*>(src);
      break;
    case FieldStorage::kDouble:
      *static_cast<double*>(dst) = *static_cast<const double*>(src);
      break;
    case FieldStorage::kBool:
      *static_cast<bool*>(dst) = *static_cast<const bool*>(src);
      break;
  }
}

// Sets every shape key the preset lists (presets.h) that is not in `explicit_paths`.
// Returns "" or the problem.
std::string apply_preset(RunConfig& config, const std::set<std::string>& explicit_paths) {
  if (config.model.preset == "custom") return "";
  auto preset = find_model_preset(config.model.preset);
  if (!preset) return check_choice(*find_config_key("model.preset"), config.model.preset);
  RunConfig shaped;
  shaped.model = preset->shape;
  for (const std::string& path : preset_keys(*preset))
    if (!explicit_paths.count(path)) copy_field(*find_config_key(path), shaped, config);
  return "";
}

bool is_section(const std::string& name) {
  for (const auto& s : config_sections())
    if (name == s.name) return true;
  return false;
}

std::vector<std::string> section_names() {
  std::vector<std::string> out;
  for (const auto& s : config_sections()) out.emplace_back(s.name);
  return out;
}

std::string unknown_key_message(const std::string& section, const std::string& name) {
  const std::string path = section.empty() ? name : section + "." + name;
  std::string msg = "unknown key '" + path + "'";
  if (auto m = suggest_key(section, name)) msg += " (did you mean '" + *m + "'?)";
  return msg;
}

[[noreturn]] void throw_problems(const std::string& source, const std::vector<std::string>& problems) {
  std::string msg = source + ": " + std::to_string(problems.size()) +
                    (problems.size() == 1 ? " error" : " errors") + " in the run config:";
  for (const auto& p : problems) msg += "\n  " + p;
  throw_config(msg);
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  const auto e = s.find_last_not_of(" \t");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

}  // namespace

namespace {

// The parse with every problem collected: (line, "file:line: message") and the key paths at fault.
RunConfig parse_collect(const std::string& text, const std::string& source_name,
                        std::vector<std::pair<uint32_t, std::string>>& problems,
                        std::set<std::string>& bad_paths) {
  toml::table root;
  try {
    root = toml::parse(text, source_name);
  } catch (const toml::parse_error& e) {
    const auto& where = e.source().begin;
    throw_config(source_name + ":" + std::to_string(where.line) + ":" + std::to_string(where.column) +
                 ": not valid TOML: " + std::string(e.description()));
  }

  RunConfig config;
  std::set<std::string> given;
  toml::source_region preset_location{};
  auto add = [&](const toml::source_region& src, const std::string& msg) {
    const uint32_t line = src.begin.line;
    problems.emplace_back(line, (line ? source_name + ":" + std::to_string(line) : source_name) + ": " + msg);
  };

  for (auto&& [top_key, top_node] : root) {
    const std::string name(top_key.str());
    const auto& loc = top_key.source().begin.line ? top_key.source() : top_node.source();
    if (!is_section(name)) {
      if (top_node.is_table()) {
        std::string msg = "unknown section [" + name + "]";
        if (auto m = closest_match(name, section_names())) msg += " (did you mean [" + *m + "]?)";
        add(loc, msg);
      } else {
        add(loc, unknown_key_message("", name));
      }
      continue;
    }
    const toml::table* section = top_node.as_table();
    if (!section) {
      add(loc, "'" + name + "' must be a table ([" + name + "]), got " + node_type_name(top_node));
      continue;
    }
    for (auto&& [key, node] : *section) {
      const std::string path = name + "." + std::string(key.str());
      const auto& kloc = key.source().begin.line ? key.source() : node.source();
      const ConfigKey* row = find_config_key(path);
      if (!row) {
        add(kloc, unknown_key_message(name, std::string(key.str())));
        continue;
      }
      if (auto bad = assign(*row, config, node); !bad.empty()) {
        add(kloc, bad);
        bad_paths.insert(path);
        continue;
      }
      given.insert(path);
      if (path == "model.preset") preset_location = kloc;
    }
  }

  if (auto bad = apply_preset(config, given); !bad.empty()) {
    add(preset_location, bad);
    bad_paths.insert("model.preset");
  }
  // toml++ iterates tables in key order; report in file order instead.
  std::stable_sort(problems.begin(), problems.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  return config;
}

std::string read_config_text(const std::string& path) {
  // A directory opens and reads as empty on Linux: it would train the defaults. Refuse anything that
  // is not a regular file (a symlink to one is fine; stat follows it).
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw_config("cannot read run config '" + path + "': " + errno_string(errno));
  if (!S_ISREG(st.st_mode))
    throw_config("run config '" + path + "' is " +
                 (S_ISDIR(st.st_mode) ? "a directory" : "not a regular file") +
                 ", not a TOML file: pass the config file itself (e.g. " +
                 (S_ISDIR(st.st_mode) ? path + "/config.toml" : std::string("run.toml")) + ")");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_config("cannot read run config '" + path + "': " + errno_string(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw_config("cannot read run config '" + path + "': " + errno_string(errno));
  return text.str();
}

}  // namespace

RunConfig parse_config_toml(const std::string& text, const std::string& source_name) {
  std::vector<std::pair<uint32_t, std::string>> problems;
  std::set<std::string> bad_paths;
  RunConfig config = parse_collect(text, source_name, problems, bad_paths);
  if (problems.empty()) return config;
  std::vector<std::string> messages;
  for (const auto& p : problems) messages.push_back(p.second);
  throw_problems(source_name, messages);
}

RunConfig load_config_file(const std::string& path) {
  return parse_config_toml(read_config_text(path), path);
}

void apply_override(RunConfig& config, const std::string& assignment) {
  const auto eq = assignment.find('=');
  if (eq == std::string::npos)
    throw_config("--set '" + assignment + "': expected key=value, e.g. --set train.steps=50");
  const std::string path = trim(assignment.substr(0, eq));
  const std::string value = trim(assignment.substr(eq + 1));
  const ConfigKey* row = find_config_key(path);
  if (!row) {
    const auto dot = path.find('.');
    const std::string section = dot == std::string::npos ? "" : path.substr(0, dot);
    const std::string name = dot == std::string::npos ? path : path.substr(dot + 1);
    throw_config("--set " + path + ": " + unknown_key_message(section, name));
  }

  // Read the value as TOML; a string key also takes the raw text when it is not a TOML string.
  std::optional<toml::table> doc;
  const std::string line = "v = " + value;
  try {
    doc = toml::parse(std::string_view(line), std::string_view("--set"));
  } catch (const toml::parse_error&) {
  }
  const toml::node* node = doc ? doc->get("v") : nullptr;
  std::string bad;
  if ((row->storage == FieldStorage::kString && (!node || !node->is_string())) ||
      (!row->word.empty() && value == row->word)) {  // --set checkpoint.every=auto, unquoted
    toml::value<std::string> raw(value);
    bad = assign(*row, config, raw);
  } else if (!node) {
    bad = row->path() + ": expected " +
          (row->type() == KeyType::kInteger ? std::string("an integer")
                                            : std::string("a ") + key_type_name(row->type())) +
          ", got '" + value + "'";
  } else {
    bad = assign(*row, config, *node);
  }
  if (!bad.empty()) throw_config("--set " + path + "=" + value + ": " + bad);
  if (path == "model.preset") {
    if (auto pb = apply_preset(config, {}); !pb.empty())
      throw_config("--set " + path + "=" + value + ": " + pb);
  }
}

void apply_overrides(RunConfig& config, const std::vector<std::string>& assignments) {
  std::vector<std::string> ordered, problems;
  for (const auto& a : assignments)
    if (trim(a.substr(0, a.find('='))) == "model.preset") ordered.push_back(a);
  for (const auto& a : assignments)
    if (trim(a.substr(0, a.find('='))) != "model.preset") ordered.push_back(a);
  for (const auto& a : ordered) {
    try {
      apply_override(config, a);
    } catch (const Error& e) {
      problems.emplace_back(e.what());
    }
  }
  if (!problems.empty()) throw_problems("command line", problems);
}

RunConfig load_config(const std::string& path, const std::vector<std::string>& overrides) {
  std::vector<std::pair<uint32_t, std::string>> found;
  std::set<std::string> bad_paths;
  RunConfig config = parse_collect(read_config_text(path), path, found, bad_paths);
  std::vector<std::string> problems;
  for (const auto& p : found) problems.push_back(p.second);
  try {
    apply_overrides(config, overrides);
  } catch (const Error& e) {
    problems.emplace_back(e.what());
    for (const auto& a : overrides) bad_paths.insert(trim(a.substr(0, a.find('='))));
  }
  if (problems.empty()) return config;
  // A type error must not hide the value errors of the keys that did parse: report them all at once
  // (the keys at fault keep their defaults, so problems that mention them are left out). A
  // model.init_from folder decides the shape later, so its run is not validated here.
  if (config.model.init_from.empty()) {
    for (const ConfigProblem& pr : validate(config, 0)) {
      const std::string line = to_string(pr);
      const bool about_bad = std::any_of(bad_paths.begin(), bad_paths.end(), [&](const std::string& b) {
        return line.find(b) != std::string::npos;
      });
      if (!about_bad) problems.push_back(line);
    }
  }
  throw_problems(path, problems);
}

std::string config_to_toml(const RunConfig& config) {
  std::string out = "# Flotilla run config, resolved: every key with its value (docs/config.md).\n";
  std::string section;
  for (const auto& key : config_keys()) {
    if (key.section != section) {
      section = key.section;
      out += "\n[" + section + "]\n";
    }
    std::string line = key.name + " = " + format_toml_value(key, config);
    if (line.size() < 36) line.append(36 - line.size(), ' ');
    out += line + "  # " + key.doc + "\n";
  }
  return out;
}

std::string config_to_json(const RunConfig& config, int indent) {
  nlohmann::ordered_json doc = nlohmann::ordered_json::object();
  for (const auto& key : config_keys()) {
    auto& slot = doc[key.section][key.name];
    const void* p = field_ptr(key, config);
    switch (key.storage) {
      case FieldStorage::kString:
        slot = *static_cast<const std::string*>(p);
        break;
      case FieldStorage::kInt32:
        slot = *static_cast<const int*>(p);
        break;
      case FieldStorage::kInt64:
        if (key.is_word(*static_cast<const int64_t*>(p)))
          slot = key.word;
        else
          slot = *static_cast<const int64_t*>(p);
        break;
      case FieldStorage::kUint64:
        slot = *static_cast<const uint64_t*>(p);
        break;
      case FieldStorage::kDouble:
        slot = *static_cast<const double*>(p);
        break;
      case FieldStorage::kBool:
        slot = *static_cast<const bool*>(p);
        break;
    }
  }
  return doc.dump(indent);
}

uint64_t config_hash(const RunConfig& config) {
  // GPT-2's six shape keys (the hash of every GPT-2 checkpoint written so far), plus the llama
  // architecture keys when model.arch = "llama".
  static const char* kShapeKeys[] = {"model.arch",   "model.n_layer",    "model.n_head",
                                     "model.n_embd", "model.vocab_size", "model.max_seq_len"};
  static const char* kLlamaKeys[] = {"model.n_kv_head",
                                     "model.head_dim",
                                     "model.ffn_dim",
                                     "model.norm_eps",
                                     "model.tie_embeddings",
                                     "model.qkv_bias",
                                     "model.qk_norm",
                                     "model.rope_theta",
                                     "model.rope_scaling",
                                     "model.rope_factor",
                                     "model.rope_low_freq_factor",
                                     "model.rope_high_freq_factor",
                                     "model.rope_original_max_position"};
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a offset basis
  auto mix = [&](const char* path) {
    const std::string line =
        std::string(path) + "=" + format_toml_value(*find_config_key(path), config) + "\n";
    for (unsigned char ch : line) {
      h ^= ch;
      h *= 0x100000001b3ull;  // FNV prime
    }
  };
  for (const char* path : kShapeKeys) mix(path);
  if (config.model.arch == "llama")
    for (const char* path : kLlamaKeys) mix(path);
  // LoRA's checkpoints hold the adapters: their shape keys (only when enabled, so the hash of every
  // full-training checkpoint stays what it was).
  if (config.lora.enabled)
    for (const char* path : {"lora.enabled", "lora.rank", "lora.targets"}) mix(path);
  return h;
}

void apply_model_preset(RunConfig& config, const std::string& name) {
  config.model.preset = name;
  if (const std::string problem = apply_preset(config, {}); !problem.empty()) throw_config(problem);
}

}  // namespace flotilla
