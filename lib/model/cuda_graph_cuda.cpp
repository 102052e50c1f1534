// CUDA graph capture and replay, pinned memory and stream-ordered copies (see cuda_graph.h).
#include <cuda_runtime.h>

#include <chrono>

#include "core/cuda_check.h"
#include "core/device.h"
#include "model/cuda_graph.h"

namespace cnn {

static cudaStream_t stream_of(const ExecContext& ctx, const char* what) {
  CNN_CHECK(ctx.device == Device::cuda && ctx.cuda_stream != nullptr, "{}: needs a CUDA context with a stream", what);
  return static_cast<cudaStream_t>(ctx.cuda_stream);
}

PinnedBuffer::PinnedBuffer(size_t bytes, const std::string& what) : m_bytes(bytes) {
  if (!bytes) return;
  cudaError_t e = cudaMallocHost(&m_data, bytes);
  if (e != cudaSuccess) {
    cudaGetLastError();
    m_data = nullptr;
    CNN_THROW("{}: cannot allocate {} bytes of pinned host memory ({})", what, bytes, cudaGetErrorString(e));
  }
}

PinnedBuffer::~PinnedBuffer() {
  if (m_data) cudaFreeHost(m_data);
}

void copy_async(const ExecContext& ctx, void* dst, const void* src, size_t bytes) {
  if (!bytes) return;
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_of(ctx, "copy_async")));
}

void stream_synchronize(const ExecContext& ctx) {
  CUDA_CHECK(cudaStreamSynchronize(stream_of(ctx, "stream_synchronize")));
}

CudaGraph::~CudaGraph() { reset(); }

void CudaGraph::reset() noexcept {
  if (m_exec) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(m_exec));
  if (m_graph) cudaGraphDestroy(static_cast<cudaGraph_t>(m_graph));
  m_exec = m_graph = nullptr;
  m_nodes = 0;
}

void CudaGraph::begin_capture(const ExecContext& ctx) {
  reset();
  CUDA_CHECK(cudaStreamBeginCapture(stream_of(ctx, "CUDA graph capture"), cudaStreamCaptureModeThreadLocal));
}

void CudaGraph::end_capture(const ExecContext& ctx) {
  cudaGraph_t graph = nullptr;
  cudaError_t e = cudaStreamEndCapture(stream_of(ctx, "CUDA graph capture"), &graph);
  if (e != cudaSuccess) {
    cudaGetLastError();
    if (graph) cudaGraphDestroy(graph);
    CNN_THROW("CUDA graph capture failed: {} ({})", cudaGetErrorName(e), cudaGetErrorString(e));
  }
  m_graph = graph;
  CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &m_nodes));
  cudaGraphExec_t exec = nullptr;
  const auto t0 = std::chrono::steady_clock::now();
  e = cudaGraphInstantiate(&exec, graph, 0);
  m_instantiate_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (e != cudaSuccess) {
    cudaGetLastError();
    reset();
    CNN_THROW("CUDA graph instantiation failed: {} ({})", cudaGetErrorName(e), cudaGetErrorString(e));
  }
  m_exec = exec;
}

void CudaGraph::abort_capture(const ExecContext& ctx) noexcept {
  cudaStream_t stream = static_cast<cudaStream_t>(ctx.cuda_stream);
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (stream && cudaStreamIsCapturing(stream, &status) == cudaSuccess && status != cudaStreamCaptureStatusNone) {
    cudaGraph_t graph = nullptr;
    cudaStreamEndCapture(stream, &graph);
    if (graph) cudaGraphDestroy(graph);
  }
  cudaGetLastError();
  reset();
}

void CudaGraph::launch(const ExecContext& ctx) {
  CNN_CHECK(m_exec != nullptr, "CUDA graph launch before a successful capture");
  CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(m_exec), stream_of(ctx, "CUDA graph launch")));
}

}  // namespace cnn
