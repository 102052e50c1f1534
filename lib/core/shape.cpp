// Shape printing.
#include "core/shape.h"

#include <fmt/format.h>

namespace cnn {

std::string Shape::to_string() const {
  std::string s = "[";
  for (size_t i = 0; i < m_dims.size(); ++i) s += (i ? ", " : "") + std::to_string(m_dims[i]);
  return s + "]";
}

}  // namespace cnn
