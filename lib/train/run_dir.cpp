// Run directory files (see run_dir.h).
#include "train/run_dir.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/spdlog.h>

#include <ctime>
#include <filesystem>

#include "core/error.h"

namespace cnn {

namespace fs = std::filesystem;

RunDir::RunDir(const std::string& path) : m_path(path) {
  std::error_code ec;
  fs::create_directories(fs::path(path) / "checkpoints", ec);
  if (ec) CNN_THROW("cannot create run directory '{}': {}", path, ec.message());
  m_metrics.open(fs::path(path) / "metrics.jsonl", std::ios::app);
  if (!m_metrics) CNN_THROW("cannot open '{}/metrics.jsonl' for writing", path);
  auto sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>((fs::path(path) / "train.log").string(), false);
  sink->set_pattern("[%Y-%m-%d %H:%M:%S.%e] %l: %v");
  spdlog::default_logger()->sinks().push_back(sink);
}

RunDir::~RunDir() {
  if (!enabled()) return;
  // Detach our file sink so later runs in the same process don't keep writing to it.
  auto& sinks = spdlog::default_logger()->sinks();
  for (auto it = sinks.begin(); it != sinks.end(); ++it) {
    if (std::dynamic_pointer_cast<spdlog::sinks::basic_file_sink_mt>(*it)) {
      sinks.erase(it);
      break;
    }
  }
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

std::string default_run_dir(const std::string& model_name) {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", &tm);
  return "runs/" + model_name + "-" + buf;
}

}  // namespace cnn
