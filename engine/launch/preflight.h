// launch's preflight: the data a `train` command will read is checked before any rank starts.
#pragma once

#include <string>
#include <vector>

namespace flotilla {

// For worker args `train --config FILE [--set K=V]...` with file shards (data.source other than
// synthetic): opens data.train and data.val as rank 0 would (open_run_data: every shard's header and
// size, one batch per shard, tokens when data.checked), throwing Error(kData) naming the key, the shard and
// the fault (docs/reliability.md C9), so no rank is started, and no GPU time billed, for a run that would
// fail on its data. A config that does not load is left to the ranks, which report every problem (exit 3).
void preflight_worker_data(const std::vector<std::string>& worker_args);

}  // namespace flotilla
