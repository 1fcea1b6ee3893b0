// The cached models as the user reads them: `flotilla-worker hub list` and `flotilla models
// list|show` (app/cli/models.cpp) print through these, so both commands say the same thing.
//
// Decision: --json is one document, {"cache": DIR, "source": SETTING, "models": [row, ...]}, each
// row every field of hub::CachedModel under its own name (bytes and parameters as numbers), so a
// script or the wizard reads it without parsing the table. The table keeps one line per model and
// puts each refusal's reason under it, since the reasons are sentences.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/cli/commands.h"
#include "engine/interop/hub.h"

namespace flotilla::cli {

// "494M", "1.5B", "26.8k", "200".
std::string hub_count_text(uint64_t n);

// The rows whose name, model_type or architecture contains `text` (case-insensitive); all for "".
std::vector<interop::hub::CachedModel> filter_cached_models(
    const std::vector<interop::hub::CachedModel>& rows, const std::string& text);

// One row as a JSON object's text.
std::string cached_model_json(const interop::hub::CachedModel& m);
// {"cache": ..., "source": ..., "models": [...]} followed by a newline.
std::string cached_models_json(const std::vector<interop::hub::CachedModel>& rows,
                               const interop::hub::CacheDir& dir);
// The header line naming the cache, the table, and each not-trainable model's reason.
std::string cached_models_table(const std::vector<interop::hub::CachedModel>& rows,
                                const interop::hub::CacheDir& dir);

// flotilla-worker hub list [--json] [--search TEXT] (dispatched from `hub`).
int hub_list(const CommandArgs& args);

}  // namespace flotilla::cli
