// The OpenCV-free half of video_io.h: what an input names (a camera or a video file).
#include "data/video_io.h"

#include <algorithm>
#include <cctype>

#include "core/error.h"

namespace cnn {

std::optional<int> camera_index(const std::string& input) {
  const std::string prefix = "camera:";
  if (input.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
  const std::string digits = input.substr(prefix.size());
  const bool ok = !digits.empty() && digits.size() <= 4 &&
                  std::all_of(digits.begin(), digits.end(), [](unsigned char c) { return std::isdigit(c) != 0; });
  if (!ok)
    throw ConfigError({"<command line>"}, "--predict",
                      fmt::format("expected camera:N with N a camera index (0, 1, ...), found '{}'", input));
  return std::stoi(digits);
}

bool is_video_path(const std::string& path) {
  const size_t dot = path.rfind('.');
  if (dot == std::string::npos || path.find('/', dot) != std::string::npos) return false;
  std::string ext = path.substr(dot + 1);
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  for (const char* v : {"avi", "mp4", "mkv", "mov", "webm", "m4v", "mpg", "mpeg", "wmv"})
    if (ext == v) return true;
  return false;
}

}  // namespace cnn
