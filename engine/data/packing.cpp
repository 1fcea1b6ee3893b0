// Sequence packing: documents -> pieces of at most T + 1 tokens -> rows, first fit in file order.
//
// One non-obvious decision: rows are filled strictly in order (a piece that does not fit closes
// the row) rather than by a bin-packing search, so the plan is a pure function of the document
// lengths, cheap to recompute on every rank and on resume, and documents stay in file order.
#include "engine/data/packing.h"

#include "engine/core/error.h"

namespace flotilla {

PackPlan plan_rows(const std::vector<int64_t>& doc_starts, int64_t total, int T, bool pack) {
  if (T < 1) throw_config("packing: sequence length " + std::to_string(T) + " must be positive");
  PackPlan plan;
  const int64_t row = static_cast<int64_t>(T) + 1;
  int64_t used = row;  // no open row yet
  auto place = [&](int64_t begin, int64_t length) {
    if (!pack || used + length > row) {
      if (!plan.row_begin.empty()) plan.padding += row - used;
      plan.row_begin.push_back(static_cast<int64_t>(plan.segments.size()));
      used = 0;
    }
    plan.segments.push_back({begin, static_cast<int32_t>(length)});
    used += length;
  };
  plan.documents = static_cast<int64_t>(doc_starts.size());
  for (size_t d = 0; d < doc_starts.size(); ++d) {
    const int64_t begin = doc_starts[d];
    const int64_t end = d + 1 < doc_starts.size() ? doc_starts[d + 1] : total;
    if (end - begin <= row) {
      place(begin, end - begin);
      continue;
    }
    ++plan.split_documents;
    for (int64_t s = begin; s + 1 < end; s += T) place(s, std::min(row, end - s));
  }
  if (!plan.row_begin.empty()) plan.padding += row - used;
  plan.row_begin.push_back(static_cast<int64_t>(plan.segments.size()));
  return plan;
}

}  // namespace flotilla
