// The run-config schema: one table row per key of RunConfig (path, type, one-line doc, allowed
// values, and where the field lives in the struct).
//
// Decision: the table is the single source for everything that enumerates keys (the TOML reader
// and writer, JSON, --set, docs/config.md, the golden key list, equality and diffs); defaults are
// never written here but read from a default-constructed RunConfig, so run_config.h stays the one
// place that defines them. A test parses run_config.h and fails when a field has no row here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/config/run_config.h"

namespace flotilla {

// The TOML type a key takes (what users see, what the golden key list freezes).
enum class KeyType { kString, kInteger, kFloat, kBoolean };

// How the field is stored in RunConfig.
enum class FieldStorage { kString, kInt32, kInt64, kUint64, kDouble, kBool };

struct ConfigSectionInfo {
  const char* name;  // "train"
  const char* doc;   // one line, for docs/config.md
};

struct ConfigKey {
  std::string section;  // "train"
  std::string name;     // "steps"
  FieldStorage storage;
  std::string doc;                   // one line (the comment beside the field in run_config.h)
  std::vector<std::string> choices;  // allowed values of an enumerated string; empty = free text
  void* (*field)(RunConfig&);        // where the value lives inside a RunConfig
  // An integer key that also takes one word (checkpoint.every = "auto"): the word is stored as
  // kCheckpointEveryAuto and written back as the word (TOML, JSON); "" = numbers only.
  std::string word;

  bool is_word(int64_t value) const { return !word.empty() && value == kCheckpointEveryAuto; }

  std::string path() const { return section + "." + name; }  // "train.steps"
  KeyType type() const;
};

// Sections in file order: run, model, data, train, optim, parallel, checkpoint, eval, budget.
const std::vector<ConfigSectionInfo>& config_sections();

// Every key, in section order then declaration order (the order of config_to_toml and the docs).
const std::vector<ConfigKey>& config_keys();

// The row for "section.name", or nullptr.
const ConfigKey* find_config_key(const std::string& path);

const char* key_type_name(KeyType type);  // "string", "integer", "float", "boolean"

// Typed access to a field through its row (the storage must match; asserts otherwise).
void* field_ptr(const ConfigKey& key, RunConfig& config);
const void* field_ptr(const ConfigKey& key, const RunConfig& config);

// The value as a TOML literal: "\"tiny\"", "200", "0.0006", "true". Doubles use the shortest text
// that reads back to the same bits, always with a '.' or exponent so TOML types them as floats.
std::string format_toml_value(const ConfigKey& key, const RunConfig& config);
std::string toml_quote(const std::string& text);  // a TOML basic string with escapes
std::string format_toml_float(double value);

// Paths of the keys whose values differ (doubles compare equal when both are NaN).
std::vector<std::string> config_diff(const RunConfig& a, const RunConfig& b);
bool configs_equal(const RunConfig& a, const RunConfig& b);

// "did you mean": the candidate closest to `word` by edit distance (transpositions count 1),
// accepted when within about a third of the word's length or when one is a prefix of the other.
std::optional<std::string> closest_match(const std::string& word, const std::vector<std::string>& candidates);
int edit_distance(const std::string& a, const std::string& b);

// Suggestion for an unknown key `section.name` (same section first, then the same name in another
// section, then any path): "optim.warmup" -> "optim.warmup_steps", "train.lr" -> "optim.lr".
std::optional<std::string> suggest_key(const std::string& section, const std::string& name);

// The golden key list: one "path type" line per key (tests/engine/golden/config_keys.txt).
std::string config_key_list();

// docs/config.md, generated from this table, the presets and the defaults.
std::string config_docs_markdown();

}  // namespace flotilla
