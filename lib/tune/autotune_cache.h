// The autotuner's disk cache: one JSON file of decisions keyed by everything that can change a
// timing (GPU model, driver, CUDA runtime, cuDNN, this program's version, the shape, direction,
// determinism and the workspace limit). Default path $CNN_AUTOTUNE_CACHE, else
// $XDG_CACHE_HOME/cnn-train/autotune.json, else ~/.cache/cnn-train/autotune.json; "none" disables.
// Trap: the cache is advice, never a dependency: an unreadable or corrupt file is reported and
// ignored, a failed write is a warning; saves merge with what other processes wrote meanwhile.
#pragma once

#include <map>
#include <optional>
#include <string>

namespace cnn {

struct TuneRecord {
  std::string winner;
  double ms = 0;
  std::string runner_up;  // "" when there was one candidate
  double runner_up_ms = 0;
};

// "" for "none"; `flag` empty means the default (environment, then XDG, then HOME).
std::string resolve_autotune_cache_path(const std::string& flag = "");

// GPU name and capability, driver, runtime, cuDNN and program versions: the machine part of a key.
std::string autotune_environment_key();

class AutotuneCache {
public:
  // path "": in memory only (nothing read or written).
  explicit AutotuneCache(std::string path);
  const std::string& path() const { return m_path; }
  // The problem of the last load ("" when none): tests and the log read it.
  const std::string& load_warning() const { return m_warning; }
  std::optional<TuneRecord> find(const std::string& key) const;
  void put(const std::string& key, const TuneRecord& record);
  // Merges with the file's current content and writes it atomically (temp file, then rename).
  // Returns false (and logs a warning) when it could not.
  bool save();
  size_t size() const { return m_entries.size(); }

private:
  std::map<std::string, TuneRecord> read_file(std::string& warning) const;
  std::string m_path;
  std::string m_warning;
  std::map<std::string, TuneRecord> m_entries;
  std::map<std::string, TuneRecord> m_added;  // this process's decisions, written on save
};

}  // namespace cnn
