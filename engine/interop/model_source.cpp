// Paths or Hub names for the model readers (see model_source.h).
#include "engine/interop/model_source.h"

#include <filesystem>

#include "engine/core/error.h"

namespace flotilla::interop {

namespace fs = std::filesystem;

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_hex40(const std::string& s) {
  if (s.size() != 40) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
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
    throw Error(e.code(), key + " = \"" + value + "\": " + e.what() +
                              " (read as a Hugging Face model name; a folder is given as a path, and no "
                              "folder \"" +
                              value + "\" exists here)");
  }
}

std::string pinned_name(const std::string& value, const std::string& folder) {
  if (!is_hub_name(value)) return value;
  const hub::ModelRef ref = hub::parse_model_ref(value, "name");
  if (ref.is_commit()) return value;
  const std::string commit = fs::path(folder).filename().string();
  if (!is_hex40(commit)) return value;
  return ref.repo_id + "@" + commit;
}

hub::ModelRef hub_ref_of(const std::string& value) {
  if (!is_hub_name(value)) return {};
  return hub::parse_model_ref(value, "name");
}

}  // namespace flotilla::interop
