// The kernels the device ran over a window, each with its (demangled) name and its start and end
// on the device clock, kernels of replayed CUDA graphs included: CUPTI's activity API in CUDA
// builds. `cnn-bench model --breakdown` splits a training step with it (benchmark.h).
// Trap: one trace at a time per process (CUPTI's activity buffers are process-wide), and tracing
// itself adds some launch latency: the breakdown shows the traced step time beside the untraced one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cnn {

struct KernelRecord {
  std::string name;
  uint64_t start_ns = 0, end_ns = 0;
};

class KernelTrace {
 public:
  // Whether this build can trace (a CUDA build; CUPTI ships with every CUDA toolkit). Without it
  // start() throws cnn::Error saying so.
  static bool available();
  KernelTrace() = default;
  KernelTrace(const KernelTrace&) = delete;
  KernelTrace& operator=(const KernelTrace&) = delete;
  ~KernelTrace();
  // Waits for the device, then records every kernel that starts from now on. Throws cnn::Error when
  // CUPTI refuses (e.g. another profiler holds it).
  void start();
  // Waits for the device and returns the kernels that ran since start(), sorted by start time;
  // *window_ns (if given) is the device-clock time from start() to stop().
  std::vector<KernelRecord> stop(uint64_t* window_ns = nullptr);

 private:
  bool m_running = false;
  uint64_t m_t0 = 0;
};

// Total time covered by the union of the records' [start, end) intervals (overlapping kernels
// count once): the time the device was busy.
uint64_t busy_ns(const std::vector<KernelRecord>& records);

// The step-breakdown category of a kernel, from its name: "conv" (our convolution kernels and
// cuDNN's), "gemm" (cuBLAS and its nvjet kernels: dense layers), "batchnorm", "pool",
// "activation", "add/concat/dropout", "cast/pack" (dtype conversions, weight packing), "loss",
// "optimizer" (update, norm, clip, finiteness), "other".
std::string kernel_category(const std::string& name);

}  // namespace cnn
