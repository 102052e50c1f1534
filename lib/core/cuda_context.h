// Owns the CUDA resources of one execution context: the device, a blocking stream, a cuBLAS
// handle (FP32 math, TF32 off unless asked) and a device workspace. Host-includable: no CUDA
// types here. In a build without CUDA, constructing one throws.
// Trap: the ExecContext returned by ctx() points into this object; keep it alive.
#pragma once

#include <memory>
#include <string>

#include "core/exec_context.h"

namespace cnn {

class CudaContext {
public:
  explicit CudaContext(int device = 0);
  ~CudaContext();
  CudaContext(const CudaContext&) = delete;
  CudaContext& operator=(const CudaContext&) = delete;
  const ExecContext& ctx() const { return m_ctx; }
  ExecContext& ctx() { return m_ctx; }
  void synchronize() const;  // waits for the stream; throws on an asynchronous error
  int device() const { return m_device; }
  // What the constructor's parts took (seconds, the start-up breakdown): the device's primary
  // context (cudaSetDevice creates it on CUDA 12+), the stream, the cuBLAS handle and workspace.
  struct Timings {
    double context_s = 0, stream_s = 0, cublas_s = 0;
  };
  const Timings& timings() const { return m_timings; }
  // Seconds cudnnCreate took; the handle is made on the first cuDNN call, -1 before it.
  double cudnn_handle_seconds() const;
  // The driver's kernel loading: "lazy" (each kernel's module loaded on its first launch, the
  // CUDA 12.2+ default), "eager" (all at context creation; CUDA_MODULE_LOADING=EAGER), or "unknown".
  static std::string module_loading();

private:
  int m_device = 0;
  Timings m_timings;
  ExecContext m_ctx;
  std::unique_ptr<Workspace> m_workspace;
  std::shared_ptr<ContextCache> m_cache;  // freed after the stream drains, before it is destroyed
  static constexpr size_t kCublasWorkspaceBytes = size_t(32) << 20;
  void* m_cublas_workspace = nullptr;  // given to cuBLAS with cublasSetWorkspace
};

}  // namespace cnn
