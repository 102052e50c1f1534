// Out-of-memory message formatting (see out_of_memory.h).
#include "core/out_of_memory.h"

namespace cnn {

std::string format_byte_count(double bytes) {
  static const char* const kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024.0) return fmt::format("{:.0f} B", bytes);
  int unit = -1;
  while (bytes >= 1024.0 && unit < 3) {
    bytes /= 1024.0;
    ++unit;
  }
  return fmt::format("{:.1f} {}", bytes, kUnits[unit]);
}

std::string format_out_of_memory(const std::string& what, const char* device, size_t asked, size_t free_bytes,
                                 size_t total_bytes, const std::string& reason) {
  std::string msg = fmt::format("{}: {} out of memory: asked for {}, {} free of {}", what, device,
                                format_byte_count(double(asked)), format_byte_count(double(free_bytes)),
                                format_byte_count(double(total_bytes)));
  if (!reason.empty()) msg += " (" + reason + ")";
  return msg;
}

}  // namespace cnn
