// Operand views of raw float pointer arrays, for the array operands of add and concat in tests:
// views(xs, n).data() lives until the end of the full expression that calls the op.
#pragma once

#include <cstddef>
#include <vector>

#include "core/view.h"

namespace cnn::test {

inline std::vector<ConstView> views(const float* const* p, size_t n) { return std::vector<ConstView>(p, p + n); }
inline std::vector<View> views(float* const* p, size_t n) { return std::vector<View>(p, p + n); }

}  // namespace cnn::test
