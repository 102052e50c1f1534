// CUDA resources of an execution context (see cuda_context.h).
#include <cublas_v2.h>
#include <cuda.h>
#include <cuda_runtime.h>

#include <chrono>

#include "core/context_cache.h"
#include "core/cuda_check.h"
#include "core/cuda_context.h"
#include "cudnn/context.h"

namespace cnn {

#define CUBLAS_CHECK(expr)                                                                   \
  do {                                                                                       \
    cublasStatus_t s_ = (expr);                                                              \
    if (s_ != CUBLAS_STATUS_SUCCESS)                                                         \
      ::cnn::throw_error(__FILE__, __LINE__, ::fmt::format("cuBLAS error {} in {}", int(s_), #expr)); \
  } while (0)

static double seconds_since(std::chrono::steady_clock::time_point& t) {
  const auto now = std::chrono::steady_clock::now();
  const double s = std::chrono::duration<double>(now - t).count();
  t = now;
  return s;
}

CudaContext::CudaContext(int device) : m_device(device) {
  if (!cuda_available()) CNN_THROW("no usable GPU: {}", cuda_device_description());
  auto t = std::chrono::steady_clock::now();
  CUDA_CHECK(cudaSetDevice(device));
  CUDA_CHECK(cudaFree(nullptr));  // makes sure the primary context exists (older runtimes make it lazily)
  m_timings.context_s = seconds_since(t);
  cudaStream_t stream = nullptr;
  // A blocking stream: plain cudaMemcpy calls (legacy default stream) are ordered with it.
  CUDA_CHECK(cudaStreamCreate(&stream));
  m_timings.stream_s = seconds_since(t);
  cublasHandle_t blas = nullptr;
  CUBLAS_CHECK(cublasCreate(&blas));
  CUBLAS_CHECK(cublasSetStream(blas, stream));
  // Plain FP32 by default (precision fp32 is bit for bit as before TF32 existed); dense sets
  // CUBLAS_TF32_TENSOR_OP_MATH for its own GEMMs under precision tf32 and puts this back.
  CUBLAS_CHECK(cublasSetMathMode(blas, CUBLAS_PEDANTIC_MATH));
  // A fixed cuBLAS workspace, so no call allocates while a CUDA graph is being captured (NVIDIA's
  // CUDA-graph guidance for cuBLAS; 32 MiB covers Hopper's largest recommended size).
  m_cublas_workspace = device_malloc(Device::cuda, kCublasWorkspaceBytes, "cuBLAS workspace");
  CUBLAS_CHECK(cublasSetWorkspace(blas, m_cublas_workspace, kCublasWorkspaceBytes));
  m_timings.cublas_s = seconds_since(t);
  std::string cudnn_error;
  cudnn::State* cudnn_state = cudnn::create_state(stream, &cudnn_error);
  if (!cudnn_state) CNN_THROW("CUDA context: {}", cudnn_error);
  m_workspace = std::make_unique<Workspace>(Device::cuda);
  m_ctx.device = Device::cuda;
  m_ctx.cuda_stream = stream;
  m_ctx.cublas_handle = blas;
  m_ctx.cudnn_handle = cudnn_state;
  m_ctx.workspace = m_workspace.get();
  m_cache = std::make_shared<ContextCache>();
  m_ctx.cache = m_cache.get();
}

CudaContext::~CudaContext() {
  if (m_ctx.cuda_stream) cudaStreamSynchronize(static_cast<cudaStream_t>(m_ctx.cuda_stream));
  m_cache.reset();  // cuFFT plans and the like, once no queued work uses them
  m_workspace.reset();
  cudnn::destroy_state(static_cast<cudnn::State*>(m_ctx.cudnn_handle));
  if (m_ctx.cublas_handle) cublasDestroy(static_cast<cublasHandle_t>(m_ctx.cublas_handle));
  device_free(Device::cuda, m_cublas_workspace);
  if (m_ctx.cuda_stream) cudaStreamDestroy(static_cast<cudaStream_t>(m_ctx.cuda_stream));
}

double CudaContext::cudnn_handle_seconds() const {
  return cudnn::handle_seconds(static_cast<const cudnn::State*>(m_ctx.cudnn_handle));
}

std::string CudaContext::module_loading() {
  // The driver's own answer (CUDA_MODULE_LOADING unset means its default), found through the
  // runtime so the program needs no link to libcuda.
  using GetMode = CUresult (*)(CUmoduleLoadingMode*);
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion("cuModuleGetLoadingMode", &fn, 12000, cudaEnableDefault, &found) !=
          cudaSuccess ||
      found != cudaDriverEntryPointSuccess || !fn) {
    cudaGetLastError();
    return "unknown";
  }
  CUmoduleLoadingMode mode{};
  if (reinterpret_cast<GetMode>(fn)(&mode) != CUDA_SUCCESS) return "unknown";
  return mode == CU_MODULE_LAZY_LOADING ? "lazy" : "eager";
}

void CudaContext::synchronize() const {
  CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(m_ctx.cuda_stream)));
}

}  // namespace cnn
