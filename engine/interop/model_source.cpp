// Paths or Hub names for the model readers (see model_source.h).
#include "engine/interop/model_source.h"

#include <cstdio>

#include "engine/core/error.h"

namespace flotilla::interop {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// A resolution's error, said of the key and the value it came from.
Error named(const Error& e, const std::string& key, const std::string& value) {
  return Error(e.code(),
               key + " = \"" + value + "\": " + e.what() +
                   " (read as a Hugging Face model name; a folder is given as a path, and no folder \"" +
                   value + "\" exists here)");
}

}  // namespace

bool is_hub_name(const std::string& value) {
  const std::string id = value.substr(0, value.find('@'));
  if (ends_with(id, ".safetensors") || ends_with(id, ".bin")) return false;
  return hub::is_model_ref(value);
}

std::string local_model_folder(const std::string& value, const std::string& key, hub::FileSet set) {
  if (!is_hub_name(value)) return value;
  try {
    return hub::local_folder(value, set);
  } catch (const Error& e) {
    throw named(e, key, value);
  }
}

std::string resolve_and_pin(const std::string& value, const std::string& key, hub::FileSet set,
                            std::string* pinned) {
  *pinned = value;
  if (!is_hub_name(value)) return value;
  const hub::ModelRef ref = hub::parse_model_ref(value, key);
  if (ref.is_commit()) return local_model_folder(value, key, set);
  try {
    hub::DownloadOptions o;
    o.set = set;
    o.progress = hub::stderr_progress("downloading " + value + ": ");
    const hub::Resolved r = hub::resolve(ref, o);
    if (r.downloaded) std::fprintf(stderr, "%s\n", r.note.c_str());
    *pinned = ref.repo_id + "@" + r.snapshot.commit;
    return r.snapshot.folder;
  } catch (const Error& e) {
    throw named(e, key, value);
  }
}

hub::ModelRef hub_ref_of(const std::string& value) {
  if (!is_hub_name(value)) return {};
  return hub::parse_model_ref(value, "name");
}

}  // namespace flotilla::interop
