// Stand-ins for cuda_graph_cuda.cpp in a build without CUDA: every entry point throws, so a
// CUDA-graph step fails loudly; the CPU path never reaches them.
#include "core/error.h"
#include "model/cuda_graph.h"

namespace cnn {

PinnedBuffer::PinnedBuffer(size_t bytes, const std::string& what) {
  CNN_THROW("{}: pinned host memory needs a CUDA build", what);
}
PinnedBuffer::~PinnedBuffer() = default;
void copy_async(const ExecContext& ctx, void* dst, const void* src, size_t bytes) {
  CNN_THROW("copy_async called but this build has no CUDA");
}
void stream_synchronize(const ExecContext& ctx) { CNN_THROW("stream_synchronize called but this build has no CUDA"); }
CudaGraph::~CudaGraph() = default;
void CudaGraph::reset() noexcept {}
void CudaGraph::begin_capture(const ExecContext& ctx) { CNN_THROW("CUDA graph capture needs a CUDA build"); }
void CudaGraph::end_capture(const ExecContext& ctx) { CNN_THROW("CUDA graph capture needs a CUDA build"); }
void CudaGraph::abort_capture(const ExecContext& ctx) noexcept {}
void CudaGraph::launch(const ExecContext& ctx) { CNN_THROW("CUDA graph launch needs a CUDA build"); }

}  // namespace cnn
