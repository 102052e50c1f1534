// Shape printing.
#include "core/shape.h"

#include <fmt/format.h>

#include "core/checked.h"

namespace cnn {

int64_t Shape::numel() const {
  const Checked n = checked_product(m_dims);
  if (!n.ok()) n.value(fmt::format("the element count of shape {}", to_string()));
  return n.value("");
}

std::string Shape::to_string() const {
  std::string s = "[";
  for (size_t i = 0; i < m_dims.size(); ++i) s += (i ? ", " : "") + std::to_string(m_dims[i]);
  return s + "]";
}

}  // namespace cnn
