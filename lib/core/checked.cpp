// Checked arithmetic's error messages (see checked.h).
#include "core/checked.h"

#include <climits>

#include "core/error.h"

namespace cnn {

int64_t Checked::value(const std::string& what) const {
  if (!m_ok) CNN_THROW("{} does not fit a 64-bit integer", what);
  return m_value;
}

Checked checked_product(const std::vector<int64_t>& dims) {
  Checked n = 1;
  for (int64_t d : dims) n = n * d;
  return n;
}

int narrow_to_int(int64_t v, const char* what) {
  if (v > INT_MAX || v < INT_MIN) CNN_THROW("{} {} is out of range (at most {}, a 32-bit int)", what, v, INT_MAX);
  return static_cast<int>(v);
}

bool within_tensor_cap(Checked elements) {
  return elements.ok() && elements.value("") <= kMaxTensorElements;
}

std::string tensor_cap_message(Checked elements, const std::string& what) {
  const std::string count = elements.ok() ? fmt::format("{} elements", elements.value(what))
                                          : std::string("more elements than a 64-bit integer counts");
  return fmt::format("{} would have {}, over the per-tensor cap of {} (2^31) elements", what, count,
                     kMaxTensorElements);
}

void check_tensor_cap(Checked elements, const std::string& what) {
  if (!within_tensor_cap(elements)) CNN_THROW("{}", tensor_cap_message(elements, what));
}

size_t checked_bytes(Checked elements, size_t elem_size, const char* what) {
  const Checked bytes = elements * static_cast<int64_t>(elem_size);
  if (!bytes.ok() || bytes.value(what) < 0 || static_cast<uint64_t>(bytes.value(what)) > SIZE_MAX)
    CNN_THROW("{}: {} elements of {} bytes do not fit a byte count", what,
              elements.ok() ? std::to_string(elements.value(what)) : std::string("too many"), elem_size);
  return static_cast<size_t>(bytes.value(what));
}

}  // namespace cnn
