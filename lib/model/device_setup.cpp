// Device choice and context ownership (see device_setup.h).
#include "model/device_setup.h"

#include <spdlog/spdlog.h>

#include <cstdlib>
#include <thread>

#include "core/error.h"
#include "ops/blas_cpu.h"

namespace cnn {

static bool cuda_ready(const Graph& graph, std::string& why) {
  if (!cuda_available()) {
    why = cuda_device_description();
    return false;
  }
  for (int i = 0; i < graph.size(); ++i) {
    const Layer& l = *graph.node(i).layer;
    if (!l.supports(Backend::cuda) && !l.supports(Backend::cudnn)) {
      why = fmt::format("layer '{}' ({}) has no GPU implementation in this build", l.name(), l.type());
      return false;
    }
  }
  return true;
}

Device resolve_device(const std::string& requested, const Graph& graph) {
  std::string why;
  if (requested == "cpu") return Device::cpu;
  if (requested == "cuda") {
    if (!cuda_ready(graph, why)) throw ConfigError({"--device"}, "", "cuda requested but " + why);
    return Device::cuda;
  }
  if (requested != "auto")
    throw ConfigError({"--device"}, "", fmt::format("expected auto, cpu or cuda, found '{}'", requested));
  if (cuda_ready(graph, why)) return Device::cuda;
  spdlog::info("device auto: using the CPU ({})", why);
  return Device::cpu;
}

// The run's precision (train.precision, which every layer carries, or its own `precision:`), once.
static std::string precision_note(const Graph& graph, Device d) {
  bool tf32 = false;
  int bf16 = 0, f16 = 0;
  for (int i = 0; i < graph.size(); ++i) {
    tf32 = tf32 || graph.node(i).layer->math() == MathMode::tf32;
    bf16 += graph.node(i).layer->dtype() == DType::bf16;
    f16 += graph.node(i).layer->dtype() == DType::f16;
  }
  if (bf16 > 0 || f16 > 0) {
    auto stored = [&](int layers, const char* dtype) {
      return fmt::format("{} of {} layers store activations and gradients in {}", layers, graph.size(), dtype);
    };
    const std::string counts = bf16 == 0 ? stored(f16, "FP16")
                               : f16 == 0 ? stored(bf16, "BF16")
                                          : fmt::format("{}, {} of {} in FP16", stored(bf16, "BF16"), f16, graph.size());
    return fmt::format("{}: {} (channels-last); FP32 master weights, weight gradients, sums, batchnorm statistics, "
                       "loss and optimizer{}",
                       f16 > bf16 ? "fp16" : "bf16", counts, tf32 ? "; the FP32 layers may use TF32" : "");
  }
  if (!tf32) return "fp32 (plain FP32 math, no TF32)";
  if (d == Device::cpu) return "tf32 asked, but the CPU has no TF32: every op runs in FP32";
  return "tf32 (cuDNN convolutions and cuBLAS dense layers may use TF32 tensor cores with FP32 accumulation; our "
         "CUDA kernels, batchnorm, pooling, activations, loss and optimizer stay FP32)";
}

DeviceSetup::DeviceSetup(const std::string& requested, Graph& graph, bool deterministic)
    : DeviceSetup(resolve_device(requested, graph), graph, deterministic, 0, 0) {}

DeviceSetup::DeviceSetup(Device d, Graph& graph, bool deterministic, int gpu_index, int cpu_threads) {
  for (const auto& line : graph.choose_backends(d)) spdlog::debug("{}", line);
  if (d == Device::cuda) {
    m_cuda = std::make_unique<CudaContext>(gpu_index);
    m_ctx = &m_cuda->ctx();
    m_description = "cuda: " + cuda_device_description();
  } else {
    const CpuThreads resolved = cpu_threads > 0 ? CpuThreads{cpu_threads, "split between the host's ranks"}
                                                : default_cpu_threads();
    m_cpu = ExecContext::cpu(resolved.count);
    m_ctx = &m_cpu;
    m_description = fmt::format("cpu: {} threads ({})", m_cpu.threads(), resolved.source);
    spdlog::info("cpu: OpenBLAS {} kernels{}", blas_core_name(),
                 std::getenv("OPENBLAS_CORETYPE") ? " (OPENBLAS_CORETYPE)" : "");
  }
  m_ctx->deterministic = deterministic;
  spdlog::info("device: {}", m_description);
  spdlog::info("precision: {}", precision_note(graph, d));
  for (const std::string& line : graph.precision_notes()) spdlog::info("precision: {}", line);
}

AutotuneStats DeviceSetup::autotune(Graph& graph, int64_t batch, const AutotuneOptions& options) {
  m_ctx->workspace_limit_bytes = options.workspace_limit_bytes;
  AutotuneStats stats;
  autotune_graph(graph, *m_ctx, batch, options, &stats);
  const size_t bytes = planned_workspace_bytes(graph, *m_ctx, batch);
  if (bytes > 0 && m_ctx->workspace) m_ctx->workspace->get((bytes + sizeof(float) - 1) / sizeof(float));
  synchronize();
  return stats;
}

void DeviceSetup::synchronize() const {
  if (m_cuda) m_cuda->synchronize();
}

}  // namespace cnn
