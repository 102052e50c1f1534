// Workspace growth and CPU thread counts.
// Trap: OMP_NUM_THREADS is read when a CPU context is made (ExecContext::cpu(0)), not per op: our
// regions pass num_threads explicitly, so the OpenMP runtime's own reading of it would not count.
#include "core/exec_context.h"

#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>

#include "core/error.h"
#include "core/out_of_memory.h"

namespace cnn {

Workspace::~Workspace() { device_free(m_device, m_data); }

float* Workspace::get(size_t count) {
  // count + count / 2 floats must fit a byte count (a wrapped size would allocate too little).
  CNN_CHECK(count <= SIZE_MAX / (2 * sizeof(float)), "shared op workspace: {} floats do not fit a byte count", count);
  if (count > m_capacity) {
    const double old_bytes = double(m_capacity) * sizeof(float);
    device_free(m_device, m_data);
    m_data = nullptr;
    m_capacity = 0;
    // Grow by at least half again so a sequence of slightly larger requests reallocates rarely.
    size_t want = count + count / 2;
    m_data = static_cast<float*>(device_malloc(
        m_device, want * sizeof(float),
        fmt::format("shared op workspace (growing from {} for a call asking {})", format_byte_count(old_bytes),
                    format_byte_count(double(count) * sizeof(float)))));
    m_capacity = want;
  }
  return m_data;
}

ExecContext ExecContext::cpu(int num_threads) {
  ExecContext ctx;
  ctx.device = Device::cpu;
  ctx.num_threads = num_threads > 0 ? num_threads : default_cpu_threads().count;
  ctx.m_owned_workspace = std::make_shared<Workspace>(Device::cpu);
  ctx.workspace = ctx.m_owned_workspace.get();
  return ctx;
}

int ExecContext::threads() const { return num_threads > 0 ? num_threads : available_cores(); }

int available_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  const unsigned n = std::thread::hardware_concurrency();
  return n ? static_cast<int>(n) : 1;
}

CpuThreads cpu_threads_from(const char* omp_num_threads, int cores) {
  std::string text = omp_num_threads ? omp_num_threads : "";
  const size_t first = text.find_first_not_of(" \t");
  if (first == std::string::npos) return {std::max(1, cores), "cores"};  // unset or blank
  // The first value of a nested list ("4,2"): the outermost level's threads, which ours are.
  text = text.substr(first, text.find(',', first) - first);
  text.erase(text.find_last_not_of(" \t") + 1);
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE || v < 1 || v > 4096)
    CNN_THROW("OMP_NUM_THREADS='{}': expected a positive integer of at most 4096 (the CPU kernels' threads), got '{}'",
              omp_num_threads, text);
  return {static_cast<int>(v), "OMP_NUM_THREADS"};
}

CpuThreads default_cpu_threads() { return cpu_threads_from(std::getenv("OMP_NUM_THREADS"), available_cores()); }

}  // namespace cnn
