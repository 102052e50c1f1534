// Where one of our on-disk caches lives (the autotune cache, the decoded-data cache): the same
// precedence for each, so they sit side by side under one cnn-train folder.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

namespace cnn {

// `flag` when given, else the environment variable `env` when set and not empty, else
// $XDG_CACHE_HOME/cnn-train/<name>, else ~/.cache/cnn-train/<name>; "" when the value chosen is
// `none` (the cache is off) or neither XDG_CACHE_HOME nor HOME is set.
inline std::string resolve_cache_path(const std::string& flag, const char* env, const std::string& name) {
  std::string p = flag;
  if (p.empty()) {
    const char* v = std::getenv(env);
    if (v && *v) p = v;
  }
  if (p == "none") return "";
  if (!p.empty()) return p;
  namespace fs = std::filesystem;
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg && *xdg) return (fs::path(xdg) / "cnn-train" / name).string();
  const char* home = std::getenv("HOME");
  if (home && *home) return (fs::path(home) / ".cache" / "cnn-train" / name).string();
  return "";
}

}  // namespace cnn
