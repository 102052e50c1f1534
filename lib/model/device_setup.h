// Picks the device of a run (--device auto|cpu|cuda) and owns its execution context.
// auto = cuda when a GPU is usable and every layer has a GPU implementation, else cpu; the
// choice and its reason are logged once. An explicit cuda that can't be honoured is an error.
#pragma once

#include <memory>
#include <string>

#include "core/cuda_context.h"
#include "core/exec_context.h"
#include "graph/graph.h"
#include "tune/autotune.h"

namespace cnn {

Device resolve_device(const std::string& requested, const Graph& graph);

class DeviceSetup {
 public:
  // Resolves the device, chooses every layer's backend and creates the context.
  DeviceSetup(const std::string& requested, Graph& graph, bool deterministic);
  // For a device already resolved (data-parallel ranks): GPU `gpu_index`, or `cpu_threads` CPU
  // threads (0 = default_cpu_threads(): OMP_NUM_THREADS, else the cores).
  DeviceSetup(Device device, Graph& graph, bool deterministic, int gpu_index, int cpu_threads);
  DeviceSetup(const DeviceSetup&) = delete;
  DeviceSetup& operator=(const DeviceSetup&) = delete;
  const ExecContext& ctx() const { return *m_ctx; }
  Device device() const { return m_ctx->device; }
  void synchronize() const;
  // Resolves conv plans and measured backends for `batch` (tune/autotune.h), sets the context's
  // workspace limit and grows the workspace to what the chosen algorithms take. Call before
  // building the Executor (it binds the layers' parameters; tuning binds scratch ones).
  // Returns what the tuner took from its cache and what it timed.
  AutotuneStats autotune(Graph& graph, int64_t batch, const AutotuneOptions& options = AutotuneOptions{});
  std::string description() const { return m_description; }
  const CudaContext* cuda() const { return m_cuda.get(); }  // null on the CPU

 private:
  std::unique_ptr<CudaContext> m_cuda;
  ExecContext m_cpu;
  ExecContext* m_ctx = nullptr;
  std::string m_description;
};

}  // namespace cnn
