// The target id that carries no loss: masked prompt tokens, padding and targets that would cross
// a document boundary (docs/data.md). The cross-entropy kernels give it loss 0 and gradient 0, and
// it is not counted in the mean. -100 is PyTorch's and transformers' ignore_index.
#pragma once

#include <cstdint>

namespace flotilla {

inline constexpr int32_t kIgnoreTarget = -100;

}  // namespace flotilla
