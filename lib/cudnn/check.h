// CUDNN_CHECK: throws cnn::Error with file:line, the expression and cuDNN's decoded status.
// For lib/cudnn and lib/ops/*_cudnn.cpp only (includes cudnn.h).
#pragma once

#include <cudnn.h>

#include "core/error.h"

#define CUDNN_CHECK(expr)                                                                                \
  do {                                                                                                   \
    cudnnStatus_t cnn_cudnn_status_ = (expr);                                                            \
    if (cnn_cudnn_status_ != CUDNN_STATUS_SUCCESS) {                                                     \
      ::cnn::throw_error(__FILE__, __LINE__,                                                             \
                         ::fmt::format("cuDNN error {} ({}) in {}", static_cast<int>(cnn_cudnn_status_), \
                                       cudnnGetErrorString(cnn_cudnn_status_), #expr));                  \
    }                                                                                                    \
  } while (0)
