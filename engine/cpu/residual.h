// Residual connection: elementwise sum of two streams.
#pragma once

#include <cstddef>

namespace flotilla::cpu {

// out (n) = a + b; out may alias a or b. (Its backward is the identity: the model adds the
// incoming gradient to both branches by accumulating into one residual-gradient buffer.)
void residual_forward(float* out, const float* a, const float* b, size_t n);

}  // namespace flotilla::cpu
