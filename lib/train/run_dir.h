// The run directory (README "Run directory"): config.yaml (resolved), metrics.jsonl (one JSON
// object a line, flushed per line so a crash loses nothing written), train.log (every line logged
// at info level, whatever the console shows), checkpoints/, and run.lock, held with flock for the
// whole run so one directory is owned by one run.
// Trap: only rank 0 writes; other ranks get a RunDir with writes disabled. The lock is released by
// the kernel when the process ends however it ends, so a stale run.lock file never blocks a run.
#pragma once

#include <spdlog/common.h>
#include <spdlog/details/log_msg_buffer.h>

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace spdlog::sinks {
class sink;
}

namespace cnn {

// How a run takes its directory.
enum class RunDirClaim {
  fresh,      // refused when the directory holds a run (config.yaml or a checkpoint)
  resume,     // continues the run that is there: metrics.jsonl and train.log are appended to
  overwrite,  // the old run's files are removed first
};

class RunDir {
public:
  RunDir() = default;  // disabled: writes nothing
  // Creates the directory (and checkpoints/), takes run.lock (refused with a ConfigError naming
  // the holder's PID when another process holds it), applies `claim`, opens metrics.jsonl and
  // adds a train.log sink to the default logger (writing `earlier` first: what the run logged
  // before its directory existed), then removes temporary checkpoint files (`*.tmp-PID`) left by
  // dead processes, logging each.
  RunDir(const std::string& path, RunDirClaim claim, const std::vector<spdlog::details::log_msg_buffer>& earlier = {});
  ~RunDir();
  RunDir(const RunDir&) = delete;
  RunDir& operator=(const RunDir&) = delete;
  bool enabled() const { return !m_path.empty(); }
  const std::string& path() const { return m_path; }
  std::string checkpoints() const { return m_path + "/checkpoints"; }
  void write_config(const std::string& yaml);
  void append_metrics(const nlohmann::json& line);
  // Writes `text` (each of its lines) to train.log only, not to the console: what the program
  // prints on stdout, progress lines the console shows as a bar or not at all, fatal errors the
  // program prints itself. Thread-safe; never throws (a full disk must not hide the first error).
  void log_to_file(spdlog::level::level_enum level, const std::string& text) const noexcept;

private:
  void take_lock();
  void remove_stale_temp_files();
  std::string m_path;
  std::ofstream m_metrics;
  std::shared_ptr<spdlog::sinks::sink> m_log;
  int m_lock_fd = -1;
};

// "runs/<model>-YYYYmmdd-HHMMSS" (local time).
std::string default_run_dir(const std::string& model_name);

// The files that make `dir` hold a run: config.yaml and checkpoints/*.safetensors (empty: none).
std::string run_files_in(const std::string& dir);

}  // namespace cnn
