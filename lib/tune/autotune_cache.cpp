// Autotune cache file (see autotune_cache.h). Format: {"format": 1, "entries": {key: {"winner": ..,
// "ms": .., "runner_up": .., "runner_up_ms": ..}}}.
#include "tune/autotune_cache.h"

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/cache_path.h"
#include "core/device.h"
#include "dist/gpu_info.h"

namespace cnn {

namespace fs = std::filesystem;

std::string resolve_autotune_cache_path(const std::string& flag) {
  return resolve_cache_path(flag, "CNN_AUTOTUNE_CACHE", "autotune.json");
}

std::string autotune_environment_key() {
  std::string gpu = cuda_available() ? cuda_device_description() : "cpu";
  // "NVIDIA H200 (sm_90, 139.8 GiB, device 3 of 8)": which device of the host does not matter.
  const size_t at = gpu.find(", device ");
  if (at != std::string::npos) gpu = gpu.substr(0, at) + ")";
  const CudaVersions v = cuda_versions();
  return fmt::format("{}|driver {}|cuda {}|cudnn {}|cnn {}", gpu, v.driver, v.runtime, v.cudnn, CNN_VERSION);
}

AutotuneCache::AutotuneCache(std::string path) : m_path(std::move(path)) {
  if (m_path.empty()) return;
  m_entries = read_file(m_warning);
  if (!m_warning.empty()) spdlog::warn("autotune cache: {}", m_warning);
}

std::map<std::string, TuneRecord> AutotuneCache::read_file(std::string& warning) const {
  std::map<std::string, TuneRecord> out;
  std::error_code ec;
  if (!fs::exists(m_path, ec)) return out;
  std::ifstream f(m_path);
  std::stringstream text;
  text << f.rdbuf();
  if (!f) {
    warning = fmt::format("cannot read '{}'; ignoring it", m_path);
    return out;
  }
  try {
    const nlohmann::json j = nlohmann::json::parse(text.str());
    if (!j.is_object() || j.value("format", 0) != 1 || !j.contains("entries") || !j["entries"].is_object())
      throw std::runtime_error("not an autotune cache of format 1");
    for (const auto& [key, e] : j["entries"].items())
      out[key] = TuneRecord{e.at("winner").get<std::string>(), e.at("ms").get<double>(),
                            e.value("runner_up", std::string()), e.value("runner_up_ms", 0.0)};
  } catch (const std::exception& e) {
    warning = fmt::format("'{}' is corrupt ({}); ignoring it (it will be rewritten)", m_path, e.what());
    out.clear();
  }
  return out;
}

std::optional<TuneRecord> AutotuneCache::find(const std::string& key) const {
  auto it = m_entries.find(key);
  if (it == m_entries.end()) return std::nullopt;
  return it->second;
}

void AutotuneCache::put(const std::string& key, const TuneRecord& record) {
  m_entries[key] = record;
  m_added[key] = record;
}

bool AutotuneCache::save() {
  if (m_path.empty() || m_added.empty()) return true;
  std::string ignored;
  std::map<std::string, TuneRecord> merged = read_file(ignored);  // what others wrote meanwhile
  for (const auto& [k, r] : m_added) merged[k] = r;
  nlohmann::json entries = nlohmann::json::object();
  for (const auto& [k, r] : merged)
    entries[k] = {{"winner", r.winner}, {"ms", r.ms}, {"runner_up", r.runner_up}, {"runner_up_ms", r.runner_up_ms}};
  const nlohmann::json j{{"format", 1}, {"entries", entries}};
  const fs::path target(m_path);
  const fs::path tmp = target.string() + fmt::format(".tmp.{}", ::getpid());
  std::error_code ec;
  if (target.has_parent_path()) fs::create_directories(target.parent_path(), ec);
  {
    std::ofstream f(tmp);
    f << j.dump(1) << "\n";
    f.flush();
    if (!f) {
      spdlog::warn("autotune cache: cannot write '{}'; decisions not saved", tmp.string());
      fs::remove(tmp, ec);
      return false;
    }
  }
  fs::rename(tmp, target, ec);
  if (ec) {
    spdlog::warn("autotune cache: cannot rename '{}' to '{}' ({}); decisions not saved", tmp.string(), m_path,
                 ec.message());
    fs::remove(tmp, ec);
    return false;
  }
  m_entries = std::move(merged);
  m_added.clear();
  return true;
}

}  // namespace cnn
