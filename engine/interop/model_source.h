// Where the model readers take a folder given either as a path or as a Hub name (hub.h): the one
// mapping every reader of a model, adapter or tokenizer folder makes, so callers keep passing the
// config's value ("org/name@<commit>" stays the name in the config, the store and the checkpoints).
//
// Decision: the mapping happens inside each reader (read_hf_config, HfCheckpoint, import_weights,
// the PEFT readers, Tokenizer::load, ...), not at the call sites, so no caller can forget it; it is
// idempotent (a snapshot folder is a path that exists) and hub::local_folder remembers resolutions,
// so mapping the same name at every layer costs one cache lookup; a pinned name ("@<commit>") always
// means the same snapshot, so remembering it is safe in a long-lived process too. A name that cannot be
// resolved is one error that names the key it came from, the name, the cache folder and what to do.
#pragma once

#include <string>

#include "engine/interop/hub.h"

namespace flotilla::interop {

// Whether `value` is meant as a Hub name: hub::is_model_ref (it parses as org/name[@revision] and
// no such relative path exists here), and it is not a weights file name (.safetensors, .bin), which
// model.init_from takes as a path.
bool is_hub_name(const std::string& value);

// `value` unchanged when it is not a Hub name, else its snapshot folder in the Hugging Face cache
// (hub::local_folder with `set`: cached, else downloaded unless offline). Errors keep their code and
// start with `key = "value": `; for a name that resolved nowhere they also say that a folder is
// given as a path (the value may have been meant as one).
std::string local_model_folder(const std::string& value, const std::string& key,
                               hub::FileSet set = hub::FileSet::kTraining);

// For the two places that pin (apply_hf_init_from, apply_lora_init_from): `value`'s snapshot folder
// with *pinned = "org/name@<commit>" for a name without a commit, resolved afresh in the cache (not
// the process's remembered resolution, so a long-lived app that pulled a newer commit pins that one),
// downloaded when missing. A name pinned to a commit, or a path: local_model_folder, *pinned = value.
// Errors as local_model_folder's.
std::string resolve_and_pin(const std::string& value, const std::string& key, hub::FileSet set,
                            std::string* pinned);

// A name's repo id and revision ("" when `value` is not a Hub name): what PEFT's adapter_config.json
// records as base_model_name_or_path and revision.
hub::ModelRef hub_ref_of(const std::string& value);

}  // namespace flotilla::interop
