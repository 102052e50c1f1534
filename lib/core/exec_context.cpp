// Workspace growth and CPU thread counts.
#include "core/exec_context.h"

#include <cstdint>
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
  ctx.num_threads = num_threads;
  ctx.m_owned_workspace = std::make_shared<Workspace>(Device::cpu);
  ctx.workspace = ctx.m_owned_workspace.get();
  return ctx;
}

int ExecContext::threads() const {
  if (num_threads > 0) return num_threads;
  unsigned n = std::thread::hardware_concurrency();
  return n ? static_cast<int>(n) : 1;
}

}  // namespace cnn
