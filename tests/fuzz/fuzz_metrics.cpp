// libFuzzer target (docs/reliability.md F3): the metrics-protocol reader (engine/train/metrics_reader.h), the
// only parser of what a worker writes and of a remote node's metrics.jsonl. The input is a byte stream fed
// to LineSplitter in two chunks cut at a point taken from the input itself; every complete line goes through
// parse_metrics_line with flattening on. Invariants: no crash; a record's accessors match its type; the
// splitter hands back every byte (lines + their '\n' + the held tail = the input), whatever the cut.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "engine/train/metrics_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const size_t cut = size == 0 ? 0 : data[0] % (size + 1);
  flotilla::LineSplitter splitter;
  size_t seen = 0;
  for (const std::string_view chunk : {bytes.substr(0, cut), bytes.substr(cut)}) {
    for (const std::string& line : splitter.feed(chunk)) {
      seen += line.size() + 1;
      flotilla::MetricsRecord record;
      std::string error;
      const flotilla::ParseStatus status =
          flotilla::parse_metrics_line(line, record, flotilla::ParseOptions{.flatten = true}, &error);
      if (status == flotilla::ParseStatus::kBad && error.empty()) std::abort();  // every refusal says why
      if (status != flotilla::ParseStatus::kRecord) continue;
      switch (record.type) {  // std::get throws (and so aborts the fuzzer) on a type/body mismatch
        case flotilla::MetricsRecordType::kStep:
          (void)record.step();
          break;
        case flotilla::MetricsRecordType::kEval:
          (void)record.eval();
          break;
        case flotilla::MetricsRecordType::kCheckpoint:
          (void)record.checkpoint();
          break;
        case flotilla::MetricsRecordType::kRunStart:
          (void)record.run_start();
          break;
        case flotilla::MetricsRecordType::kSample:
          (void)record.sample();
          break;
        case flotilla::MetricsRecordType::kEvent:
          (void)record.event();
          break;
        case flotilla::MetricsRecordType::kSummary:
          (void)record.summary();
          break;
        case flotilla::MetricsRecordType::kTask:
          (void)record.task();
          break;
        case flotilla::MetricsRecordType::kComm:
          (void)record.comm();
          break;
      }
      (void)record.step_number();
    }
  }
  if (seen + splitter.pending_bytes() != size) std::abort();  // a byte lost or invented
  return 0;
}
