// The dispatcher's error text (see dispatch.h).
#include "ops/dispatch.h"

namespace cnn::detail {

std::string describe_rows(const std::vector<std::pair<std::string, DType>>& rows) {
  std::string s;
  for (const auto& [name, dtype] : rows) s += fmt::format("{}{} {}", s.empty() ? "" : ", ", name, to_string(dtype));
  return s.empty() ? std::string("none") : s;
}

void throw_no_impl(const char* op, Backend b, DType t, std::string_view name,
                   const std::vector<std::pair<std::string, DType>>& rows) {
  const std::string what =
      name.empty() ? fmt::format("no {} implementation", to_string(b)) : fmt::format("no implementation '{}'", name);
  if (!backend_built(b))
    CNN_THROW("{}: {} for {}: this build has no {} backend (built without CUDA); it has: {}", op, what, to_string(t),
              to_string(b), describe_rows(rows));
  CNN_THROW("{}: {} for {} in this build; it has: {}", op, what, to_string(t), describe_rows(rows));
}

}  // namespace cnn::detail
