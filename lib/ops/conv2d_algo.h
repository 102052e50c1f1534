// Convolution implementations by name and direction: the one list the autotuner, `cnn-bench conv`,
// the conv2d layer's `algo:` key and the tests all read. Every implementation of every backend
// (our CUDA strategies, each cuDNN algorithm) is one ConvAlgo per direction it implements.
//
// Names: "<backend>:<strategy>", lower case, unique per direction, e.g. "cuda:implicit_gemm",
// "cuda:direct", "cuda:winograd", "cuda:im2col_gemm", "cuda:fft", "cudnn:implicit_precomp_gemm",
// "cudnn:winograd_nonfused", "cpu:im2col_gemm". The backend is the text before ':'.
//
// Operands (device memory for cuda/cudnn, host memory for cpu; layouts as in conv2d.h):
//   forward          reads x, w, b (b may be null)   writes y
//   backward_data    reads w, dy                     writes dx
//   backward_filter  reads x, dy                     writes dw, and db when db is not null
// Outputs are written, never accumulated. Work is queued on ctx.cuda_stream.
// Scratch memory comes from ctx.workspace; workspace_bytes() says how much one call takes, and the
// autotuner skips (and reports) an algorithm whose workspace exceeds ctx.workspace_limit_bytes.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "ops/backend.h"
#include "ops/conv2d.h"

namespace cnn {

enum class ConvDir { forward, backward_data, backward_filter };
const char* to_string(ConvDir d);  // "forward" | "backward_data" | "backward_filter"

struct ConvOperands {
  const float* x = nullptr;
  const float* w = nullptr;
  const float* b = nullptr;
  float* y = nullptr;
  const float* dy = nullptr;
  float* dx = nullptr;
  float* dw = nullptr;
  float* db = nullptr;
};

struct ConvAlgo {
  std::string name;  // "<backend>:<strategy>"
  Backend backend = Backend::cuda;
  ConvDir dir = ConvDir::forward;
  bool deterministic = true;  // same bits on every run (no atomics whose order varies)
  // Whether this algorithm computes this shape (cuDNN: whether the library supports it here).
  std::function<bool(const ExecContext&, const Conv2dShape&)> can_implement;
  // Scratch bytes one call needs for this shape (0 when none).
  std::function<size_t(const ExecContext&, const Conv2dShape&)> workspace_bytes;
  std::function<void(const ExecContext&, const Conv2dShape&, const ConvOperands&)> run;
};

// Providers, one per backend family; each returns every algorithm of every direction it has in
// this build (empty when the build lacks that backend).
std::vector<ConvAlgo> conv2d_cpu_algos();    // conv2d_algo.cpp
std::vector<ConvAlgo> conv2d_cuda_algos();   // our CUDA strategies (conv2d_algo_cuda.cpp / _nocuda.cpp)
std::vector<ConvAlgo> conv2d_cudnn_algos();  // every cuDNN algorithm (conv2d_cudnn.cpp / cudnn_ops_nocuda.cpp)
// Our accuracy rule on top of cuDNN's support answer, a pure function of the shape (so it can be
// checked without a GPU): false for cudnn:winograd_nonfused on filters larger than 3x3 (measured
// too inaccurate; see conv2d_cudnn.cpp), whose can_implement is then false. `name` is a listed
// cuDNN algorithm of `dir` ("cudnn:..."), else throws. Always false without cuDNN.
bool conv2d_cudnn_algo_accurate(ConvDir dir, const std::string& name, const Conv2dShape& sh);

// All of them, for one direction, in a fixed order (cpu, cuda, cudnn).
const std::vector<ConvAlgo>& conv2d_algos(ConvDir dir);
// The algorithm of that name and direction; throws cnn::Error listing the valid names otherwise.
const ConvAlgo& conv2d_algo(ConvDir dir, const std::string& name);

}  // namespace cnn
