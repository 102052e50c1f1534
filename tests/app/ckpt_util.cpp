// Checkpoint/resume end-to-end helpers (see ckpt_util.h).
#include "app/ckpt_util.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>

#include "checkpoint/safetensors.h"
#include "config/model_spec.h"
#include "graph/graph.h"
#include "layers/registry.h"

extern char** environ;

namespace cnn::test::ckpt {

std::string Finished::describe() const {
  return "command: " + command + "\nexit code: " + std::to_string(exit_code) + "\n--- stdout ---\n" + out +
         "\n--- stderr ---\n" + err;
}

Process::Process(const std::string& program, const std::vector<std::string>& args, const SpawnOptions& opt) {
  std::string path = std::string(CNN_BUILD_DIR) + "/app/" + program;
  m_command = path;
  for (const auto& a : args) m_command += " '" + a + "'";
  // Everything the child needs is built before fork: only async-signal-safe calls after it.
  std::vector<std::string> argv_s{path};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<std::string> env_s;
  std::set<std::string> replaced;
  for (const auto& [k, v] : opt.env) env_s.push_back(k + "=" + v), replaced.insert(k);
  for (char** e = environ; *e; ++e) {
    std::string s(*e);
    if (!replaced.count(s.substr(0, s.find('=')))) env_s.push_back(s);
  }
  std::vector<char*> argv_p, env_p;
  for (auto& s : argv_s) argv_p.push_back(s.data());
  for (auto& s : env_s) env_p.push_back(s.data());
  argv_p.push_back(nullptr);
  env_p.push_back(nullptr);
  std::string out = (m_dir / "out").string(), err = (m_dir / "err").string();
  m_pid = ::fork();
  if (m_pid < 0) throw std::runtime_error("fork failed");
  if (m_pid == 0) {
    int fo = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int fe = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fo < 0 || fe < 0) ::_exit(126);
    ::dup2(fo, 1), ::dup2(fe, 2);
    if (opt.file_size_limit >= 0) {
      ::signal(SIGXFSZ, SIG_IGN);  // stays ignored across exec: writes fail with EFBIG instead
      struct rlimit rl {
        rlim_t(opt.file_size_limit), rlim_t(opt.file_size_limit)
      };
      ::setrlimit(RLIMIT_FSIZE, &rl);
    }
    ::execve(path.c_str(), argv_p.data(), env_p.data());
    ::_exit(127);
  }
}

Process::~Process() {
  if (m_pid > 0) {
    ::kill(m_pid, SIGKILL);
    int status = 0;
    ::waitpid(m_pid, &status, 0);
  }
}

void Process::signal(int sig) {
  if (m_pid > 0) ::kill(m_pid, sig);
}

Finished Process::wait() {
  Finished f;
  f.command = m_command;
  int status = 0;
  if (m_pid > 0 && ::waitpid(m_pid, &status, 0) == m_pid) {
    f.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : -1;
  }
  m_pid = -1;
  f.out = read_file(m_dir / "out");
  f.err = read_file(m_dir / "err");
  return f;
}

Finished run(const std::string& program, const std::vector<std::string>& args, const SpawnOptions& opt) {
  Process p(program, args, opt);
  return p.wait();
}

std::string tensor_differences(const std::string& a, const std::string& b) {
  SafetensorsFile fa = SafetensorsFile::open(a), fb = SafetensorsFile::open(b);
  std::string out;
  for (const TensorInfo& t : fa.tensors()) {
    if (!fb.contains(t.name)) {
      out += "only in a: " + t.name + "\n";
      continue;
    }
    if (fa.read_bytes(t.name) != fb.read_bytes(t.name) || t.shape != fb.info(t.name).shape)
      out += "differs: " + t.name + "\n";
  }
  for (const TensorInfo& t : fb.tensors())
    if (!fa.contains(t.name)) out += "only in b: " + t.name + "\n";
  return out;
}

std::map<int64_t, nlohmann::json> epoch_lines(const std::filesystem::path& run_dir) {
  std::map<int64_t, nlohmann::json> out;
  std::istringstream in(read_file(run_dir / "metrics.jsonl"));
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    nlohmann::json j = nlohmann::json::parse(line);
    if (j.value("event", "") == "epoch") out[j.at("epoch").get<int64_t>()] = j;
  }
  return out;
}

std::string safetensors_bytes_with_length(uint64_t declared_length, const std::string& header,
                                          const std::string& data) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[size_t(i)] = char((declared_length >> (8 * i)) & 0xff);
  return out + header + data;
}

std::string safetensors_bytes(const std::string& header, const std::string& data) {
  return safetensors_bytes_with_length(header.size(), header, data);
}

std::string read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

void write_file(const std::filesystem::path& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << bytes;
}

std::vector<std::string> bundled_models() {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(std::filesystem::path(CNN_SOURCE_DIR) / "models"))
    if (e.path().extension() == ".yaml") out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

// (A grouped conv's groups must divide its channels, so those models keep theirs.)
std::vector<std::string> narrowing(const std::string& model) {
  ModelSpec spec = load_model_spec(model);
  if (Graph::build(spec)->trainable_count() < 1000000) return {};
  std::vector<std::string> sets;
  const LayerSpec* last_dense = nullptr;
  for (const LayerSpec& l : spec.layers)
    if (l.type == "dense") last_dense = &l;
  for (const LayerSpec& l : spec.layers) {
    if (l.type == "conv2d") {
      if (l.attrs.has("groups") && l.attrs["groups"].integer() != 1) return {};
      sets.push_back(fmt::format("layers.{}.filters=4", l.name));
    } else if (l.type == "dense" && &l != last_dense) {
      sets.push_back(fmt::format("layers.{}.units=8", l.name));
    } else if (&l == last_dense && spec.classes.empty()) {  // 1000 unnamed classes: 10 will do
      sets.push_back(fmt::format("layers.{}.units=10", l.name));
    }
  }
  return sets;
}

}  // namespace cnn::test::ckpt
