// Helpers of the end-to-end tests: run a real program (from CNN_BUILD_DIR) with its stdout, stderr
// and exit status captured, write small data sets and model files, read a run directory back.
// Trap: programs run with the test's TempDir as working directory, so relative paths in model
// files written by these helpers resolve there, not in the build tree.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace cnn::test {

struct ProgramResult {
  int exit_code = -1;  // the exit status, or 128 + signal when the program was killed
  std::string out, err;
  std::string command;           // for failure messages
  std::string describe() const;  // command, exit code, stdout and stderr
};

// CNN_BUILD_DIR/app/<name>.
std::string program_path(const std::string& name);
// Runs `program` with `args` (no shell) in `cwd` (the current directory when empty).
ProgramResult run_program(const std::string& program, const std::vector<std::string>& args,
                          const std::filesystem::path& cwd = {});

// A FER2013 CSV of synthetic faces: `train` Training, `val` PublicTest, `test` PrivateTest rows.
void write_fer_csv(const std::filesystem::path& path, int64_t train, int64_t val, int64_t test, uint64_t seed = 1);
// A small CNN for 7 classes on (channels, size, size) images, data: {format, path} (path may be
// empty), no augmentation, one epoch of SGD; `extra` lines are appended (top-level YAML).
std::string small_model_yaml(const std::string& format, const std::string& data_path, int64_t channels = 1,
                             int64_t size = 48, const std::string& extra = "");

// "" when `path` is a PNG file (signature, an IHDR chunk first with a non-zero size, IEND last),
// else what is wrong with it.
std::string png_problem(const std::filesystem::path& path);

// Every line of metrics.jsonl, parsed.
std::vector<nlohmann::json> read_metrics(const std::filesystem::path& run_dir);
// The value of `key` in the last line whose "event" is `event` (null when there is none).
nlohmann::json last_event(const std::vector<nlohmann::json>& lines, const std::string& event);

}  // namespace cnn::test
