// Error types and the "did you mean" helpers shared by every user-facing check.
#include "core/error.h"

#include <algorithm>
#include <filesystem>

namespace cnn {

std::string Location::to_string() const {
  if (file.empty() && line == 0) return "<unknown>";
  if (line == 0) return file;
  return fmt::format("{}:{}:{}", file.empty() ? "<input>" : file, line, col);
}

static std::string format_config_error(const Location& where, const std::string& key_path,
                                       const std::string& message) {
  std::string out = where.to_string() + ": ";
  if (!key_path.empty()) out += "'" + key_path + "': ";
  return out + message;
}

ConfigError::ConfigError(Location where, std::string key_path, std::string message)
    : Error(format_config_error(where, key_path, message)),
      m_where(std::move(where)),
      m_key_path(std::move(key_path)),
      m_message(std::move(message)) {}

void throw_error(const char* file, int line, const std::string& message) {
  throw Error(message, fmt::format("{}:{}", std::filesystem::path(file).filename().string(), line));
}

int edit_distance(const std::string& a, const std::string& b) {
  std::vector<int> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = static_cast<int>(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = static_cast<int>(i);
    for (size_t j = 1; j <= b.size(); ++j) {
      int sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string closest_match(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  int best_d = 1 << 30;
  for (const auto& c : candidates) {
    int d = edit_distance(word, c);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  // A plausible typo: at most a third of the longer word differs (and at least one edit allowed).
  size_t longest = std::max(word.size(), best.size());
  int limit = std::max<int>(1, static_cast<int>((longest + 2) / 3));
  if (best.empty() || best_d > limit) return "";
  return best;
}

std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates) {
  std::string m = closest_match(word, candidates);
  return m.empty() ? std::string() : fmt::format(", did you mean '{}'?", m);
}

std::string join_some(const std::vector<std::string>& names, size_t shown) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < shown; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > shown) s += fmt::format(" and {} more", names.size() - shown);
  return s;
}

std::string clip_text(const std::string& text, size_t max_bytes) {
  if (text.size() <= max_bytes) return text;
  size_t end = max_bytes;
  // Back up over continuation bytes (10xxxxxx) so that the cut falls before a lead byte.
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
  return text.substr(0, end) + "...";
}

}  // namespace cnn
