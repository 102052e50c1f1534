// CUDA_CHECK for files that already include the CUDA runtime (.cu and *_cuda.cpp only).
// Throws cnn::Error with file:line, the expression and the decoded status.
#pragma once

#include <cuda_runtime.h>

#include "core/error.h"

#define CUDA_CHECK(expr)                                                                        \
  do {                                                                                          \
    cudaError_t cnn_status_ = (expr);                                                           \
    if (cnn_status_ != cudaSuccess) {                                                           \
      ::cnn::throw_error(__FILE__, __LINE__, ::fmt::format("CUDA error {} ({}) in {}",          \
                         cudaGetErrorName(cnn_status_), cudaGetErrorString(cnn_status_), #expr)); \
    }                                                                                           \
  } while (0)

// After a kernel launch: the launch error, reported with the op and layer it belongs to.
#define CUDA_CHECK_LAUNCH(what)                                                                 \
  do {                                                                                          \
    cudaError_t cnn_status_ = cudaGetLastError();                                               \
    if (cnn_status_ != cudaSuccess) {                                                           \
      ::cnn::throw_error(__FILE__, __LINE__, ::fmt::format("CUDA launch of {} failed: {} ({})", \
                         (what), cudaGetErrorName(cnn_status_), cudaGetErrorString(cnn_status_))); \
    }                                                                                           \
  } while (0)
