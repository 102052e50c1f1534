// The parts of communicator.h every build has: launch detection, the single process, the
// synchronous mean (sum, then one division) and the cross-rank equality check.
#include "dist/communicator.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <map>

#include "core/error.h"
#include "dist/bucket_math.h"

namespace cnn {

Compression parse_compression(const std::string& text) {
  if (text == "none") return Compression::none;
  if (text == "bf16") return Compression::bf16;
  CNN_THROW("dist.compress is '{}', expected none or bf16", text);
}

static bool read_int(const char* text, int& out) {
  if (!text || !*text) return false;
  char* end = nullptr;
  long v = std::strtol(text, &end, 10);
  if (*end != '\0' || v < 0 || v > (1 << 30)) return false;
  out = static_cast<int>(v);
  return true;
}

LaunchInfo detect_launch(const std::function<const char*(const char*)>& env) {
  struct Vars {
    const char *size, *rank, *local_rank, *requires;  // `requires`: must also be set (or null)
  };
  static const Vars kVars[] = {
      {"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", nullptr},
      {"PMI_SIZE", "PMI_RANK", "MPI_LOCALRANKID", nullptr},
      {"MV2_COMM_WORLD_SIZE", "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_LOCAL_RANK", nullptr},
      {"SLURM_NTASKS", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_STEP_ID"},
  };
  LaunchInfo info;
  for (const Vars& v : kVars) {
    int size = 0;
    if (!read_int(env(v.size), size) || size < 1) continue;
    if (v.requires && !env(v.requires)) continue;
    info.launched = true;
    info.world_size = size;
    info.source = v.size;
    read_int(env(v.rank), info.rank);
    if (!read_int(env(v.local_rank), info.local_rank)) read_int(env("SLURM_LOCALID"), info.local_rank);
    return info;
  }
  return info;
}

LaunchInfo detect_launch() {
  return detect_launch([](const char* name) -> const char* { return std::getenv(name); });
}

void Communicator::allreduce_sum_f64(double* data, int64_t n, Device where) {
  if (size() == 1) return;
  CNN_THROW("the {} communicator has no all-reduce of doubles", kind());
}

void Communicator::allreduce_sum_bf16_host(uint16_t* data, int64_t n) {
  std::vector<float> wide(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) wide[size_t(i)] = bf16_to_float(data[i]);
  allreduce_sum(wide.data(), n, Device::cpu);
  pack_bf16_host(wide.data(), data, n);
}

void Communicator::mean_async(float* data, int64_t n, Device where, Compression c) {
  if (n <= 0) return;
  const auto t0 = std::chrono::steady_clock::now();
  mean_sync(data, n, where, c);
  m_exposed_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

double Communicator::take_exposed_ms() {
  const double v = m_exposed_ms;
  m_exposed_ms = 0;
  return v;
}

void Communicator::mean_sync(float* data, int64_t n, Device where, Compression c) {
  float* host = data;
  if (where == Device::cuda) {
    m_host_staging.resize(size_t(n));
    device_memcpy(m_host_staging.data(), Device::cpu, data, Device::cuda, size_t(n) * sizeof(float));
    host = m_host_staging.data();
  }
  const float world = static_cast<float>(size());
  if (c == Compression::bf16) {
    m_bf16_staging.resize(size_t(n));
    pack_bf16_host(host, m_bf16_staging.data(), n);
    allreduce_sum_bf16_host(m_bf16_staging.data(), n);
    unpack_bf16_divide_host(m_bf16_staging.data(), host, n, world);
  } else {
    allreduce_sum(host, n, Device::cpu);
    for (int64_t i = 0; i < n; ++i) host[i] /= world;
  }
  if (where == Device::cuda) device_memcpy(data, Device::cuda, host, Device::cpu, size_t(n) * sizeof(float));
}

namespace {

std::string this_host() {
  char name[256] = {0};
  if (gethostname(name, sizeof name - 1) != 0) return "localhost";
  return name;
}

class SingleCommunicator final : public Communicator {
 public:
  std::string kind() const override { return "single"; }
  int rank() const override { return 0; }
  int size() const override { return 1; }
  int local_rank() const override { return 0; }
  int local_size() const override { return 1; }
  std::string host() const override { return m_host; }
  void allreduce_sum(float*, int64_t, Device) override {}
  void broadcast(float*, int64_t, int root, Device) override { check_root(root); }
  void allreduce_sum_f64(double*, int64_t, Device) override {}
  void broadcast_bytes(void*, size_t, int root) override { check_root(root); }
  void barrier() override {}
  std::vector<std::string> allgather(const std::string& value) override { return {value}; }
  [[noreturn]] void abort(int code) override { std::_Exit(code); }

 protected:
  void allreduce_sum_bf16_host(uint16_t*, int64_t) override {}

 private:
  static void check_root(int root) { CNN_CHECK(root == 0, "broadcast from rank {} in a world of 1", root); }
  std::string m_host = this_host();
};

}  // namespace

std::unique_ptr<Communicator> make_single_communicator() { return std::make_unique<SingleCommunicator>(); }

void check_same_on_all_ranks(Communicator& comm, const std::string& what, const std::string& value) {
  std::vector<std::string> values = comm.allgather(value);
  std::vector<std::string> hosts = comm.allgather(comm.host());
  std::map<std::string, std::vector<int>> groups;
  for (size_t r = 0; r < values.size(); ++r) groups[values[r]].push_back(int(r));
  if (groups.size() <= 1) return;
  std::string detail;
  for (size_t r = 0; r < values.size(); ++r) {
    if (r != 0 && values[r] == values[0]) continue;
    detail += fmt::format("{}rank {} ({}) has {}", detail.empty() ? "" : ", ", r, hosts[r], values[r]);
  }
  CNN_THROW("{} differ between ranks: {}", what, detail);
}

}  // namespace cnn
