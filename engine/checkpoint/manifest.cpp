// MANIFEST serialisation and a strict, never-crashing parser (see manifest.h).
#include "engine/checkpoint/manifest.h"

#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>
#include <set>

#include "engine/core/checksum.h"
#include "engine/core/error.h"

namespace flotilla::ckpt {
namespace {

using nlohmann::json;

[[noreturn]] void bad(const std::string& what) { throw_checkpoint("MANIFEST: " + what); }

const json& field(const json& obj, const char* key, const std::string& path) {
  auto it = obj.find(key);
  if (it == obj.end()) bad(path + key + " is missing");
  return *it;
}

int64_t get_int(const json& obj, const char* key, const std::string& path, int64_t lo, int64_t hi) {
  const json& v = field(obj, key, path);
  if (!v.is_number_integer()) bad(path + key + " is not an integer");
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
    bad(path + key + " is out of range");
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi) bad(path + key + " = " + std::to_string(x) + " is out of range");
  return x;
}

std::string get_string(const json& obj, const char* key, const std::string& path) {
  const json& v = field(obj, key, path);
  if (!v.is_string()) bad(path + key + " is not a string");
  return v.get<std::string>();
}

bool plain_file_name(const std::string& s) {
  if (s.empty() || s.size() > 255 || s == "." || s == "..") return false;
  for (char c : s)
    if (c == '/' || c == '\\' || c == '\0' || static_cast<unsigned char>(c) < 0x20) return false;
  return true;
}

}  // namespace

const ManifestFile* Manifest::find(const std::string& name) const {
  for (const ManifestFile& f : files)
    if (f.name == name) return &f;
  return nullptr;
}

std::string rank_file_name(int rank) { return "rank-" + std::to_string(rank) + ".bin"; }

std::string hash_hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

bool parse_hash_hex(const std::string& text, uint64_t* out) {
  if (text.size() != 16) return false;
  uint32_t hi = 0, lo = 0;
  if (!parse_crc32c_hex(text.substr(0, 8), &hi) || !parse_crc32c_hex(text.substr(8), &lo)) return false;
  *out = (static_cast<uint64_t>(hi) << 32) | lo;
  return true;
}

std::string utc_now_iso8601(int64_t* unix_seconds) {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  if (unix_seconds != nullptr) *unix_seconds = static_cast<int64_t>(now);
  return buf;
}

std::string manifest_to_json(const Manifest& m) {
  json files = json::array();
  for (const ManifestFile& f : m.files) {
    json jf = {{"name", f.name}, {"size", f.size}, {"crc32c", crc32c_hex(f.crc32c)}};
    if (!f.sections.empty()) {
      json secs = json::array();
      for (const ManifestSection& s : f.sections)
        secs.push_back({{"name", s.name}, {"dtype", s.dtype}, {"shape", s.shape}, {"bytes", s.bytes}});
      jf["sections"] = std::move(secs);
    }
    files.push_back(std::move(jf));
  }
  json j = {{"format", kManifestFormat},
            {"format_version", m.format_version},
            {"step", m.step},
            {"world_size", m.world_size},
            {"config_hash", hash_hex(m.config_hash)},
            {"created", m.created},
            {"created_unix", m.created_unix},
            {"engine_version", m.engine_version},
            {"build_type", m.build_type},
            {"files", std::move(files)}};
  return j.dump(1) + "\n";
}

Manifest parse_manifest(const std::string& text) {
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) bad("not valid JSON");
  if (!j.is_object()) bad("not a JSON object");
  if (get_string(j, "format", "") != kManifestFormat)
    bad("format is not \"" + std::string(kManifestFormat) + "\"");
  Manifest m;
  m.format_version = static_cast<int>(get_int(j, "format_version", "", 0, INT32_MAX));
  if (m.format_version != kManifestFormatVersion)
    bad("format_version " + std::to_string(m.format_version) + " is not supported (this engine reads " +
        std::to_string(kManifestFormatVersion) + ")");
  m.step = get_int(j, "step", "", 0, INT64_MAX);
  m.world_size = static_cast<int>(get_int(j, "world_size", "", 1, 1 << 20));
  if (!parse_hash_hex(get_string(j, "config_hash", ""), &m.config_hash))
    bad("config_hash is not 16 hex digits");
  if (j.contains("created") && j["created"].is_string()) m.created = j["created"].get<std::string>();
  if (j.contains("created_unix") && j["created_unix"].is_number_integer())
    m.created_unix = j["created_unix"].get<int64_t>();
  if (j.contains("engine_version") && j["engine_version"].is_string())
    m.engine_version = j["engine_version"].get<std::string>();
  if (j.contains("build_type") && j["build_type"].is_string())
    m.build_type = j["build_type"].get<std::string>();

  const json& files = field(j, "files", "");
  if (!files.is_array()) bad("files is not an array");
  std::set<std::string> seen;
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string path = "files[" + std::to_string(i) + "].";
    const json& jf = files[i];
    if (!jf.is_object()) bad(path.substr(0, path.size() - 1) + " is not an object");
    ManifestFile f;
    f.name = get_string(jf, "name", path);
    if (!plain_file_name(f.name) || f.name == "MANIFEST")
      bad(path + "name '" + f.name + "' is not a plain file name");
    if (!seen.insert(f.name).second) bad(path + "name '" + f.name + "' is listed twice");
    f.size = static_cast<uint64_t>(get_int(jf, "size", path, 0, INT64_MAX));
    if (!parse_crc32c_hex(get_string(jf, "crc32c", path), &f.crc32c))
      bad(path + "crc32c is not 8 hex digits");
    if (jf.contains("sections")) {
      const json& secs = jf["sections"];
      if (!secs.is_array()) bad(path + "sections is not an array");
      for (size_t k = 0; k < secs.size(); ++k) {
        const std::string sp = path + "sections[" + std::to_string(k) + "].";
        if (!secs[k].is_object()) bad(sp + " is not an object");
        ManifestSection s;
        s.name = get_string(secs[k], "name", sp);
        s.dtype = get_string(secs[k], "dtype", sp);
        s.bytes = static_cast<uint64_t>(get_int(secs[k], "bytes", sp, 0, INT64_MAX));
        const json& shape = field(secs[k], "shape", sp);
        if (!shape.is_array() || shape.size() > 8) bad(sp + "shape is not an array of at most 8 dims");
        for (const json& d : shape) {
          if (!d.is_number_integer() || d.get<int64_t>() < 0)
            bad(sp + "shape has a non-integer or negative dim");
          s.shape.push_back(d.get<int64_t>());
        }
        f.sections.push_back(std::move(s));
      }
    }
    m.files.push_back(std::move(f));
  }
  for (int r = 0; r < m.world_size; ++r)
    if (m.find(rank_file_name(r)) == nullptr)
      bad("world_size is " + std::to_string(m.world_size) + " but " + rank_file_name(r) + " is not listed");
  return m;
}

}  // namespace flotilla::ckpt
