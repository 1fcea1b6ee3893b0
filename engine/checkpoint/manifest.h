// The MANIFEST of a checkpoint directory: the commit record that makes it loadable.
//
// Decision: the manifest is strict JSON checked field by field (types, ranges, safe file names),
// and the parser never throws anything but Error(kCheckpoint) with the field named, so a damaged or
// hand-edited manifest only ever makes its checkpoint "not verified" (docs/reliability.md C8/F2).
//
// {"format": "flotilla-checkpoint", "format_version": 1, "step": 40, "world_size": 1,
//  "config_hash": "00000000deadbeef", "created": "2026-01-01T00:00:00Z", "created_unix": 1767225600,
//  "engine_version": "0.1.0", "build_type": "Release",
//  "files": [{"name": "rank-0.bin", "size": 1234, "crc32c": "e3069283",
//             "sections": [{"name": "params", "dtype": "f32", "shape": [100], "bytes": 400}]},
//            {"name": "trainer.json", "size": 56, "crc32c": "..."}]}
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace flotilla::ckpt {

inline constexpr int kManifestFormatVersion = 1;
inline constexpr const char* kManifestFormat = "flotilla-checkpoint";
inline constexpr uint64_t kMaxManifestBytes = uint64_t{16} << 20;

struct ManifestSection {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  uint64_t bytes = 0;
};

struct ManifestFile {
  std::string name;
  uint64_t size = 0;
  uint32_t crc32c = 0;
  std::vector<ManifestSection> sections;  // rank files only
};

struct Manifest {
  int format_version = kManifestFormatVersion;
  int64_t step = 0;
  int world_size = 1;
  uint64_t config_hash = 0;
  std::string created;  // ISO 8601 UTC
  int64_t created_unix = 0;
  std::string engine_version;
  std::string build_type;
  std::vector<ManifestFile> files;

  const ManifestFile* find(const std::string& name) const;
};

std::string manifest_to_json(const Manifest& m);

// Throws Error(kCheckpoint) naming the field: "MANIFEST: format_version 7 is not supported (this
// engine reads 1)", "MANIFEST: files[1].name '../x' is not a plain file name", ...
Manifest parse_manifest(const std::string& text);

// "rank-3.bin"
std::string rank_file_name(int rank);

// "0000000000abcdef" / parse back (false unless exactly 16 hex digits).
std::string hash_hex(uint64_t v);
bool parse_hash_hex(const std::string& text, uint64_t* out);

// Current UTC time as ISO 8601 ("2026-01-01T00:00:00Z") and seconds since the epoch.
std::string utc_now_iso8601(int64_t* unix_seconds);

}  // namespace flotilla::ckpt
