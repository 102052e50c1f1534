// Run directory files and ownership (see run_dir.h).
#include "train/run_dir.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <spdlog/details/log_msg.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "core/error.h"

namespace cnn {

namespace fs = std::filesystem;

static const char* kLockFile = "run.lock";

std::string run_files_in(const std::string& dir) {
  std::string found;
  std::error_code ec;
  if (fs::exists(fs::path(dir) / "config.yaml", ec)) found = "config.yaml";
  const fs::path ckpt = fs::path(dir) / "checkpoints";
  if (fs::is_directory(ckpt, ec)) {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(ckpt, ec))
      if (e.path().extension() == ".safetensors") names.push_back("checkpoints/" + e.path().filename().string());
    std::sort(names.begin(), names.end());
    for (const auto& n : names) found += (found.empty() ? "" : ", ") + n;
  }
  return found;
}

void RunDir::take_lock() {
  const std::string lock = (fs::path(m_path) / kLockFile).string();
  m_lock_fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (m_lock_fd < 0) CNN_THROW("cannot open the run's lock file '{}': {}", lock, std::strerror(errno));
  if (::flock(m_lock_fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char buf[32] = {0};
    const ssize_t n = ::pread(m_lock_fd, buf, sizeof buf - 1, 0);
    ::close(m_lock_fd);
    m_lock_fd = -1;
    if (err != EWOULDBLOCK) CNN_THROW("cannot lock '{}': {}", lock, std::strerror(err));
    std::string holder = n > 0 ? std::string(buf, size_t(n)) : "";
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
    throw ConfigError({"--out"}, "",
                      fmt::format("run directory '{}' is in use by another cnn-train run (PID {}); wait for it to "
                                  "end, or choose another --out",
                                  m_path, holder.empty() ? "unknown" : holder));
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(m_lock_fd, 0) != 0 || ::pwrite(m_lock_fd, pid.data(), pid.size(), 0) != ssize_t(pid.size()))
    spdlog::warn("cannot write this process's PID into '{}': {}", lock, std::strerror(errno));
}

RunDir::RunDir(const std::string& path, RunDirClaim claim, const std::vector<spdlog::details::log_msg_buffer>& earlier)
    : m_path(path) {
  std::error_code ec;
  if (fs::exists(path, ec) && !fs::is_directory(path, ec))
    throw ConfigError({"--out"}, "", fmt::format("'{}' exists and is not a directory", path));
  fs::create_directories(path, ec);
  if (ec) CNN_THROW("cannot create run directory '{}': {}", path, ec.message());
  take_lock();
  try {
    const std::string held = run_files_in(path);
    if (claim == RunDirClaim::fresh && !held.empty())
      throw ConfigError({"--out"}, "",
                        fmt::format("run directory '{}' already holds a run ({}): continue it with --resume {}, "
                                    "replace it with --overwrite, or choose another --out",
                                    path, held, path));
    std::string removed;
    if (claim == RunDirClaim::overwrite) {
      for (const char* name : {"config.yaml", "metrics.jsonl", "train.log", "checkpoints"}) {
        const fs::path p = fs::path(path) / name;
        if (!fs::exists(p, ec)) continue;
        fs::remove_all(p, ec);
        if (ec) CNN_THROW("--overwrite: cannot remove '{}': {}", p.string(), ec.message());
        removed += (removed.empty() ? "" : ", ") + std::string(name);
      }
    }
    fs::create_directories(fs::path(path) / "checkpoints", ec);
    if (ec) CNN_THROW("cannot create '{}/checkpoints': {}", path, ec.message());
    // A fresh run starts its own files (a failed earlier attempt may have left a log behind).
    const bool append = claim == RunDirClaim::resume;
    m_metrics.open(fs::path(path) / "metrics.jsonl", append ? std::ios::app : std::ios::trunc);
    if (!m_metrics) CNN_THROW("cannot open '{}/metrics.jsonl' for writing", path);
    auto sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>((fs::path(path) / "train.log").string(), !append);
    sink->set_pattern("[%Y-%m-%d %H:%M:%S.%e] %l: %v");
    for (const auto& line : earlier) sink->log(line);
    m_log = sink;
    spdlog::default_logger()->sinks().push_back(m_log);
    spdlog::default_logger()->flush_on(spdlog::level::info);
    if (!removed.empty()) spdlog::info("--overwrite: removed the previous run's {}", removed);
    remove_stale_temp_files();
  } catch (...) {
    ::close(m_lock_fd);
    m_lock_fd = -1;
    if (m_log) {
      auto& sinks = spdlog::default_logger()->sinks();
      sinks.erase(std::remove(sinks.begin(), sinks.end(), m_log), sinks.end());
    }
    throw;
  }
}

// A checkpoint is written to "<name>.tmp-<PID>" and renamed; a process killed in between leaves
// the temp file behind. This run holds the lock, so no live run of ours writes here.
void RunDir::remove_stale_temp_files() {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(checkpoints(), ec)) {
    const std::string name = e.path().filename().string();
    const size_t at = name.rfind(".tmp-");
    if (at == std::string::npos) continue;
    const std::string digits = name.substr(at + 5);
    if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 9) continue;
    const pid_t pid = pid_t(std::stol(digits));
    if (pid == ::getpid()) continue;
    if (pid > 0 && (::kill(pid, 0) == 0 || errno == EPERM)) {
      spdlog::warn("left '{}' alone: process {} that writes it is still running", e.path().string(), pid);
      continue;
    }
    std::error_code rm;
    fs::remove(e.path(), rm);
    if (rm)
      spdlog::warn("cannot remove the stale temporary checkpoint '{}': {}", e.path().string(), rm.message());
    else
      spdlog::info("removed '{}': a checkpoint write of process {}, which is no longer running, never finished",
                   e.path().string(), pid);
  }
}

RunDir::~RunDir() {
  if (!enabled()) return;
  // Detach our file sink so later runs in the same process don't keep writing to it.
  auto& sinks = spdlog::default_logger()->sinks();
  sinks.erase(std::remove(sinks.begin(), sinks.end(), m_log), sinks.end());
  if (m_lock_fd >= 0) ::close(m_lock_fd);  // releases the flock
}

void RunDir::write_config(const std::string& yaml) {
  if (!enabled()) return;
  fs::path p = fs::path(m_path) / "config.yaml";
  std::ofstream f(p, std::ios::trunc);
  f << yaml;
  if (!f) CNN_THROW("cannot write '{}'", p.string());
}

void RunDir::append_metrics(const nlohmann::json& line) {
  if (!enabled()) return;
  m_metrics << line.dump() << '\n';
  m_metrics.flush();
  if (!m_metrics) CNN_THROW("cannot append to '{}/metrics.jsonl'", m_path);
}

void RunDir::log_to_file(spdlog::level::level_enum level, const std::string& text) const noexcept {
  if (!m_log) return;
  try {
    m_log->log(spdlog::details::log_msg(spdlog::default_logger()->name(), level, text));
    m_log->flush();
  } catch (...) {  // a full disk: the console still has the message
  }
}

std::string default_run_dir(const std::string& model_name) {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", &tm);
  return "runs/" + model_name + "-" + buf;
}

}  // namespace cnn
