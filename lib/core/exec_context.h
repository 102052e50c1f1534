// Everything an op needs besides its operands: the device, CPU threads, the CUDA stream and
// library handles (opaque here so no CUDA header leaks), and a scratch workspace.
// Trap: contexts are passed by const reference, but the workspace they point to is shared and
// mutable: an op may use it only for the duration of one call.
#pragma once

#include <cstddef>
#include <memory>

#include "core/device.h"

namespace cnn {

class ContextCache;  // core/context_cache.h

// Grow-only scratch memory on one device.
class Workspace {
public:
  explicit Workspace(Device device = Device::cpu) : m_device(device) {}
  ~Workspace();
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  // At least `count` floats, valid until the next call to get().
  float* get(size_t count);
  size_t capacity_bytes() const { return m_capacity * sizeof(float); }
  Device device() const { return m_device; }

private:
  Device m_device;
  float* m_data = nullptr;
  size_t m_capacity = 0;
};

struct ExecContext {
  Device device = Device::cpu;
  int num_threads = 0;            // CPU threads for fast CPU ops; 0 = all cores
  bool deterministic = false;     // forbid algorithms whose results depend on scheduling
  void* cuda_stream = nullptr;    // cudaStream_t
  void* cublas_handle = nullptr;  // cublasHandle_t
  void* cudnn_handle = nullptr;   // cnn::cudnn::State* (lib/cudnn/state.h): the cudnnHandle_t and its caches
  Workspace* workspace = nullptr;
  ContextCache* cache = nullptr;  // per-context op state (cuFFT plans); null in CPU contexts
  size_t workspace_limit_bytes = size_t(1) << 30;  // most scratch one conv algorithm may take

  // A CPU context with its own workspace (tests, tools); num_threads 0 resolves
  // default_cpu_threads() now (so it throws on a malformed OMP_NUM_THREADS).
  static ExecContext cpu(int num_threads = 0);
  // Threads to use for a parallel CPU region: num_threads, or the cores when it is 0.
  int threads() const;

private:
  std::shared_ptr<Workspace> m_owned_workspace;
};

// The CPU thread count a run uses when none is given, and where it came from.
struct CpuThreads {
  int count = 1;
  const char* source = "cores";  // "OMP_NUM_THREADS" | "cores"
};
// OMP_NUM_THREADS when set (its first value, as the OpenMP runtime reads "4,2"), else the cores this
// process may run on (its affinity mask: taskset and cpusets count). Throws cnn::Error naming the
// variable when it is set but is not a positive integer. cpu_threads_from is the same rule on given
// inputs (`omp_num_threads` null when unset), for the tests.
CpuThreads default_cpu_threads();
CpuThreads cpu_threads_from(const char* omp_num_threads, int cores);
// The cores this process may run on (at least 1).
int available_cores();


}  // namespace cnn
