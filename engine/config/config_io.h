// Reading and writing RunConfig: TOML in (files and --set overrides), TOML and JSON out, and the
// config hash that checkpoints use to refuse an incompatible resume.
//
// Decision: parsing never stops at the first fault. Every unknown key, wrong type and bad preset is
// collected with its file:line and thrown as one Error(kConfig), so a user fixes a file in one
// pass. Semantic checks (divisibility, ranges) are validate()'s job (config_validate.h), not the
// reader's: a file that parses may still be invalid, and the wizard validates structs it built.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/config/run_config.h"

namespace flotilla {

// Parses a TOML document. Defaults come from RunConfig; model.preset sets n_layer/n_head/n_embd
// unless those keys are given explicitly ("custom" keeps the given or default dims). Throws
// Error(kConfig) listing every problem as "<source_name>:<line>: ...".
RunConfig parse_config_toml(const std::string& text, const std::string& source_name);

// Reads and parses a file (Error(kConfig) when it cannot be read).
RunConfig load_config_file(const std::string& path);

// Applies one "--set key=value" override. The value is read as a TOML value ("50", "3e-4",
// "true", "\"x\""); for string keys a bare word is taken as it is (model.preset=gpt2-124m).
// Setting model.preset (to anything but "custom") also sets the preset's n_layer/n_head/n_embd.
// Throws Error(kConfig) naming the key (with a did-you-mean) and the expected type.
void apply_override(RunConfig& config, const std::string& assignment);

// Applies overrides in order, except that model.preset ones go first, so "--set model.n_layer=8"
// refines a preset regardless of the order on the command line. Collects every error, then throws.
void apply_overrides(RunConfig& config, const std::vector<std::string>& assignments);

// load_config_file(path) then apply_overrides(overrides); no validation.
RunConfig load_config(const std::string& path, const std::vector<std::string>& overrides);

// The full resolved config: every key, schema order, one "# doc" comment per key.
// parse_config_toml(config_to_toml(c)) == c for every c (a tested fixed point).
std::string config_to_toml(const RunConfig& config);

// {"run": {...}, "model": {...}, ...} in schema order, indented by `indent` (-1: one line).
std::string config_to_json(const RunConfig& config, int indent = 2);

// 64-bit FNV-1a over the fields that shape the model and optimizer state: model.arch, n_layer,
// n_head, n_embd, vocab_size and max_seq_len (AdamW state mirrors the parameters). Stable across
// runs, builds and machines. The parallel layout is not included: checkpoints record world size
// and layout themselves and refuse a change with their own message.
uint64_t config_hash(const RunConfig& config);

// Sets config.model.preset = name and every shape key that preset sets (presets.h), as a config
// file naming the preset would; "custom" only changes the name. Throws Error(kConfig) with the
// list of presets for an unknown name.
void apply_model_preset(RunConfig& config, const std::string& name);

}  // namespace flotilla
