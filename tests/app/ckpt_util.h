// Helpers of the checkpoint and resume end-to-end tests: start a real program with extra
// environment variables or a file-size limit, wait for it or signal it; compare checkpoints
// tensor by tensor; build safetensors bytes by hand. Trap: namespace ckpt keeps these apart from
// app_util's run_program, since both end up in the one test_app executable.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/test_util.h"

namespace cnn::test::ckpt {

struct Finished {
  int exit_code = -1;  // the exit status, or 128 + signal when killed by one
  std::string out, err, command;
  std::string describe() const;  // for failure messages
};

struct SpawnOptions {
  std::vector<std::pair<std::string, std::string>> env;  // set (or replaced) in the child
  int64_t file_size_limit = -1;  // RLIMIT_FSIZE in bytes for the child (SIGXFSZ ignored); -1: none
};

// A program of CNN_BUILD_DIR/app started in the background; stdout and stderr go to files.
class Process {
 public:
  Process(const std::string& program, const std::vector<std::string>& args, const SpawnOptions& opt = {});
  ~Process();  // kills the child (SIGKILL) if still running
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;
  pid_t pid() const { return m_pid; }
  void signal(int sig);
  Finished wait();

 private:
  TempDir m_dir{"cnn-proc"};
  pid_t m_pid = -1;
  std::string m_command;
};

Finished run(const std::string& program, const std::vector<std::string>& args, const SpawnOptions& opt = {});

// Every tensor of two safetensors files whose bytes differ, plus names in one file only; "" when
// all tensors are byte-identical (metadata is not compared).
std::string tensor_differences(const std::string& a, const std::string& b);

// metrics.jsonl epoch lines by epoch number.
std::map<int64_t, nlohmann::json> epoch_lines(const std::filesystem::path& run_dir);

// A safetensors file from a header text and data bytes: u64 LE length, header, data.
std::string safetensors_bytes(const std::string& header, const std::string& data);
std::string safetensors_bytes_with_length(uint64_t declared_length, const std::string& header, const std::string& data);

// The model files of models/, sorted.
std::vector<std::string> bundled_models();
// --set overrides that narrow a model of more than a million parameters without grouped
// convolutions (4 filters a conv, 8 units a hidden dense layer, 10 classes instead of 1000 unnamed
// ones): the same layer types, keys and defaults, a fraction of the arithmetic and checkpoint.
std::vector<std::string> narrowing(const std::string& model);

std::string read_file(const std::filesystem::path& p);
void write_file(const std::filesystem::path& p, const std::string& bytes);

}  // namespace cnn::test::ckpt
