// Program runner and fixtures of the end-to-end tests (see app_util.h).
#include "app_util.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>

#include <fmt/format.h>

#include "data/sources.h"
#include "data/synthetic_faces.h"
#include "support/test_util.h"

namespace cnn::test {

namespace fs = std::filesystem;

std::string ProgramResult::describe() const {
  return fmt::format("$ {}\nexit code {}\n--- stdout ---\n{}--- stderr ---\n{}", command, exit_code, out, err);
}

std::string program_path(const std::string& name) { return (fs::path(CNN_BUILD_DIR) / "app" / name).string(); }

ProgramResult run_program(const std::string& program, const std::vector<std::string>& args, const fs::path& cwd) {
  ProgramResult r;
  r.command = program;
  for (const auto& a : args) r.command += " " + a;
  if (!cwd.empty()) r.command = "(cd " + cwd.string() + " && " + r.command + ")";
  // Temporary files rather than pipes: a chatty program can't fill a pipe and block.
  TempDir capture("cnn-run");
  const std::string out_path = (capture / "out").string(), err_path = (capture / "err").string();
  std::vector<std::string> argv_s{program};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = fork();
  if (pid < 0) {
    r.err = "fork failed";
    return r;
  }
  if (pid == 0) {
    int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (out < 0 || err < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0) _exit(125);
    if (!cwd.empty() && chdir(cwd.c_str()) != 0) _exit(126);
    execv(program.c_str(), argv.data());
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
  }
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = read_text_file(out_path);
  r.err = read_text_file(err_path);
  if (r.exit_code == 127 && r.err.empty()) r.err = "could not execute " + program + " (not built?)";
  return r;
}

void write_fer_csv(const fs::path& path, int64_t train, int64_t val, int64_t test, uint64_t seed) {
  std::ofstream f(path, std::ios::binary);
  f << "emotion,pixels,Usage\n";
  const char* usage[3] = {"Training", "PublicTest", "PrivateTest"};
  const int64_t counts[3] = {train, val, test};
  for (int s = 0; s < 3; ++s) {
    if (counts[s] == 0) continue;
    Dataset d = make_synthetic_faces(counts[s], 7, 1, 48, 48, seed + uint64_t(s));
    for (int64_t i = 0; i < d.size(); ++i)
      f << fer2013_csv_row(d.labels[size_t(i)], d.sample(i), d.sample_bytes(), usage[s]) << "\n";
  }
}

std::string small_model_yaml(const std::string& format, const std::string& data_path, int64_t channels, int64_t size,
                             const std::string& extra) {
  std::string data = "data: {format: " + format + (data_path.empty() ? "" : ", path: " + data_path) + "}\n";
  return fmt::format(
             "name: e2e\n"
             "input: {{channels: {}, height: {}, width: {}}}\n"
             "classes: [angry, disgust, fear, happy, sad, surprise, neutral]\n"
             "layers:\n"
             "  - {{name: conv1, type: conv2d, filters: 4, kernel: 3, stride: 2, padding: 1}}\n"
             "  - {{name: relu1, type: relu}}\n"
             "  - {{name: pool1, type: maxpool, kernel: 2}}\n"
             "  - {{name: fc, type: dense, units: 7}}\n",
             channels, size, size) +
         data + "train: {epochs: 1, batch_size: 32, optimizer: {type: sgd, lr: 0.05}}\n" + extra;
}

std::vector<nlohmann::json> read_metrics(const fs::path& run_dir) {
  std::vector<nlohmann::json> lines;
  std::istringstream in(read_text_file(run_dir / "metrics.jsonl"));
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

nlohmann::json last_event(const std::vector<nlohmann::json>& lines, const std::string& event) {
  for (auto it = lines.rbegin(); it != lines.rend(); ++it)
    if (it->value("event", "") == event) return *it;
  return nullptr;
}

namespace {

uint32_t big_endian_u32(const std::string& s, size_t at) {
  return uint32_t(uint8_t(s[at])) << 24 | uint32_t(uint8_t(s[at + 1])) << 16 | uint32_t(uint8_t(s[at + 2])) << 8 |
         uint32_t(uint8_t(s[at + 3]));
}

}  // namespace

std::string png_problem(const std::filesystem::path& path) {
  if (!std::filesystem::exists(path)) return path.string() + " does not exist";
  std::ifstream f(path, std::ios::binary);
  const std::string b((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (b.size() < 8 + 25 + 12 || b.compare(0, 8, "\x89PNG\r\n\x1a\n") != 0) return path.string() + ": no PNG signature";
  if (big_endian_u32(b, 8) != 13 || b.compare(12, 4, "IHDR") != 0) return path.string() + ": no IHDR chunk first";
  if (big_endian_u32(b, 16) == 0 || big_endian_u32(b, 20) == 0) return path.string() + ": zero width or height";
  if (b.compare(b.size() - 8, 4, "IEND") != 0) return path.string() + ": does not end with IEND";
  return "";
}

}  // namespace cnn::test
