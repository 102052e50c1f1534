// The run directory of DESIGN.md: config.yaml (resolved), metrics.jsonl (one JSON object a
// line, flushed per line so a crash loses nothing written), train.log (everything logged),
// checkpoints/. Trap: only rank 0 writes; other ranks get a RunDir with writes disabled.
#pragma once

#include <fstream>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

namespace cnn {

class RunDir {
public:
  RunDir() = default;  // disabled: writes nothing
  // Creates the directory (and checkpoints/) if needed; adds a train.log sink to the logger.
  explicit RunDir(const std::string& path);
  ~RunDir();
  bool enabled() const { return !m_path.empty(); }
  const std::string& path() const { return m_path; }
  std::string checkpoints() const { return m_path + "/checkpoints"; }
  void write_config(const std::string& yaml);
  void append_metrics(const nlohmann::json& line);

private:
  std::string m_path;
  std::ofstream m_metrics;
};

// "runs/<model>-YYYYmmdd-HHMMSS" (local time).
std::string default_run_dir(const std::string& model_name);

}  // namespace cnn
